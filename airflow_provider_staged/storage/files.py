"""Filesystem access by URI (local paths and ``file:`` URIs; object stores through pyarrow)."""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyarrow import fs as pafs


def normalize_location(location: str) -> str:
    """One spelling per location: ``file:/a/b`` for local paths, no trailing slash."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return "file:" + parsed.path.rstrip("/")
    return location.rstrip("/")


def _resolve(location: str) -> tuple[pafs.FileSystem, str]:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parsed.path
    return pafs.FileSystem.from_uri(location)


def join(location: str, *names: str) -> str:
    return "/".join([normalize_location(location), *names])


@dataclass(frozen=True)
class Entry:
    name: str
    location: str
    is_dir: bool
    mtime: float


def list_dir(location: str) -> list[Entry]:
    """The direct children of ``location`` (empty when it does not exist)."""
    filesystem, path = _resolve(location)
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
    return [
        Entry(
            name=info.base_name,
            location=join(location, info.base_name),
            is_dir=info.type == pafs.FileType.Directory,
            mtime=info.mtime.timestamp() if info.mtime else 0.0,
        )
        for info in filesystem.get_file_info(selector)
    ]


def delete_dir(location: str) -> None:
    """Delete a directory tree; nothing to do when it is already gone."""
    filesystem, path = _resolve(location)
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_dir(path)


def remove_empty_dir(location: str) -> None:
    """Remove a local directory if it is empty; ``rmdir`` checks and removes in one step, so a
    file written meanwhile is never lost. Elsewhere nothing is done (object stores keep no
    empty directories; other filesystems have no such one-step call here)."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        with contextlib.suppress(OSError):  # not empty, gone already, or not a directory
            os.rmdir(parsed.path)


def exists(location: str) -> bool:
    filesystem, path = _resolve(location)
    return filesystem.get_file_info(path).type != pafs.FileType.NotFound


def read_text(location: str) -> str:
    filesystem, path = _resolve(location)
    with filesystem.open_input_stream(path) as stream:
        return stream.read().decode()


def probe_writable(location: str) -> None:
    """Write and delete an empty file in ``location``; an OSError says why that fails.

    A local directory that does not exist yet is probed in its nearest existing parent, where it
    would be created: the probe creates nothing. Object stores have no directories to create.
    """
    filesystem, path = _resolve(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        existing = Path(path)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        path = str(existing)
    probe = f"{path.rstrip('/')}/.staged-probe-{uuid.uuid4().hex}"
    with filesystem.open_output_stream(probe) as stream:
        stream.write(b"")
    filesystem.delete_file(probe)
