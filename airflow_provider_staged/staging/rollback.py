"""Kept versions of a Hive table, and rollback to one of them as a staged attempt of its own.

A version is the directory ``<table root>/_v=<attempt id>`` that a committed attempt wrote;
the journal holds its manifest (rows, bytes) and the task that made it. A rollback is an
attempt of kind ``hive_rollback`` on the one commit path: BEGUN (journaled, with the version
it restores), WRITTEN with that version's manifest, committed by ONE ``alter_table`` under the
table's metastore lock (the same switch a replace makes), housekept by the same retention.
It writes no data, so its abort deletes nothing: the version's directory stays as it was.

A partition-refreshed table (catalog-tracked partitions) keeps its versions per partition: a
refresh's version directory holds the partitions it rewrote. Rolling back to such a version
makes every partition it holds current again — what undoing that refresh's effect means to
a data engineer — or only those inside a partition spec (``--partition ds=2024-01-01``), in
ONE ``alter_partitions`` (all or none). A partition of the version that the table no longer
has (dropped, expired) is refused, not re-added: naming the others with a spec restores them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient, NoSuchObjectException
from airflow_provider_staged.catalogs.metastore.tables import (
    current_location,
    repointed_table,
    tracks_partitions,
)
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import run_attempt
from airflow_provider_staged.staging.errors import StagingError, TableNotFoundError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.kinds.hive_partitions import (
    check_same_schema,  # a partition rollback switches partitions as a refresh does
    discovered_partitions,
    partition_stats,
    relocated,
)
from airflow_provider_staged.staging.kinds.hive_table import (
    HIVE_KINDS,
    ROLLBACK_KIND,
    HiveStagedTable,
    _doomed,  # the retention decision itself, so a rollback never races the sweep's
    _version_dir,
    list_versions,
    version_records,
)
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from airflow_provider_staged.staging.partition_paths import matches, partition_path, partition_values
from airflow_provider_staged.staging.versions import parse_version_dir
from airflow_provider_staged.storage.files import exists, normalize_location

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

# Refuse a version that retention may delete within this long: a sweep's clock and journal read
# can lag a rollback's by up to this much and still count the rollback in flight (see below).
DUE_MARGIN_SECONDS = 300.0
# Kinds that write a version directory (a rollback only points at one).
_WRITING_KINDS = tuple(kind for kind in HIVE_KINDS if kind != ROLLBACK_KIND)


@dataclass(frozen=True)
class Version:
    """One kept version of a table, or of one partition of a partition-refreshed table."""

    version: str  # the attempt id that wrote it
    location: str  # the version directory (the partition's directory inside it)
    committed_at: float
    rows: int | None
    bytes: int | None
    run: str  # dag.task run #try, or "cli"
    current: bool
    partition: str | None = None  # "ds=2024-01-01" for a partition's version


def _run_of(record: AttemptRecord) -> str:
    task = record.task
    return f"{task.dag_id}.{task.task_id} {task.run_id} #{task.try_number}" if task else "cli"


def _read_table(settings: StagedSettings, identifier: TableIdentifier) -> ttypes.Table:
    with MetastoreClient(settings.metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
    if table is None:
        raise TableNotFoundError(f"table {identifier} does not exist")
    return table


def _kept_records(settings: StagedSettings, identifier: TableIdentifier) -> list[AttemptRecord]:
    """The committed writes of ``identifier`` whose version directories still exist."""
    return [
        record
        for record in settings.journal.records()
        if record.target == identifier.name
        and record.kind in _WRITING_KINDS
        and record.state is AttemptState.COMMITTED
        and exists(record.location)  # else deleted by retention
    ]


def list_table_versions(
    settings: StagedSettings, identifier: TableIdentifier, partition_spec: dict[str, str] | None = None
) -> list[Version]:
    """The kept versions of ``identifier``, newest first; per partition (inside
    ``partition_spec``) for a partition-refreshed table."""
    table = _read_table(settings, identifier)
    if tracks_partitions(table):  # its versions are kept per partition
        return _partition_versions(settings, identifier, table, _checked_spec(table, partition_spec))
    if partition_spec:
        raise StagingError(f"table {identifier} has no catalog partitions: a partition spec does not apply")
    live = normalize_location(current_location(table))
    versions = []
    for record in _kept_records(settings, identifier):
        location = normalize_location(record.location)
        manifest = record.manifest or {}
        versions.append(
            Version(record.attempt_id, location, record.updated_at, manifest.get("rows"),
                    manifest.get("bytes"), _run_of(record), location == live)
        )
    return sorted(versions, key=lambda v: v.committed_at, reverse=True)


def _checked_spec(table: ttypes.Table, spec: dict[str, str] | None) -> dict[str, str]:
    columns = [key.name for key in table.partitionKeys]
    unknown = sorted(set(spec or {}) - set(columns))
    if unknown:
        raise StagingError(
            f"partition column(s) {unknown} not in table {table.dbName}.{table.tableName} "
            f"(partitioned by {columns}): nothing changed"
        )
    return dict(spec or {})


def _partition_versions(
    settings: StagedSettings, identifier: TableIdentifier, table: ttypes.Table, spec: dict[str, str]
) -> list[Version]:
    columns = [key.name for key in table.partitionKeys]
    with MetastoreClient(settings.metastore_uri) as client:
        live = {
            partition_path(columns, p.values): normalize_location(p.sd.location)
            for p in client.partitions_matching(identifier.database, identifier.table, columns, spec)
        }
    versions = []
    for record in _kept_records(settings, identifier):
        root = normalize_location(record.location)
        files: dict[tuple[str, ...] | None, list[DataFile]] = {}
        for item in Manifest.from_dict(record.manifest or {"location": root}).files:
            files.setdefault(partition_values(item.path, columns), []).append(item)
        for values, location in discovered_partitions(root, columns).items():
            if not matches(values, columns, spec):
                continue
            name = partition_path(columns, values)  # one spelling, the metastore's
            written = files.get(values, [])  # none: a partition the refresh emptied
            rows, size = sum(f.rows for f in written), sum(f.bytes for f in written)
            versions.append(
                Version(record.attempt_id, location, record.updated_at, rows, size, _run_of(record),
                        live.get(name) == location, name)
            )
    return sorted(versions, key=lambda v: (-v.committed_at, v.partition or ""))


class HiveRollback(HiveStagedTable):
    """Switch an existing table back to a kept version directory (one ``alter_table``), or some
    of its partitions back to their directories in a kept version (one ``alter_partitions``)."""

    kind = ROLLBACK_KIND
    writes_data = False

    def __init__(
        self,
        identifier: TableIdentifier,
        version: str,
        version_location: str,
        partitions: dict[str, str] | None = None,
        **hive: Any,
    ) -> None:
        """``partitions``: partition name -> its directory in the version (a partition rollback);
        ``hive``: the arguments of :class:`HiveStagedTable` after the purpose (journal, ...)."""
        super().__init__(identifier, StagingPurpose.REPLACE_TABLE_AS, **hive)
        self.version = version
        self.version_location = normalize_location(version_location)
        self.partitions = dict(partitions) if partitions is not None else None

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HiveRollback:
        return cls(
            TableIdentifier.parse(record.target),
            record.catalog["version"],
            record.location,
            record.catalog.get("partitions"),
            **cls.rebuilt(record, settings),
        )

    def catalog_ref(self) -> dict[str, Any]:
        ref = {"metastore_uri": self.metastore_uri, "version": self.version}
        return ref if self.partitions is None else {**ref, "partitions": self.partitions}

    def staging_location(self) -> str:
        # The kept version itself: while this attempt is open the sweep counts it in flight.
        return self.version_location

    def write_spec(self) -> dict[str, Any]:
        return {"format": "none"}  # a rollback writes no data

    def _refuse_if_swept(self, location: str) -> None:
        if not exists(location):
            raise StagingError(
                f"version {self.version} of {self.target} was deleted by retention: nothing changed"
            )

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> str | list[str] | None:
        if self.partitions is not None:
            return self._swap_partitions(txn, current, manifest)
        self._refuse_if_swept(self.version_location)
        # The table's version parameter names the version it serves, not this rollback.
        txn.alter_table(repointed_table(current, manifest, self.version))
        return normalize_location(current_location(current))

    def _swap_partitions(self, txn: MetastoreClient, current: ttypes.Table, manifest: Manifest) -> list[str]:
        assert self.partitions is not None
        columns = [key.name for key in current.partitionKeys]
        found = {
            partition_path(columns, p.values): p
            for p in txn.thrift.get_partitions_by_names(
                current.dbName, current.tableName, list(self.partitions)
            )
        }
        missing = sorted(set(self.partitions) - set(found))
        if missing:
            raise StagingError(
                f"partition(s) {missing} of {self.target} were dropped since the rollback began: "
                "nothing changed"
            )
        check_same_schema(current, manifest, self.target)
        stats = partition_stats(manifest, columns)
        switched, superseded = [], []
        for name, location in sorted(self.partitions.items()):
            self._refuse_if_swept(location)
            superseded.append(normalize_location(found[name].sd.location))
            # The fast statistics of the restored data; its commit time is now (update-time TTL).
            switched.append(relocated(found[name], location, stats))
        txn.alter_partitions(current.dbName, current.tableName, switched)
        return superseded

    def is_published(self, record: AttemptRecord) -> bool:
        if self.partitions is None:
            return super().is_published(record)
        # Switched in one call: some partition at its restored directory ⇔ the switch landed (a
        # restored partition was not there before: the rollback skips the current ones).
        wanted = set(self.partitions.values())
        with self._client() as client:
            try:
                found = client.thrift.get_partitions_by_names(
                    self.identifier.database, self.identifier.table, list(self.partitions)
                )
            except NoSuchObjectException:
                return False  # the table is gone
        return any(normalize_location(p.sd.location) in wanted for p in found)

    def discard(self, record: AttemptRecord) -> None:
        """A rollback wrote nothing: the kept version's directory is not its to delete."""


def rollback(
    settings: StagedSettings,
    identifier: TableIdentifier,
    version: str,
    task: TaskRef | None = None,
    conn_id: str | None = None,
    now: float | None = None,
    partition_spec: dict[str, str] | None = None,
) -> AttemptRecord:
    """Make kept ``version`` of ``identifier`` current; returns the rollback's journal record.

    For a partition-refreshed table: the version's partitions (inside ``partition_spec``) that
    are not current yet. An unknown, swept or already-current version, or a partition the
    table no longer has, is an error that changes nothing.
    """
    kept = [v for v in list_table_versions(settings, identifier, partition_spec) if v.version == version]
    if not kept:
        _refuse_unknown(settings, identifier, version, partition_spec)
    source = settings.journal.require(version)
    root = normalize_location(source.location)
    partitions = None
    if kept[0].partition is not None:
        partitions = _partitions_to_restore(settings, identifier, version, kept)
    elif kept[0].current:
        raise StagingError(f"version {version} is already the current version of {identifier}")
    _refuse_if_due(settings, identifier, version, root, now)
    staged = HiveRollback(
        identifier, version, root, partitions, journal=settings.journal,
        metastore_uri=settings.metastore_uri, retention=settings.retention, task=task, conn_id=conn_id,
    )
    manifest = Manifest.from_dict(source.manifest or {"location": root})
    if partitions is not None:
        # What the rollback serves again: the files of the restored partitions.
        restored = {p.removeprefix(f"{root}/") for p in partitions.values()}
        files = [f for f in manifest.files if f.path.rpartition("/")[0] in restored]
        manifest = dataclasses.replace(manifest, files=files, rows=None, bytes=None)
    # The one commit path; its "write" is the kept version's manifest.
    run_attempt(staged, lambda _spec: manifest, settings.attempt_ttl_seconds)
    log.info("rolled back %s to version %s (attempt %s)", identifier, version, staged.attempt_id)
    return settings.journal.require(staged.attempt_id)


def _refuse_unknown(
    settings: StagedSettings, identifier: TableIdentifier, version: str, spec: dict[str, str] | None
) -> NoReturn:
    record = settings.journal.get(version) if parse_version_dir(f"_v={version}") else None
    if record is not None and record.target == identifier.name and record.state is AttemptState.COMMITTED:
        if exists(record.location):
            raise StagingError(
                f"version {version} of {identifier} has no partition inside {spec}: nothing changed"
            )
        raise StagingError(f"version {version} of {identifier} was deleted by retention: nothing changed")
    known = ", ".join(dict.fromkeys(v.version for v in list_table_versions(settings, identifier))) or "none"
    raise StagingError(f"unknown version {version!r} of {identifier}: kept versions are {known}")


def _partitions_to_restore(
    settings: StagedSettings, identifier: TableIdentifier, version: str, kept: list[Version]
) -> dict[str, str]:
    """Partition name -> its directory in ``version``, for the kept partitions not current yet."""
    names = [v.partition for v in kept if v.partition is not None]
    with MetastoreClient(settings.metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
        found = [] if table is None else client.thrift.get_partitions_by_names(
            identifier.database, identifier.table, names
        )
    columns = [key.name for key in table.partitionKeys] if table is not None else []
    present_names = {partition_path(columns, p.values) for p in found}
    gone = sorted(set(names) - present_names)
    if gone:
        raise StagingError(
            f"partition(s) {gone} of version {version} are no longer in {identifier} (dropped or expired): "
            "nothing changed; restore the others with a partition spec"
        )
    todo = {v.partition: v.location for v in kept if v.partition is not None and not v.current}
    if not todo:
        raise StagingError(f"version {version} is already the current version of {identifier}'s {names}")
    return todo


def _refuse_if_due(
    settings: StagedSettings, identifier: TableIdentifier, version: str, location: str, now: float | None
) -> None:
    """A version that retention may delete soon is not rolled back to: a sweep that decided
    before this rollback was journaled would delete what the table then points at.

    "Soon" is within ``DUE_MARGIN_SECONDS``: a sweep that finds the version due at its ``now``
    either read the journal before this rollback was journaled (right after this check), so its
    ``now`` is before this check's ``now`` + the margin, where the version is due too; or it read
    it after, and skips the version, which this rollback's record names in flight."""
    listed = [e for e in list_versions(location.rpartition("/")[0]) if e.location == location]
    records = version_records(settings.journal.records(), identifier.name)
    live = set()
    with MetastoreClient(settings.metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
        if table is not None:
            live.add(normalize_location(current_location(table)))
            if table.partitionKeys:
                partitions = client.partitions(table.dbName, table.tableName)
                live |= {_version_dir(p.sd.location) for p in partitions}
    now = settings.journal.now() if now is None else now
    if _doomed(listed, records, live, settings.retention, now + DUE_MARGIN_SECONDS):
        policy = settings.retention
        raise StagingError(
            f"version {version} of {identifier} is due for deletion by retention within "
            f"{DUE_MARGIN_SECONDS:.0f} s (keep_versions={policy.keep_versions}, grace "
            f"{policy.grace_seconds:.0f} s): nothing changed"
        )
