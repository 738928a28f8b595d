"""The file journal: one JSON file per attempt under a directory (the embedded default).

Every transition is written with a temp file and ``os.replace`` under an exclusive ``flock`` of
the attempt, so a reader never sees a torn record and a commit and an abort of the same attempt
(``on_kill`` racing ``execute``) cannot interleave. Locks die with their process, so a SIGKILLed
task never leaves a lock behind. An ``flock`` and this host's clock hold on ONE machine only:
workers on several hosts share ``journal_postgres.PostgresJournal`` instead (docs/DESIGN.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from airflow_provider_staged.staging.errors import CommitConflictError
from airflow_provider_staged.staging.journal import (
    AttemptJournal,
    AttemptRecord,
    AttemptState,
    TaskRef,
    check_attempt_id,
    check_transition,
    owned_by,
)

# Beside the records (``records`` reads only ``*.json`` of the root): per-target hints of retention.
_MARKS_DIR = ".retention"
# Per-target first sightings of orphaned version directories (``orphans_seen``).
_ORPHANS_DIR = ".orphans"
# A writer renames its temporary file within milliseconds; one an hour old lost its writer.
STALE_TEMPORARY_SECONDS = 3600


class FileJournal(AttemptJournal):
    """Reads and transitions attempt records stored under ``root`` (``AttemptJournal``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __str__(self) -> str:
        return str(self.root)

    def now(self) -> float:
        return time.time()

    def _path(self, attempt_id: str, suffix: str = ".json") -> Path:
        return self.root / f"{check_attempt_id(attempt_id)}{suffix}"

    @contextlib.contextmanager
    def locked(self, attempt_id: str) -> Iterator[None]:
        """Hold the attempt's exclusive lock (blocks while another process holds it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(attempt_id, ".lock")
        while True:
            with open(path, "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    # ``remove_ended`` deletes the lock file while holding it: a process that was
                    # waiting on it then holds a lock nobody else sees, so it locks the new file.
                    if _is_file_at(handle, path):
                        yield
                        return
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    def _write(self, record: AttemptRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(record.to_json())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._path(record.attempt_id))
            _fsync_directory(self.root)  # the rename itself must survive a machine crash
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def create(self, record: AttemptRecord) -> AttemptRecord:
        with self.locked(record.attempt_id):
            if self._path(record.attempt_id).exists():
                raise CommitConflictError(f"attempt {record.attempt_id} is already journaled")
            record.history.append((record.state.value, self.now()))
            self._write(record)
        return record

    def get(self, attempt_id: str) -> AttemptRecord | None:
        try:
            return AttemptRecord.from_json(self._path(attempt_id).read_text())
        except FileNotFoundError:
            return None

    def transition(self, attempt_id: str, state: AttemptState, **changes: Any) -> AttemptRecord:
        """Move an attempt to ``state``; the caller must hold ``locked(attempt_id)``."""
        record = self.require(attempt_id)
        check_transition(record, state)
        for key, value in changes.items():
            setattr(record, key, value)
        now = self.now()
        record.state = state
        record.updated_at = record.heartbeat_at = now
        record.history.append((state.value, now))
        self._write(record)
        return record

    def heartbeat(self, attempt_id: str) -> None:
        with self.locked(attempt_id):
            record = self.get(attempt_id)
            if record is not None and not record.state.ended:
                record.heartbeat_at = self.now()
                self._write(record)

    def _mark_path(self, target: str, directory: str = _MARKS_DIR) -> Path:
        return self.root / directory / quote(target, safe="")

    def retention_mark(self, target: str) -> float | None:
        try:
            return float(self._mark_path(target).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def set_retention_mark(self, target: str, superseded_at: float) -> None:
        """Record ``retention_mark``; not fsynced: a mark lost in a crash only means a full sweep."""
        _replace_text(self._mark_path(target), repr(superseded_at))

    def orphans_seen(self, target: str, locations: list[str]) -> dict[str, float]:
        """Not fsynced either: sightings lost in a crash only start the orphans' grace again."""
        path = self._mark_path(target, _ORPHANS_DIR)
        try:
            known = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            known = {}
        now = self.now()
        seen = {location: float(known.get(location, now)) for location in locations}
        if seen != known:
            _replace_text(path, json.dumps(seen))
        return seen

    def records(self, prefix: str = "") -> list[AttemptRecord]:
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob(glob.escape(prefix) + "*.json")):
            if path.name.startswith(".tmp-"):
                _remove_if_stale(path)
                continue
            record = self.get(path.stem)
            if record is not None:
                found.append(record)
        return found

    def remove_ended(self, attempt_id: str) -> bool:
        """Delete an ENDED record and its lock file. An ended record never changes again, so no
        writer's update is lost."""
        if self.get(attempt_id) is None:
            return False  # and no lock file to make
        with self.locked(attempt_id):
            record = self.get(attempt_id)
            if record is not None and not record.state.ended:
                return False
            # None: another pruner removed it meanwhile (and this call made the lock file again).
            self._path(attempt_id).unlink(missing_ok=True)
            self._path(attempt_id, ".lock").unlink()
        return record is not None

    def open_attempts(self) -> list[AttemptRecord]:
        return [record for record in self.records() if not record.state.ended]

    def for_task(self, task: TaskRef) -> list[AttemptRecord]:
        return [record for record in self.records() if owned_by(record, task)]


def _replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole through a temporary file (a reader never sees it torn)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in path.parent.glob(".tmp-*"):
        _remove_if_stale(leftover)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _is_file_at(handle: IO[str], path: Path) -> bool:
    """Whether the open ``handle`` is the file now at ``path`` (not one deleted since)."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return False
    opened = os.fstat(handle.fileno())
    return (found.st_dev, found.st_ino) == (opened.st_dev, opened.st_ino)


def _remove_if_stale(temporary: Path) -> None:
    """Delete a temporary file that a writer killed between creating and renaming it left."""
    with contextlib.suppress(FileNotFoundError):
        if time.time() - temporary.stat().st_mtime > STALE_TEMPORARY_SECONDS:
            temporary.unlink()


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
