"""Partition expiry (TTL) as a staged attempt on the one commit path, and the sweep over a catalog.

An expiry is an attempt of kind ``hive_expire``: BEGUN with the partitions planned to go,
WRITTEN (it writes no data), then committed like any attempt — under the table's metastore
lock the partitions are read again, those still expired are dropped in ONE
``drop_partitions_req`` call, and the table's recorded next expiry is updated. Readers see a
partition or not, never part of one. The dropped partitions' files are deleted afterwards,
once no reader can still be reading them (after the retention grace, as superseded versions;
Paimon deletes an expired partition's files when its snapshot expires, for the same reason),
and never while the catalog points at them.

The sweep reads each database's tables in one ``get_table_objects_by_name_req`` call and skips
every table whose recorded next expiry (``partition_ttl.NEXT_EXPIRY_KEY``)
lies in the future: a sweep in which nothing expires costs no per-table metastore call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import tracks_partitions
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import run_attempt
from airflow_provider_staged.staging.conflicts import retry_on_conflict
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds.hive_partitions import EMPTY_DIR_NAME
from airflow_provider_staged.staging.kinds.hive_table import EXPIRE_KIND, HiveStagedTable
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import partition_path
from airflow_provider_staged.staging.partition_ttl import (
    EXPIRATION_TIME,
    NEXT_EXPIRY_KEY,
    UPDATED_AT_KEY,
    PartitionTtl,
    TtlError,
    earliest_expiry,
    parse_ttl,
)
from airflow_provider_staged.storage.files import delete_dir, exists, normalize_location

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

# Tables per get_table_objects_by_name_req call: one call per database for all but huge ones.
_BATCH = 1000


def partition_name(columns: list[str], values: list[str]) -> str:
    """The metastore's name of a partition (``ds=2024-01-01/h=03``, escaped as Hive does)."""
    return partition_path(columns, values)


def _updated_at(partition: ttypes.Partition) -> float | None:
    """When the partition was last committed: our parameter, else the metastore's create time."""
    value = (partition.parameters or {}).get(UPDATED_AT_KEY)
    if value is not None:
        return float(value)
    return float(partition.createTime) if partition.createTime else None


def table_ttl(table: ttypes.Table) -> PartitionTtl | None:
    """The TTL stored in a table's parameters (None without one, or when it is unusable)."""
    try:
        return parse_ttl(table.parameters or {}, [key.name for key in table.partitionKeys or []])
    except TtlError as err:
        log.warning("table %s.%s: partition TTL ignored: %s", table.dbName, table.tableName, err)
        return None


@dataclass
class ExpiryPlan:
    """What one table's expiry decided at ``now``."""

    target: str
    expired: dict[str, str] = field(default_factory=dict)  # partition name -> location
    unparseable: list[str] = field(default_factory=list)  # values-time partitions without a time
    next_expiry: float | None = None  # among the partitions that stay


def plan_expiry(
    table: ttypes.Table, partitions: list[ttypes.Partition], ttl: PartitionTtl, now: float
) -> ExpiryPlan:
    """Which of ``partitions`` are expired at ``now`` (pure: the caller read them)."""
    columns = [key.name for key in table.partitionKeys]
    plan = ExpiryPlan(f"{table.dbName}.{table.tableName}")
    staying = []
    for partition in partitions:
        name = partition_name(columns, partition.values)
        updated = _updated_at(partition)
        if ttl.partition_time(columns, partition.values, updated) is None:
            plan.unparseable.append(name)
        elif ttl.is_expired(columns, partition.values, updated, now):
            plan.expired[name] = normalize_location(partition.sd.location)
            continue
        staying.append((partition.values, updated))
    plan.next_expiry = earliest_expiry(ttl, columns, staying)
    return plan


def untracked_ttl_message(target: str) -> str:
    return (
        f"table {target} reads its partitions from its directories, not from the catalog (it was "
        "last replaced as a whole): its partition TTL can drop none of them; replace it again with "
        "the TTL options to make them catalog partitions"
    )


def _with_next_expiry(table: ttypes.Table, next_expiry: float | None) -> ttypes.Table | None:
    """``table`` recording ``next_expiry``, or None when it already does."""
    params = dict(table.parameters or {})
    wanted = str(int(next_expiry)) if next_expiry is not None else None
    if params.get(NEXT_EXPIRY_KEY) == wanted:
        return None
    if wanted is None:
        params.pop(NEXT_EXPIRY_KEY, None)
    else:
        params[NEXT_EXPIRY_KEY] = wanted
    table.parameters = params
    return table


class HivePartitionExpiry(HiveStagedTable):
    """Drop the planned partitions that are still expired when the commit holds the table lock."""

    kind = EXPIRE_KIND
    writes_data = False

    def __init__(self, identifier: TableIdentifier, planned: dict[str, str], now: float, **hive: Any) -> None:
        """``hive``: the arguments of :class:`HiveStagedTable` after the purpose (journal, ...)."""
        super().__init__(identifier, StagingPurpose.REPLACE_TABLE_AS, **hive)
        self.planned = dict(planned)
        self.now = now

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HivePartitionExpiry:
        return cls(
            TableIdentifier.parse(record.target),
            record.catalog["partitions"],
            record.catalog["now"],
            **cls.rebuilt(record, settings),
        )

    def catalog_ref(self) -> dict[str, Any]:
        return {"metastore_uri": self.metastore_uri, "partitions": self.planned, "now": self.now}

    def staging_location(self) -> str:
        # An expiry writes no data: its "location" only names it (never a directory).
        return f"expire://{self.identifier.database}/{self.identifier.table}/{self.attempt_id}"

    def write_spec(self) -> dict[str, Any]:
        return {"format": "none"}  # an expiry writes no data

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> list[str]:
        ttl = table_ttl(current)
        if ttl is None:
            return []  # the TTL was removed since the plan: nothing expires
        partitions = txn.partitions(current.dbName, current.tableName)
        plan = plan_expiry(current, partitions, ttl, self.now)
        # Only what was planned (and journaled) goes; a refresh since the plan may have renewed it.
        names = [name for name, where in plan.expired.items() if self.planned.get(name) == where]
        txn.drop_partitions(current.dbName, current.tableName, names)
        columns = [key.name for key in current.partitionKeys]
        dropped = set(names)
        staying = [
            (p.values, _updated_at(p)) for p in partitions if partition_name(columns, p.values) not in dropped
        ]
        changed = _with_next_expiry(current, earliest_expiry(ttl, columns, staying))
        if changed is not None:
            txn.alter_table(changed)  # after the drop: a crash between leaves it early, never late
        return [plan.expired[name] for name in names]

    def is_published(self, record: AttemptRecord) -> bool:
        """Dropped in one call: some planned partition gone ⇔ the drop landed."""
        names = list(record.catalog["partitions"])
        with self._client() as client:
            found = client.thrift.get_partitions_by_names(
                self.identifier.database, self.identifier.table, names
            )
        return len(found) < len(names)

    def recovered_superseded(self, record: AttemptRecord) -> list[str]:
        """A drop that landed but was not journaled: the planned partitions the catalog no longer
        points at, so their files are deleted after the grace as a journaled drop's are."""
        planned = record.catalog["partitions"]
        with self._client() as client:
            found = client.thrift.get_partitions_by_names(
                self.identifier.database, self.identifier.table, list(planned)
            )
        live = {normalize_location(p.sd.location) for p in found}
        return [where for where in planned.values() if where not in live]

    def discard(self, record: AttemptRecord) -> None:
        """An expiry wrote nothing: nothing to delete."""

    def after_commit(self, record: AttemptRecord) -> None:
        # Only this expiry's files (due at once without a grace): the maintenance sweep reads
        # the journal once for every earlier one.
        delete_dropped_files(self, [record], self.journal.now())


def delete_dropped_files(
    staged: HiveStagedTable, records: list[AttemptRecord], now: float
) -> list[str]:
    """Delete the files of partitions that expiries of ``staged``'s table dropped more than the
    retention grace ago, unless the catalog points at them again. Reads the catalog only when
    such files still exist."""
    due = [
        location
        for record in records
        if record.kind == EXPIRE_KIND
        and record.target == staged.target
        and record.state is AttemptState.COMMITTED
        and now - record.updated_at > staged.retention.grace_seconds
        for location in (record.superseded_location or [])
        # The shared empty placeholder is never a dropped partition's own directory.
        if not location.endswith(f"/{EMPTY_DIR_NAME}") and exists(location)
    ]
    if not due:
        return []
    with staged._client() as client:
        table = client.get_table(staged.identifier.database, staged.identifier.table)
        live = [] if table is None else [
            normalize_location(p.sd.location) for p in client.partitions(table.dbName, table.tableName)
        ]
    deleted = []
    for location in due:
        if any(other == location or other.startswith(location + "/") for other in live):
            continue
        log.info("expiry: deleting files of dropped partition %s of %s", location, staged.target)
        delete_dir(location)
        deleted.append(location)
    return deleted


def _record_next_expiry(client: MetastoreClient, identifier: TableIdentifier, now: float) -> None:
    """Record the next expiry under the lock, from partitions read under it: a commit that just
    added an earlier-expiring partition is seen."""
    with client.locked(identifier.database, identifier.table):
        current = client.read_for_update(identifier.database, identifier.table)
        if current is not None and (ttl := table_ttl(current)) is not None:
            fresh = plan_expiry(current, client.partitions(identifier.database, identifier.table), ttl, now)
            if not fresh.expired and (changed := _with_next_expiry(current, fresh.next_expiry)):
                client.alter_table(changed)


def expire_table(
    settings: StagedSettings,
    identifier: TableIdentifier,
    now: float | None = None,
    dry_run: bool = False,
    table: ttypes.Table | None = None,
    conn_id: str | None = None,
) -> ExpiryPlan:
    """Expire ``identifier``'s partitions at ``now``; ``dry_run`` only says what would go.

    ``table`` is the table object when the caller has just read it (the sweep).
    """
    now = settings.journal.now() if now is None else now
    with MetastoreClient(settings.metastore_uri) as client:
        table = table or client.get_table(identifier.database, identifier.table)
        if table is None:
            raise StagingError(f"table {identifier} does not exist")
        ttl = table_ttl(table)
        if ttl is None:
            raise StagingError(f"table {identifier} has no partition TTL ('{EXPIRATION_TIME}')")
        if not tracks_partitions(table):  # its catalog partitions, if any, are not what Spark reads
            raise StagingError(untracked_ttl_message(identifier.name))
        plan = plan_expiry(table, client.partitions(identifier.database, identifier.table), ttl, now)
        if dry_run:
            return plan
        if not plan.expired:
            retry_on_conflict(lambda: _record_next_expiry(client, identifier, now), f"expiry of {identifier}")
            return plan
    expiry = HivePartitionExpiry(
        identifier, plan.expired, now, journal=settings.journal, metastore_uri=settings.metastore_uri,
        retention=settings.retention, conn_id=conn_id,
    )
    # The one commit path: begin, written (nothing), commit under the lock, housekeep; a
    # failure aborts (which deletes nothing: an expiry wrote nothing).
    run_attempt(
        expiry,
        lambda _spec: Manifest(location=expiry.location, format="none", rows=0),
        settings.attempt_ttl_seconds,
    )
    record = settings.journal.require(expiry.attempt_id)
    dropped = set(record.superseded_location or [])
    plan.expired = {name: where for name, where in plan.expired.items() if where in dropped}
    return plan


@dataclass
class SweepReport:
    """What one expiry sweep over a catalog did; ``calls`` counts its metastore calls."""

    tables_with_ttl: int = 0
    skipped: int = 0  # next expiry in the future: not read
    untracked: list[str] = field(default_factory=list)  # TTL set, partitions found in directories
    plans: list[ExpiryPlan] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    calls: int = 0


def sweep_expiry(
    settings: StagedSettings,
    now: float | None = None,
    dry_run: bool = False,
    databases: list[str] | None = None,
    conn_id: str | None = None,
) -> SweepReport:
    """Expire partitions in every table with a TTL (of ``databases``, default all)."""
    now = settings.journal.now() if now is None else now
    report = SweepReport()
    due: list[ttypes.Table] = []
    with MetastoreClient(settings.metastore_uri) as client:
        thrift = client.thrift
        if databases is None:
            databases = thrift.get_all_databases()
            report.calls += 1
        for database in databases:
            names = thrift.get_all_tables(database)
            report.calls += 1
            for start in range(0, len(names), _BATCH):
                tables = client.tables_named(database, names[start : start + _BATCH])
                report.calls += 1
                for table in tables:
                    params = table.parameters or {}
                    if EXPIRATION_TIME not in params:
                        continue
                    report.tables_with_ttl += 1
                    if not tracks_partitions(table):  # expire_table refuses it: say so, fail no sweep
                        report.untracked.append(f"{table.dbName}.{table.tableName}")
                        continue
                    next_expiry = params.get(NEXT_EXPIRY_KEY)
                    if next_expiry is not None and float(next_expiry) >= now and not dry_run:
                        report.skipped += 1
                    else:
                        due.append(table)
    for table in due:
        identifier = TableIdentifier(table.dbName, table.tableName)
        try:
            plan = expire_table(settings, identifier, now, dry_run, table, conn_id)
        except Exception as error:  # one table's failure never stops the others
            log.exception("expiry of %s failed", identifier)
            report.failures[identifier.name] = str(error)
            continue
        report.plans.append(plan)
        verb = "would drop" if dry_run else "dropped"
        log.info("expiry %s: %s %d partition(s) %s", identifier, verb, len(plan.expired),
                 sorted(plan.expired))
    return report
