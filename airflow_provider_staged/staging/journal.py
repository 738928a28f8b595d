"""A journal of staged attempts that any process can read: one JSON file per attempt.

Every transition is written with a temp file and ``os.replace`` under an exclusive
``flock`` of the attempt, so a reader never sees a torn record and a commit and an abort
of the same attempt (``on_kill`` racing ``execute``) cannot interleave. Locks die with
their process, so a SIGKILLed task never leaves a lock behind.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import glob
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from airflow_provider_staged.staging.errors import CommitConflictError
from airflow_provider_staged.staging.owner import ProcessRef

_ATTEMPT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# Beside the records (``records`` reads only ``*.json`` of the root): per-target hints of retention.
_MARKS_DIR = ".retention"
# A writer renames its temporary file within milliseconds; one an hour old lost its writer.
STALE_TEMPORARY_SECONDS = 3600


class AttemptState(str, enum.Enum):
    BEGUN = "BEGUN"
    WRITTEN = "WRITTEN"
    # Journaled before an abort deletes anything: a crash mid-delete leaves an attempt that
    # can only be aborted again, never committed with part of its files gone.
    ABORTING = "ABORTING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"

    @property
    def ended(self) -> bool:
        return self in (AttemptState.COMMITTED, AttemptState.ABORTED)


_ALLOWED = {
    AttemptState.BEGUN: {
        AttemptState.WRITTEN, AttemptState.ABORTING, AttemptState.ABORTED, AttemptState.COMMITTED
    },
    AttemptState.WRITTEN: {
        AttemptState.COMMITTED, AttemptState.ABORTING, AttemptState.ABORTED, AttemptState.WRITTEN
    },
    AttemptState.ABORTING: {AttemptState.ABORTED},
    AttemptState.COMMITTED: set(),
    AttemptState.ABORTED: set(),
}


@dataclass(frozen=True)
class TaskRef:
    """The Airflow task try that owns an attempt (absent when driven from the CLI)."""

    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    map_index: int = -1


# What an attempt does, in the words its user asked for it: kinds that are one operation
# whatever their purpose, then the purposes of a build (a partition refresh names its partitions).
_KIND_OPERATIONS = {
    "hive_expire": "partition expiry",
    "hive_rollback": "rollback",
    "hive_append": "append",
    "hive_overwrite": "overwrite",
    "jdbc_append": "append",
    "sink": "sink write",
}
_PURPOSE_OPERATIONS = {
    "create": "create table as",
    "create_if_not_exists": "create table if not exists as",
    "replace": "replace table as",
    "create_or_replace": "create or replace table as",
}


@dataclass
class AttemptRecord:
    attempt_id: str
    kind: str
    target: str
    purpose: str
    location: str
    # Everything the kind's ``from_record`` needs to rebuild the attempt exactly (no secrets).
    catalog: dict[str, Any] = field(default_factory=dict)
    # The staged connection whose catalog and journal the attempt belongs to.
    conn_id: str | None = None
    state: AttemptState = AttemptState.BEGUN
    task: TaskRef | None = None
    # The process that drives an attempt without a task (a client): reconcile can see it gone.
    owner: ProcessRef | None = None
    manifest: dict[str, Any] | None = None
    # What the commit superseded: a location, or several (a partition refresh).
    superseded_location: str | list[str] | None = None
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    heartbeat_at: float = field(default_factory=time.time)
    history: list[tuple[str, float]] = field(default_factory=list)

    @property
    def partition_spec(self) -> dict[str, str]:
        """The partitions a partition refresh replaces (empty for a whole-table build)."""
        return dict(self.catalog.get("partition_spec") or {})

    @property
    def partitions_text(self) -> str:
        """``ds=2024-01-03,hr=01``: the partition spec as a person reads it ("" for none)."""
        return ",".join(f"{column}={value}" for column, value in self.partition_spec.items())

    @property
    def operation(self) -> str:
        """What the attempt does as its user asked for it: ``partition refresh`` for a build of
        some partitions, ``create or replace table as`` for a whole table, ``rollback``, ..."""
        if self.kind in _KIND_OPERATIONS:
            return _KIND_OPERATIONS[self.kind]
        if self.partition_spec:
            return "partition refresh"
        return _PURPOSE_OPERATIONS.get(self.purpose, self.purpose)

    def to_json(self) -> str:
        data = asdict(self)
        data["state"] = self.state.value
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AttemptRecord:
        data = json.loads(text)
        data["state"] = AttemptState(data["state"])
        if data.get("task"):
            data["task"] = TaskRef(**data["task"])
        if data.get("owner"):
            data["owner"] = ProcessRef(**data["owner"])
        data["history"] = [tuple(item) for item in data.get("history", [])]
        # A record a newer version wrote may carry fields this one does not know: a journal is
        # shared by workers and clients that are upgraded one at a time.
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


class AttemptJournal:
    """Reads and transitions attempt records stored under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, attempt_id: str, suffix: str = ".json") -> Path:
        if not _ATTEMPT_ID.match(attempt_id):
            raise ValueError(f"invalid attempt id {attempt_id!r}")
        return self.root / f"{attempt_id}{suffix}"

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
            record.history.append((record.state.value, time.time()))
            self._write(record)
        return record

    def get(self, attempt_id: str) -> AttemptRecord | None:
        try:
            return AttemptRecord.from_json(self._path(attempt_id).read_text())
        except FileNotFoundError:
            return None

    def require(self, attempt_id: str) -> AttemptRecord:
        record = self.get(attempt_id)
        if record is None:
            raise CommitConflictError(f"attempt {attempt_id} is not in the journal at {self.root}")
        return record

    def transition(self, attempt_id: str, state: AttemptState, **changes: Any) -> AttemptRecord:
        """Move an attempt to ``state``; the caller must hold ``locked(attempt_id)``."""
        record = self.require(attempt_id)
        if state not in _ALLOWED[record.state]:
            raise CommitConflictError(
                f"attempt {attempt_id} of {record.target} is {record.state.value}: "
                f"it cannot become {state.value}"
            )
        for key, value in changes.items():
            setattr(record, key, value)
        now = time.time()
        record.state = state
        record.updated_at = record.heartbeat_at = now
        record.history.append((state.value, now))
        self._write(record)
        return record

    def heartbeat(self, attempt_id: str) -> None:
        """Mark an open attempt as alive, so that the TTL sweep leaves it alone."""
        with self.locked(attempt_id):
            record = self.get(attempt_id)
            if record is not None and not record.state.ended:
                record.heartbeat_at = time.time()
                self._write(record)

    def _mark_path(self, target: str) -> Path:
        return self.root / _MARKS_DIR / quote(target, safe="")

    def retention_mark(self, target: str) -> float | None:
        """When the oldest version of ``target`` that the last retention sweep kept was superseded
        (None: no sweep recorded one). A hint: before ``RetentionPolicy.earliest_expiry`` of it,
        a sweep of ``target`` has nothing to delete but orphans, and may be skipped."""
        try:
            return float(self._mark_path(target).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def set_retention_mark(self, target: str, superseded_at: float) -> None:
        """Record ``retention_mark``; not fsynced: a mark lost in a crash only means a full sweep."""
        path = self._mark_path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        for leftover in path.parent.glob(".tmp-*"):
            _remove_if_stale(leftover)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as handle:
            handle.write(repr(superseded_at))
        os.replace(tmp, path)

    def records(self, prefix: str = "") -> list[AttemptRecord]:
        """The journaled attempts, or those whose id starts with ``prefix`` (read without the rest)."""
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
        """Delete an ENDED record and its lock file (``staging.pruning``); whether it did. An ended
        record never changes again, so no writer's update is lost."""
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
        """Attempts owned by ``task`` (the same try, or any try when ``try_number`` is 0)."""
        return [
            record
            for record in self.records()
            if record.task is not None
            and (record.task.dag_id, record.task.task_id, record.task.run_id, record.task.map_index)
            == (task.dag_id, task.task_id, task.run_id, task.map_index)
            and (task.try_number == 0 or record.task.try_number == task.try_number)
        ]


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
