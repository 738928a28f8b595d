"""Filesystem access by URI: local paths and ``file:`` URIs, ``s3a://`` and ``s3://`` (through
pyarrow's filesystems, as pyiceberg's ``io`` does). Every path operation on table data goes
through here; nothing else calls ``os`` on a data path.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyarrow import fs as pafs

from airflow_provider_staged.storage.s3 import S3_SCHEMES, S3Options

LOCAL_SCHEMES = ("", "file")
SUPPORTED_SCHEMES = ("file", *S3_SCHEMES)


class StorageError(ValueError):
    """A location that cannot be used: unknown scheme, no credentials, no such bucket."""


def normalize_location(location: str) -> str:
    """One spelling per location: ``file:/a/b`` for local paths, no trailing slash."""
    parsed = urlparse(location)
    if parsed.scheme in LOCAL_SCHEMES:
        return "file:" + parsed.path.rstrip("/")
    return location.rstrip("/")


def is_local(location: str) -> bool:
    return urlparse(location).scheme in LOCAL_SCHEMES


def local_path(location: str) -> Path:
    """The local path of a ``file:`` URI or plain path (for code that needs a real directory)."""
    if not is_local(location):
        raise StorageError(f"location {_shown(location)!r} is not on a local filesystem")
    return Path(urlparse(location).path)


_s3_lock = threading.Lock()
_s3_options: dict[str | None, S3Options] = {}  # by bucket; None: every other bucket


def configure_s3(options: S3Options, bucket: str | None = None) -> None:
    """Use ``options`` for ``bucket`` (or for every bucket without its own) in this process."""
    with _s3_lock:
        _s3_options[bucket] = options
        _s3_filesystem.cache_clear()


def s3_options(bucket: str) -> S3Options:
    """The options for ``bucket``: configured, or else from the environment."""
    with _s3_lock:
        return _s3_options.get(bucket) or _s3_options.get(None) or S3Options.from_env()


def warehouse_s3_env(location: str) -> dict[str, str]:
    """The environment that gives a child process (``spark-submit``) the S3 options of
    ``location``'s bucket; empty for other locations."""
    parsed = urlparse(location)
    return s3_options(parsed.netloc).environment() if parsed.scheme in S3_SCHEMES else {}


@functools.lru_cache(maxsize=16)
def _s3_filesystem(options: S3Options) -> pafs.FileSystem:
    return options.filesystem()


def resolve(location: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for ``location`` and the path in it (local, or S3 with its options)."""
    parsed = urlparse(location)
    if parsed.scheme in LOCAL_SCHEMES:
        return pafs.LocalFileSystem(), parsed.path
    if parsed.scheme in S3_SCHEMES:
        return _s3_filesystem(s3_options(parsed.netloc)), f"{parsed.netloc}{parsed.path}".rstrip("/")
    raise StorageError(
        f"location {_shown(location)!r}: unsupported scheme {parsed.scheme!r} "
        f"(supported: {', '.join(SUPPORTED_SCHEMES)})"
    )


def _shown(location: str) -> str:
    """``location`` without any user info (``s3a://key:secret@bucket`` must never be printed)."""
    parsed = urlparse(location)
    return parsed._replace(netloc=parsed.hostname or "").geturl() if parsed.username else location


def check_location(location: str) -> None:
    """Refuse a location this process cannot write, in one line and before any work: an unknown
    scheme, user info in the URI, S3 without credentials, a bucket that does not exist."""
    parsed = urlparse(location)
    if parsed.username or parsed.password:
        raise StorageError(f"location {_shown(location)!r}: credentials do not belong in a location")
    resolve(location)  # the scheme
    if parsed.scheme in S3_SCHEMES:
        _check_bucket(parsed.scheme, parsed.netloc, s3_options(parsed.netloc))


@functools.lru_cache(maxsize=64)
def _check_bucket(scheme: str, bucket: str, options: S3Options) -> None:
    """Cached per process on success only (an error raises, and is not cached)."""
    where = f"{scheme}://{bucket}"
    if not bucket:
        raise StorageError(f"location {where!r}: no bucket")
    if not options.has_credentials:
        raise StorageError(
            f"location {where!r}: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "or name an Airflow aws connection in the staged connection's aws_conn_id)"
        )
    try:
        found = _s3_filesystem(options).get_file_info(bucket)
    except OSError as error:
        reason = "access denied" if "ACCESS_DENIED" in str(error) else str(error).splitlines()[0]
        raise StorageError(f"location {where!r}: bucket {bucket!r} cannot be read: {reason}") from None
    if found.type == pafs.FileType.NotFound:
        raise StorageError(f"location {where!r}: bucket {bucket!r} does not exist")


def join(location: str, *names: str) -> str:
    return "/".join([normalize_location(location), *names])


@dataclass(frozen=True)
class Entry:
    name: str
    location: str
    is_dir: bool
    mtime: float
    size: int = 0


def list_dir(location: str) -> list[Entry]:
    """The direct children of ``location`` (empty when it does not exist)."""
    filesystem, path = resolve(location)
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
    return [
        Entry(
            name=info.base_name,
            location=join(location, info.base_name),
            is_dir=info.type == pafs.FileType.Directory,
            mtime=info.mtime.timestamp() if info.mtime else 0.0,
            size=info.size or 0,
        )
        for info in filesystem.get_file_info(selector)
    ]


def delete_dir(location: str) -> None:
    """Delete a directory tree; nothing to do when it is already gone."""
    filesystem, path = resolve(location)
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_dir(path)


def remove_empty_dir(location: str) -> None:
    """Remove a local directory if it is empty; ``rmdir`` checks and removes in one step, so a
    file written meanwhile is never lost. Elsewhere nothing is done (object stores keep no
    empty directories; other filesystems have no such one-step call here)."""
    if is_local(location):
        with contextlib.suppress(OSError):  # not empty, gone already, or not a directory
            os.rmdir(urlparse(location).path)


def exists(location: str) -> bool:
    filesystem, path = resolve(location)
    return filesystem.get_file_info(path).type != pafs.FileType.NotFound


def read_text(location: str) -> str:
    filesystem, path = resolve(location)
    with filesystem.open_input_stream(path) as stream:
        return stream.read().decode()


def read_bytes(location: str) -> bytes:
    filesystem, path = resolve(location)
    with filesystem.open_input_stream(path) as stream:
        return stream.read()


def write_bytes(location: str, data: bytes) -> None:
    """Write a whole file so that no reader sees part of it: one PUT on an object store, a
    temporary file renamed over it on a local disk."""
    filesystem, path = resolve(location)
    if not is_local(location):
        with filesystem.open_output_stream(path) as stream:
            stream.write(data)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_text(location: str, text: str) -> None:
    write_bytes(location, text.encode())


def delete_file(location: str) -> None:
    """Delete one file; nothing to do when it is already gone."""
    filesystem, path = resolve(location)
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_file(path)


def make_dirs(location: str) -> None:
    """Create a directory and its parents (an object store records an empty marker)."""
    filesystem, path = resolve(location)
    filesystem.create_dir(path, recursive=True)


def copy_file(source: str, target: str) -> None:
    """Copy one file within a filesystem (server-side on S3: no data through this process)."""
    filesystem, source_path = resolve(source)
    _, target_path = resolve(target)
    filesystem.copy_file(source_path, target_path)


def rename_dir(source: str, target: str) -> None:
    """Rename directory ``source`` to ``target`` in one step, creating ``target``'s parent. Only
    a local filesystem has that step: an object store would copy object by object, and a reader
    would see part of the directory, so it is refused there."""
    if not (is_local(source) and is_local(target)):
        raise StorageError(
            f"cannot rename {_shown(source)!r} in one step: directory renames are atomic only on a local "
            "or shared filesystem"
        )
    os.makedirs(local_path(target).parent, exist_ok=True)
    os.rename(local_path(source), local_path(target))


def move_file(source: str, target: str) -> None:
    """Move one file to ``target``, creating its parent: a rename on a local filesystem, a
    server-side copy then a delete on an object store (never seen half-written: a copy is one
    request). Only for files nobody reads yet: on an object store both names exist in between."""
    if is_local(source) and is_local(target):
        os.makedirs(local_path(target).parent, exist_ok=True)
        os.rename(local_path(source), local_path(target))
        return
    copy_file(source, target)
    delete_file(source)


def link_or_copy(source: str, target: str) -> None:
    """Put file ``source`` at ``target`` without rewriting its data: a hard link on a local
    filesystem, a server-side copy on an object store."""
    if is_local(source) and is_local(target):
        os.link(local_path(source), local_path(target))
    else:
        copy_file(source, target)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the listed root, with ``/``
    location: str
    size: int


def list_files(location: str) -> list[FileEntry]:
    """Every file under ``location``, recursively, sorted by path (empty when it does not exist)."""
    filesystem, root = resolve(location)
    selector = pafs.FileSelector(root, allow_not_found=True, recursive=True)
    found = []
    for info in filesystem.get_file_info(selector):
        if info.type == pafs.FileType.File:
            relative = info.path[len(root) :].lstrip("/")
            found.append(FileEntry(relative, join(location, relative), info.size or 0))
    return sorted(found, key=lambda entry: entry.path)


def open_input_file(location: str) -> pafs.NativeFile:
    """A random-access file (what a Parquet footer read needs)."""
    filesystem, path = resolve(location)
    return filesystem.open_input_file(path)


def probe_writable(location: str) -> None:
    """Write and delete an empty file in ``location``; an OSError says why that fails.

    A local directory that does not exist yet is probed in its nearest existing parent, where it
    would be created: the probe creates nothing. Object stores have no directories to create.
    """
    filesystem, path = resolve(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        existing = Path(path)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        path = str(existing)
    probe = f"{path.rstrip('/')}/.staged-probe-{uuid.uuid4().hex}"
    with filesystem.open_output_stream(probe) as stream:
        stream.write(b"")
    filesystem.delete_file(probe)
