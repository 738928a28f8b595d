"""Kept versions of a Hive table, and rollback to one of them as a staged attempt of its own.

A version is the directory ``<table root>/_v=<attempt id>`` that a committed attempt wrote;
the journal holds its manifest (rows, bytes) and the task that made it. A rollback is an
attempt of kind ``hive_rollback`` on the one commit path: BEGUN (journaled, with the version
it restores), WRITTEN with that version's manifest, committed by ONE ``alter_table`` under the
table's metastore lock (the same switch a replace makes), housekept by the same retention.
It writes no data, so its abort deletes nothing: the version's directory stays as it was.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.metastore.tables import current_location, repointed_table
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import run_attempt
from airflow_provider_staged.staging.errors import StagingError, TableNotFoundError
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.kinds.hive_table import (
    HIVE_KINDS,
    HiveStagedTable,
    _doomed,  # the retention decision itself, so a rollback never races the sweep's
    list_versions,
)
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.versions import parse_version_dir
from airflow_provider_staged.storage import exists, normalize_location

if TYPE_CHECKING:
    from airflow_provider_staged.settings import StagedSettings

log = logging.getLogger(__name__)

ROLLBACK_KIND = "hive_rollback"
# Kinds that write a version directory (a rollback only points at one).
_WRITING_KINDS = tuple(kind for kind in HIVE_KINDS if kind != ROLLBACK_KIND)


@dataclass(frozen=True)
class Version:
    """One kept version of a table."""

    version: str  # the attempt id that wrote it
    location: str
    committed_at: float
    rows: int | None
    bytes: int | None
    run: str  # dag.task run #try, or "cli"
    current: bool


def _run_of(record: AttemptRecord) -> str:
    task = record.task
    return f"{task.dag_id}.{task.task_id} {task.run_id} #{task.try_number}" if task else "cli"


def list_table_versions(settings: StagedSettings, identifier: TableIdentifier) -> list[Version]:
    """The versions of ``identifier`` whose directories still exist, newest first."""
    with MetastoreClient(settings.metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
    if table is None:
        raise TableNotFoundError(f"table {identifier} does not exist")
    if table.partitionKeys and (table.parameters or {}).get("spark.sql.partitionProvider") == "catalog":
        raise StagingError(
            f"table {identifier} keeps its versions per partition (a partition refresh): "
            "versions and rollback are per table, for tables replaced whole"
        )
    live = normalize_location(current_location(table))
    versions = []
    for record in settings.journal.records():
        if (
            record.target != identifier.name
            or record.kind not in _WRITING_KINDS
            or record.state is not AttemptState.COMMITTED
        ):
            continue
        location = normalize_location(record.location)
        if not exists(location):
            continue  # deleted by retention
        manifest = record.manifest or {}
        versions.append(
            Version(record.attempt_id, location, record.updated_at, manifest.get("rows"),
                    manifest.get("bytes"), _run_of(record), location == live)
        )
    return sorted(versions, key=lambda v: v.committed_at, reverse=True)


class HiveRollback(HiveStagedTable):
    """Switch an existing table back to a kept version directory (one ``alter_table``)."""

    kind = ROLLBACK_KIND

    def __init__(self, identifier: TableIdentifier, version: str, version_location: str, **hive: Any) -> None:
        """``hive``: the arguments of :class:`HiveStagedTable` after the purpose (journal, ...)."""
        super().__init__(identifier, StagingPurpose.REPLACE_TABLE_AS, **hive)
        self.version = version
        self.version_location = normalize_location(version_location)

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HiveRollback:
        return cls(
            TableIdentifier.parse(record.target),
            record.catalog["version"],
            record.location,
            **cls.rebuilt(record, settings),
        )

    def catalog_ref(self) -> dict[str, Any]:
        return {"metastore_uri": self.metastore_uri, "version": self.version}

    def staging_location(self) -> str:
        # The kept version itself: while this attempt is open the sweep counts it in flight.
        return self.version_location

    def write_spec(self) -> dict[str, Any]:
        return {"format": "none"}  # a rollback writes no data

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> str | None:
        if not exists(self.version_location):
            raise StagingError(
                f"version {self.version} of {self.target} was deleted by retention: nothing changed"
            )
        # The table's version parameter names the version it serves, not this rollback.
        txn.alter_table(repointed_table(current, manifest, self.version))
        return normalize_location(current_location(current))

    def discard(self, record: AttemptRecord) -> None:
        """A rollback wrote nothing: the kept version's directory is not its to delete."""


def rollback(
    settings: StagedSettings,
    identifier: TableIdentifier,
    version: str,
    task: TaskRef | None = None,
    conn_id: str | None = None,
    now: float | None = None,
) -> AttemptRecord:
    """Make kept ``version`` of ``identifier`` current; returns the rollback's journal record.

    An unknown, swept or already-current version is an error that changes nothing.
    """
    kept = {v.version: v for v in list_table_versions(settings, identifier)}
    target = kept.get(version)
    if target is None:
        record = settings.journal.get(version) if parse_version_dir(f"_v={version}") else None
        if record is not None and record.target == identifier.name and record.state is AttemptState.COMMITTED:
            raise StagingError(f"version {version} of {identifier} was deleted by retention: nothing changed")
        known = ", ".join(kept) or "none"
        raise StagingError(f"unknown version {version!r} of {identifier}: kept versions are {known}")
    if target.current:
        raise StagingError(f"version {version} is already the current version of {identifier}")
    _refuse_if_due(settings, identifier, target, now)
    source = settings.journal.require(version)
    staged = HiveRollback(
        identifier, version, target.location, journal=settings.journal,
        metastore_uri=settings.metastore_uri, retention=settings.retention, task=task, conn_id=conn_id,
    )
    # The one commit path; its "write" is the kept version's manifest.
    run_attempt(staged, lambda _spec: Manifest.from_dict(source.manifest or {}), settings.attempt_ttl_seconds)
    log.info("rolled back %s to version %s (attempt %s)", identifier, version, staged.attempt_id)
    return settings.journal.require(staged.attempt_id)


def _refuse_if_due(
    settings: StagedSettings, identifier: TableIdentifier, target: Version, now: float | None
) -> None:
    """A version that retention may delete any moment is not rolled back to: a sweep that
    decided before this rollback was journaled would delete what the table then points at."""
    listed = [e for e in list_versions(target.location.rpartition("/")[0]) if e.location == target.location]
    records = [r for r in settings.journal.records() if r.kind in HIVE_KINDS and r.target == identifier.name]
    with MetastoreClient(settings.metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
    live = {normalize_location(current_location(table))} if table is not None else set()
    now = time.time() if now is None else now
    if _doomed(listed, records, live, settings.retention, now):
        policy = settings.retention
        raise StagingError(
            f"version {target.version} of {identifier} is due for deletion by retention "
            f"(keep_versions={policy.keep_versions}, grace {policy.grace_seconds:.0f} s): nothing changed"
        )
