"""The attempt journal: its records, and what every journal does (``AttemptJournal``).

Two journals keep the records: ``journal_files.FileJournal`` (one JSON file per attempt under
a directory, an ``flock`` per attempt: one machine, the embedded default) and
``journal_postgres.PostgresJournal`` (a PostgreSQL table shared by every worker, the DAG
processor, the CLI and the UI). Every time a journal records (history, ``updated_at``,
``heartbeat_at``, retention marks) is read from the journal's own clock, ``now()``; whatever
compares a record's time (grace periods, the attempt TTL) takes ``now()`` from the same journal.
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from airflow_provider_staged.staging.errors import CommitConflictError
from airflow_provider_staged.staging.owner import ProcessRef
from airflow_provider_staged.staging.partition_paths import spec_text

_ATTEMPT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


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
        AttemptState.WRITTEN,
        AttemptState.ABORTING,
        AttemptState.ABORTED,
        AttemptState.COMMITTED,
    },
    AttemptState.WRITTEN: {
        AttemptState.COMMITTED,
        AttemptState.ABORTING,
        AttemptState.ABORTED,
        AttemptState.WRITTEN,
    },
    AttemptState.ABORTING: {AttemptState.ABORTED},
    AttemptState.COMMITTED: set(),
    AttemptState.ABORTED: set(),
}


def check_attempt_id(attempt_id: str) -> str:
    """``attempt_id`` when it is one (it names files and lock keys); else one clear error."""
    if not _ATTEMPT_ID.match(attempt_id):
        raise ValueError(f"invalid attempt id {attempt_id!r}")
    return attempt_id


def check_transition(record: AttemptRecord, state: AttemptState) -> None:
    """Refuse a move the state machine does not allow (an ended attempt never moves)."""
    if state not in _ALLOWED[record.state]:
        raise CommitConflictError(
            f"attempt {record.attempt_id} of {record.target} is {record.state.value}: "
            f"it cannot become {state.value}"
        )


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
    "commit_group": "statement set",
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
    # The commit group (``staging.groups``) whose journaled decision alone may publish this attempt.
    group: str | None = None
    manifest: dict[str, Any] | None = None
    # What the commit superseded: a location, or several (a partition refresh).
    superseded_location: str | list[str] | None = None
    error: str | None = None
    # The attempt's audits (``staging.audits``): ``declared`` at begin; after the audit step its
    # ``results``, ``verdict`` (``passed``, ``quarantined``, ``published_anyway``), ``audited_at``
    # and the ``replaced`` parts (part -> location) it was judged against.
    audits: dict[str, Any] | None = None
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
        return spec_text(self.partition_spec)

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


class AttemptJournal(Protocol):
    """What every journal does; transitions of one attempt are serialized by ``locked``. The
    journals subclass it for ``require``; ``str()`` of one says where it is (no password)."""

    def now(self) -> float:
        """The journal's clock (seconds since the epoch): the clock of every time it records."""

    def locked(self, attempt_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the attempt's exclusive lock (blocks while another process holds it). The lock
        dies with its holder: a killed process, or a vanished host, never leaves it held."""

    def create(self, record: AttemptRecord) -> AttemptRecord:
        """Journal a new attempt (CommitConflictError when its id is journaled already)."""

    def get(self, attempt_id: str) -> AttemptRecord | None: ...

    def require(self, attempt_id: str) -> AttemptRecord:
        """The attempt's record; CommitConflictError when it is not journaled."""
        record = self.get(attempt_id)
        if record is None:
            raise CommitConflictError(f"attempt {attempt_id} is not in the journal at {self}")
        return record

    def transition(self, attempt_id: str, state: AttemptState, **changes: Any) -> AttemptRecord:
        """Move an attempt to ``state`` with ``changes``; the caller holds ``locked(attempt_id)``."""

    def heartbeat(self, attempt_id: str) -> None:
        """Mark an open attempt as alive, so that the TTL sweep leaves it alone."""

    def retention_mark(self, target: str) -> float | None:
        """When the oldest version of ``target`` that the last retention sweep kept was superseded
        (None: no sweep recorded one). A hint: before ``RetentionPolicy.earliest_expiry`` of it,
        a sweep of ``target`` has nothing to delete but orphans, and may be skipped."""

    def set_retention_mark(self, target: str, superseded_at: float) -> None: ...

    def orphans_seen(self, target: str, locations: list[str]) -> dict[str, float]:
        """When each of ``locations`` (directories of ``target`` that no record names) was first
        seen by a sweep, by the journal's clock; sightings of other directories are forgotten.
        An orphan is deleted only a grace period after it was first seen."""

    def records(self, prefix: str = "") -> list[AttemptRecord]:
        """The journaled attempts, or those whose id starts with ``prefix`` (by id)."""

    def remove_ended(self, attempt_id: str) -> bool:
        """Delete an ENDED record (``staging.pruning``); whether it did."""

    def open_attempts(self) -> list[AttemptRecord]: ...

    def for_task(self, task: TaskRef) -> list[AttemptRecord]:
        """Attempts owned by ``task`` (the same try, or any try when ``try_number`` is 0)."""


def owned_by(record: AttemptRecord, task: TaskRef) -> bool:
    """Whether ``task`` owns ``record`` (any try of it when ``task.try_number`` is 0)."""
    return (
        record.task is not None
        and (record.task.dag_id, record.task.task_id, record.task.run_id, record.task.map_index)
        == (task.dag_id, task.task_id, task.run_id, task.map_index)
        and (task.try_number == 0 or record.task.try_number == task.try_number)
    )
