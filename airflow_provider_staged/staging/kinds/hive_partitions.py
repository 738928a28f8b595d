"""Atomic replacement of some partitions of a Hive Metastore table (materialized-table refresh).

The attempt's version directory holds the refreshed partitions; the commit switches every
partition it touches in ONE ``alter_partitions`` (one metastore transaction). Partitions the
table does not have yet are first registered at the table's empty placeholder directory —
a reader sees them empty, as they were while absent — and then switched in that same single
call, so a reader never sees a mix of old and new partitions. The first refresh creates the
table with Spark's directory-discovered layout (one call, complete), registers its
partitions (invisible to Spark until the last step), then switches the table to
catalog-tracked partitions. A table whose partitions Spark discovers from its directories (made
by a whole-table CTAS or replace) is switched the same way: the partitions outside the spec are
registered at their directories, the touched ones switched, and the table's last call makes
Spark read them all from the catalog. A CTAS / RTAS of a table with a partition TTL is this kind
too (its partitions stay in the catalog, where the TTL drops them); one that changes the schema
switches the whole table in one ``alter_table`` and then tracks the new version's partitions the
same way. Every step runs under the table's metastore lock.

A refresh of a table that tracks its partitions prepares its commit when the job's output is
recorded (``written``): under the lock it reads the table, registers the new partitions at the
placeholder and computes the switch. The commit is then that one ``alter_partitions`` alone,
without the lock: a compare-and-set that the embedded metastore's store checks in the call's
transaction (the table's revision, the partitions inside the spec and their locations as read,
no lock holder; ``local/java/SnapshotReadsStore.java``), as Iceberg commits a prepared
metadata file. When the table changed since, the switch is refused, nothing changes, and the
commit does everything again under the lock. A metastore that cannot check it gets the locked
commit only.

The journal records the partition columns and the spec, so reconcile rebuilds exactly this
kind: its ``is_published`` asks whether any partition of a table that reads its catalog
partitions points into the attempt's directory, which the single switching call makes
all-or-nothing. For a table that still reads its directories the switch is the table's last
call: an abort before it points the partitions it moved back at the directories readers read.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import REVISION_KEY, MetastoreClient, PartitionsAsRead
from airflow_provider_staged.catalogs.metastore.tables import (
    PARTITION_PROVIDER_KEY,
    SCHEMA_KEY,
    current_location,
    is_version,
    new_table,
    schema_parameters,
    tracks_partitions,
)
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.audits import AuditResult
from airflow_provider_staged.staging.errors import CatalogConflictError, StagingError
from airflow_provider_staged.staging.faults import fault_point
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import (
    matches,
    partition_path,
    partition_values,
    unstorable,
)
from airflow_provider_staged.staging.partition_ttl import (
    NEXT_EXPIRY_KEY,
    UPDATED_AT_KEY,
    TtlError,
    earliest_expiry,
    parse_ttl,
    ttl_options,
)
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import list_dir, make_dirs, normalize_location

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

# Beside the version directories (not one: the sweep never touches it), always empty.
EMPTY_DIR_NAME = "_empty"

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PreparedSwitch:
    """A commit made ready when the job's output was recorded: the one ``alter_partitions`` that
    publishes it, what that call expects to find, and the locations it supersedes."""

    attempt_id: str
    switched: list[ttypes.Partition]
    expected: PartitionsAsRead
    superseded: list[str]


class HivePartitionStagedTable(HiveStagedTable):
    """Replace the partitions inside ``partition_spec`` (all partitions when it is empty)."""

    kind = "hive_partitions"
    # Whether a commit may be prepared when the output is recorded (a kind whose switch does more
    # than this class's, under the lock, may not).
    prepares_switch = True

    def __init__(
        self,
        identifier: TableIdentifier,
        partition_columns: Sequence[str],
        partition_spec: Mapping[str, str],
        journal: AttemptJournal,
        metastore_uri: str,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
        conn_id: str | None = None,
        purpose: StagingPurpose = StagingPurpose.CREATE_OR_REPLACE_TABLE_AS,
        table_options: Mapping[str, str] | None = None,
        replaces_table: bool = False,
    ) -> None:
        """``replaces_table``: a CTAS / RTAS (not a refresh), which may change the table's schema."""
        super().__init__(
            identifier, purpose, journal, metastore_uri, retention, task, attempt_id, conn_id, table_options
        )
        self.replaces_table = replaces_table
        unknown = sorted(set(partition_spec) - set(partition_columns))
        if not partition_columns or unknown:
            raise StagingError(
                f"partition spec {dict(partition_spec)} does not fit {list(partition_columns)}"
            )
        self.partition_columns = list(partition_columns)
        self.partition_spec = dict(partition_spec)
        self._prepared: PreparedSwitch | None = None

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HivePartitionStagedTable:
        return cls(
            TableIdentifier.parse(record.target),
            record.catalog["partition_columns"],
            record.catalog["partition_spec"],
            purpose=StagingPurpose.parse(record.purpose),
            table_options=record.catalog.get("table_options"),
            replaces_table=bool(record.catalog.get("replaces_table", False)),
            **cls.rebuilt(record, settings),
        )

    def catalog_ref(self) -> dict[str, Any]:
        return {
            **super().catalog_ref(),
            "partition_columns": self.partition_columns,
            "partition_spec": self.partition_spec,
            "replaces_table": self.replaces_table,
        }

    def write_spec(self) -> dict[str, Any]:
        return {**super().write_spec(), "partition_by": self.partition_columns}

    # -- a commit prepared ahead -------------------------------------------------------

    def written(self, manifest: Manifest | dict[str, Any]) -> None:
        super().written(manifest)
        if not self.audits:
            self._prepare_commit()

    def audit(self) -> list[AuditResult]:
        results = super().audit()  # raises for a quarantined version: it registers nothing
        if self.audits:
            self._prepare_commit()
        return results

    def _prepare_commit(self) -> None:
        # A create-only purpose must fail on a table made meanwhile: its commit decides that.
        if not self.skipped and self.prepares_switch and self.purpose.replaces:
            # Under the attempt's journal lock, as every section of an attempt that holds the
            # table's lock: reconcile, holding it, knows any lock of the attempt abandoned.
            with self.journal.locked(self.attempt_id):
                self._prepared = self._prepare_switch()

    def _prepare_switch(self) -> PreparedSwitch | None:
        """Do the commit's reads and register its new partitions (at the placeholder: empty, as
        they were while absent) now, under the table's lock, so that the commit is the switch
        alone: one ``alter_partitions`` that lands only while the table is as read here (no
        lock). None when the switch needs more than that call (a table change, a table that reads
        its directories, a metastore that cannot check it): the commit then does it all, locked.
        An error here only loses the head start; the commit reads everything again."""
        record = self.journal.require(self.attempt_id)
        manifest = Manifest.from_dict(record.manifest or {})
        database, name = self.identifier.database, self.identifier.table
        try:
            with self._client() as client:
                if not client.probe_partition_compare_and_set():
                    return None
                with client.locked(database, name):
                    fault_point("table_locked")
                    current = client.read_for_update(database, name)
                    revision = (current.parameters or {}).get(REVISION_KEY) if current else None
                    if revision is None or not self._keeps_table(current, manifest):
                        return None
                    existing = {tuple(p.values) for p in self._inside_spec(client, current)}
                    targets = sorted(self._targets(manifest, list(existing)))
                    if self._table_update(current, targets, None) is not None:
                        return None
                    placeholder = self._empty_location(record)
                    client.add_partitions([self._partition(current, values, placeholder, None)
                                           for values in targets if values not in existing])
                    inside = self._inside_spec(client, current)  # as stored, the new ones too
        except Exception:
            log.warning("preparing the commit of %s failed: it commits under the table's lock",
                        self.target, exc_info=True)
            return None
        superseded: list[str] = []
        return PreparedSwitch(
            attempt_id=self.attempt_id,
            switched=self._switched(record, manifest, inside, superseded),
            expected=PartitionsAsRead(
                revision=revision,
                spec=self.partition_spec,
                locations={partition_path(self.partition_columns, p.values): p.sd.location for p in inside},
            ),
            superseded=superseded,
        )

    def _keeps_table(self, current: ttypes.Table, manifest: Manifest) -> bool:
        """Whether switching this attempt's partitions leaves ``current``'s own object as it is."""
        try:
            return tracks_partitions(current) and switched_schema(current, manifest, self.target) is None
        except StagingError:
            return False  # a schema change: the table switches whole

    def publish(self, record: AttemptRecord) -> str | list[str] | None:
        """The prepared switch when the table is still as prepared, else the full commit, locked."""
        prepared, self._prepared = self._prepared, None
        if prepared is None or prepared.attempt_id != record.attempt_id:
            return super().publish(record)
        try:
            with self._client() as client:
                client.switch_partitions(
                    self.identifier.database, self.identifier.table, prepared.switched, prepared.expected
                )
        except CatalogConflictError as conflict:
            log.info("%s changed after its commit was prepared (%s): committing under its lock",
                     self.target, conflict)
            return super().publish(record)
        return prepared.superseded

    # -- the catalog operations ---------------------------------------------------------

    def create_target(self, txn: MetastoreClient, record: AttemptRecord, manifest: Manifest) -> None:
        self.create_new_table(txn, manifest)
        self._register_created(txn, record, manifest)

    def _register_created(self, txn: MetastoreClient, record: AttemptRecord, manifest: Manifest) -> list[str]:
        """Make the catalog's partitions exactly this attempt's, of a table that reads its version
        from the directories (created, or replaced whole, by this attempt), then make Spark read
        them from the catalog. Until that last call Spark reads the same from the directories.
        Returns where the partitions it dropped or moved pointed before."""
        table = txn.read_for_update(self.identifier.database, self.identifier.table)
        if not is_version(table, record.location):
            return []  # a lock-free replace came after the create: it stands, and reads its own files
        database, name = table.dbName, table.tableName
        locations = {v: self._location(record, v) for v in sorted(self._targets(manifest, []))}
        stats = partition_stats(manifest, self.partition_columns)
        registered = {tuple(p.values): p for p in txn.partitions(database, name)}
        replaced = {
            v: p for v, p in registered.items() if normalize_location(p.sd.location) != locations.get(v)
        }
        txn.drop_partitions(database, name, self._names(v for v in replaced if v not in locations))
        txn.alter_partitions(database, name, [
            relocated(p, locations[v], stats) for v, p in replaced.items() if v in locations
        ])
        txn.add_partitions([self._partition(table, v, location, stats.get(v))
                            for v, location in locations.items() if v not in registered])
        table.parameters[PARTITION_PROVIDER_KEY] = "catalog"
        # New partitions: the sweep reads the table next time and records when they expire.
        table.parameters.pop(NEXT_EXPIRY_KEY, None)
        txn.alter_table(table)
        return [normalize_location(p.sd.location) for p in replaced.values()]

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> list[str]:
        try:
            widened = switched_schema(current, manifest, self.target)
        except StagingError:
            if not self.replaces_table:
                raise
            return self._replace_whole(txn, current, record, manifest)
        tracked = tracks_partitions(current)
        discovered = {} if tracked else self._register_discovered(txn, current)
        existing = {tuple(p.values): p for p in self._inside_spec(txn, current)}
        targets = sorted(self._targets(manifest, list(existing)))
        placeholder = self._empty_location(record)
        added = [values for values in targets if values not in existing]
        new = [self._partition(current, values, placeholder, None) for values in added]
        if tracked:
            self._update_table(txn, current, targets, widened)
        # Visible as empty partitions until the switch below: as they were while absent.
        txn.add_partitions(new)
        superseded = [location for values, location in discovered.items() if values in targets]
        switched = self._switched(
            record, manifest, [*(existing[v] for v in targets if v in existing), *new], superseded
        )
        txn.alter_partitions(current.dbName, current.tableName, switched)
        if not tracked:  # the switch: from now on Spark reads the partitions from the catalog
            self._update_table(txn, current, targets, widened, track=True)
        return superseded

    def _switched(
        self, record: AttemptRecord, manifest: Manifest, partitions: Sequence[ttypes.Partition],
        superseded: list[str],
    ) -> list[ttypes.Partition]:
        """``partitions`` moved into this attempt's directory; adds the locations they leave
        (except the placeholder) to ``superseded``."""
        stats = partition_stats(manifest, self.partition_columns)
        placeholder = self._empty_location(record)
        switched = []
        for partition in partitions:
            switched.append(relocated(partition, self._location(record, tuple(partition.values)), stats))
            old = normalize_location(partition.sd.location)
            if old != placeholder and old not in superseded:
                superseded.append(old)
        return switched

    def _replace_whole(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> list[str]:
        """A replace that changes the table's schema: switching partitions would show the old ones
        under the new schema, so the table switches whole, in one ``alter_table`` (what readers see),
        and then tracks this version's partitions (:meth:`_register_created`). A crash between
        leaves the new version read from its directories; ``complete_publish`` tracks them."""
        superseded = HiveStagedTable.swap(self, txn, current, record, manifest)
        replaced = self._register_created(txn, record, manifest)
        # An untracked table's catalog partitions were not what readers read: they supersede nothing.
        return [*(replaced if tracks_partitions(current) else []), superseded]

    def _inside(self, values: Sequence[str]) -> bool:
        return matches(values, self.partition_columns, self.partition_spec)

    def _register_discovered(self, txn: MetastoreClient, table: ttypes.Table) -> dict[tuple[str, ...], str]:
        """For a table whose partitions Spark discovers from its directories (a partitioned CTAS
        without a partition TTL, or a replaced table): make the catalog's partitions outside this
        refresh's spec those Spark discovers now, at their directories. Spark ignores them until
        the table tracks its partitions (the commit's last call). Returns the discovered partitions
        (values → directory)."""
        discovered = discovered_partitions(current_location(table), self.partition_columns)
        registered = {tuple(p.values): p for p in txn.partitions(table.dbName, table.tableName)}
        outside = {v: loc for v, loc in discovered.items() if not self._inside(v)}
        contents = {v: _contents(loc) for v, loc in outside.items()}
        for values, (_, nested) in contents.items():
            if nested:  # e.g. a sink's batch directories: Spark reads only a catalog partition's own files
                raise StagingError(
                    f"partition directory {outside[values]} of {self.target} keeps files in subdirectories "
                    f"{sorted(nested)[:3]}, which Spark does not read from a catalog partition: refresh "
                    "every partition (an empty spec) or replace the whole table instead"
                )
        leftovers = [v for v in registered if not self._inside(v) and v not in outside]  # unread now
        txn.drop_partitions(table.dbName, table.tableName, self._names(leftovers))
        moved = [relocated(registered[v], loc, {v: contents[v][0]}) for v, loc in outside.items()
                 if v in registered and normalize_location(registered[v].sd.location) != loc]
        if moved:
            txn.alter_partitions(table.dbName, table.tableName, moved)
        txn.add_partitions([self._partition(table, v, loc, contents[v][0]) for v, loc in outside.items()
                            if v not in registered])
        return discovered

    def _update_table(
        self, txn: MetastoreClient, current: ttypes.Table, targets: Sequence[tuple[str, ...]],
        widened: Manifest | None, track: bool = False,
    ) -> None:
        changed = self._table_update(current, targets, widened, track)
        if changed is not None:
            txn.alter_table(changed)

    def _table_update(
        self, current: ttypes.Table, targets: Sequence[tuple[str, ...]], widened: Manifest | None,
        track: bool = False,
    ) -> ttypes.Table | None:
        """What the switch writes to the table besides its partitions (None: nothing), under the
        same lock: this attempt's table options, a lower recorded next expiry when a switched
        partition expires earlier (the sweep trusts it), and the ``widened`` schema
        (:func:`switched_schema`). Widened first, a reader sees the appended columns as null in
        the old partitions until the switch. With ``track`` it IS the switch: the table then reads
        its partitions from the catalog."""
        params = dict(current.parameters or {})
        changed = copy.deepcopy(current)
        wanted = self.with_options(copy.deepcopy(current)).parameters
        if track:
            wanted[PARTITION_PROVIDER_KEY] = "catalog"
        if widened is not None:
            wanted = {k: v for k, v in wanted.items() if not k.startswith(SCHEMA_KEY)}
            wanted.update(schema_parameters(widened, track_partitions=True))
            changed.sd.cols = new_table(self.identifier, widened, self.attempt_id).sd.cols
        try:
            ttl = parse_ttl(wanted, self.partition_columns)
        except TtlError:
            ttl = None  # options set by hand that no sweep can use: nothing to keep up to date
        if ttl is not None and NEXT_EXPIRY_KEY in wanted:
            now = time.time()
            earliest = earliest_expiry(ttl, self.partition_columns, [(values, now) for values in targets])
            if earliest is not None and earliest < float(wanted[NEXT_EXPIRY_KEY]):
                wanted[NEXT_EXPIRY_KEY] = str(int(earliest))
        if wanted == params:
            return None
        changed.parameters = wanted
        return changed

    def replaced_parts(self) -> dict[str, str]:
        """The partitions inside the spec that readers read now (those this attempt registered
        at the empty placeholder hold nothing yet, and are left out)."""
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
            if table is None:
                return {}
            if tracks_partitions(table):
                found = {tuple(p.values): p.sd.location for p in self._inside_spec(client, table)}
            else:
                discovered = discovered_partitions(current_location(table), self.partition_columns)
                found = {values: location for values, location in discovered.items() if self._inside(values)}
        return {
            partition_path(self.partition_columns, values): normalize_location(location)
            for values, location in found.items()
            if normalize_location(location).rpartition("/")[2] != EMPTY_DIR_NAME
        }

    def written_parts(self, manifest: Manifest) -> dict[str, int]:
        rows: dict[str, int] = {}
        for item in manifest.files:
            values = partition_values(item.path, self.partition_columns)
            if values is not None:
                part = partition_path(self.partition_columns, values)
                rows[part] = rows.get(part, 0) + item.rows
        return rows

    def is_published(self, record: AttemptRecord) -> bool:
        mine = normalize_location(record.location)
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
            if table is None:
                return False
            if is_version(table, mine):
                return True  # this attempt created the table
            if not tracks_partitions(table):
                return False  # Spark reads none of the catalog's partitions
            partitions = self._inside_spec(client, table)
        return any(normalize_location(p.sd.location).startswith(mine + "/") for p in partitions)

    def complete_publish(self, record: AttemptRecord) -> None:
        """A crash between creating the table and registering its partitions: finish it."""
        with self.catalog_transaction() as txn:
            table = self.load_current(txn)
            if is_version(table, record.location) and not tracks_partitions(table):
                self._register_created(txn, record, Manifest.from_dict(record.manifest or {}))

    def discard(self, record: AttemptRecord) -> None:
        """Unregister what the attempt left in the catalog, then delete its directory.

        Left are partitions it registered at the placeholder and, of a table that reads its
        partitions from its directories (the commit's last call makes it read the catalog's),
        partitions it switched into its own directory: those point back at the directories
        Spark reads, or go when Spark reads none (a partition only this attempt wrote)."""
        if record.manifest:
            self._unregister(record, self._written(Manifest.from_dict(record.manifest)))
        super().discard(record)

    def _unregister(self, record: AttemptRecord, written: set[tuple[str, ...]]) -> None:
        placeholder = self._empty_location(record)
        mine = normalize_location(record.location) + "/"
        with self.catalog_transaction() as txn:
            table = self.load_current(txn)
            if table is None:
                return
            inside = {tuple(p.values): p for p in self._inside_spec(txn, table)}
            left = [v for v, p in inside.items()
                    if normalize_location(p.sd.location) == placeholder and v in written]
            restored = []
            if not tracks_partitions(table):
                discovered = discovered_partitions(current_location(table), self.partition_columns)
                switched = [v for v, p in inside.items()
                            if normalize_location(p.sd.location).startswith(mine)]
                left += [v for v in switched if v not in discovered]
                restored = [relocated(inside[v], discovered[v], {v: dir_stats(discovered[v])})
                            for v in switched if v in discovered]
            txn.alter_partitions(table.dbName, table.tableName, restored)
            txn.drop_partitions(table.dbName, table.tableName, self._names(left))

    # -- partition math -----------------------------------------------------------------

    def _written(self, manifest: Manifest) -> set[tuple[str, ...]]:
        written = {partition_values(f.path, self.partition_columns) for f in manifest.files}
        if None in written:
            raise StagingError(f"attempt {self.attempt_id} wrote files outside partition directories")
        return written  # type: ignore[return-value]

    def _targets(self, manifest: Manifest, existing: Sequence[tuple[str, ...]]) -> set[tuple[str, ...]]:
        """The partitions the refresh writes plus the existing ones inside its spec (emptied)."""
        written = self._written(manifest)
        # Values the query produced: named here, before any catalog change, not by the metastore's
        # failure halfway through registering them.
        for values in sorted(written):
            why = unstorable(self.partition_columns, values)
            if why:
                raise StagingError(f"refresh of {self.target} cannot commit: {why}")
        outside = [v for v in written if not self._inside(v)]
        if outside:
            raise StagingError(
                f"refresh of {self.partition_spec} produced rows of other partitions: {sorted(outside)[:3]}"
            )
        inside = {v for v in existing if self._inside(v)}
        return written | inside

    def _names(self, values: Iterable[tuple[str, ...]]) -> list[str]:
        """The metastore's names of partitions (``col=value/...``, escaped as in their paths)."""
        return [partition_path(self.partition_columns, v) for v in values]

    def _inside_spec(self, client: MetastoreClient, table: ttypes.Table) -> list[ttypes.Partition]:
        """The table's partitions inside this refresh's spec (every partition it may touch)."""
        return client.partitions_matching(
            table.dbName, table.tableName, self.partition_columns, self.partition_spec
        )

    def _partition(
        self, table: ttypes.Table, values: tuple[str, ...], location: str, stats: tuple[int, int] | None
    ) -> ttypes.Partition:
        storage = copy.deepcopy(table.sd)
        storage.location = location
        return ttypes.Partition(
            values=list(values),
            dbName=table.dbName,
            tableName=table.tableName,
            sd=storage,
            parameters=commit_parameters(stats),
            # Hive's add sets it, but the switch writes back what it is sent: 0 shows as 1970.
            createTime=int(time.time()),
        )

    def _location(self, record: AttemptRecord, values: tuple[str, ...]) -> str:
        location = f"{normalize_location(record.location)}/{partition_path(self.partition_columns, values)}"
        # A partition the refresh emptied still needs a (empty) directory to point at.
        make_dirs(location)
        return location

    def _empty_location(self, record: AttemptRecord) -> str:
        root = normalize_location(record.location).rpartition("/")[0]
        location = f"{root}/{EMPTY_DIR_NAME}"
        make_dirs(location)
        return location


def staged_hive_table(
    identifier: TableIdentifier,
    purpose: StagingPurpose,
    settings: StagedSettings,
    task: TaskRef | None,
    partition_by: Sequence[str] = (),
    table_options: Mapping[str, str] | None = None,
    conn_id: str | None = None,
) -> HiveStagedTable:
    """The staged kind of a Hive CTAS / RTAS that sets ``table_options`` (None: keeps the table's).

    With a partition TTL, set or kept, the catalog tracks every partition (an expired one is
    dropped in one metastore call); otherwise the whole table switches versions.
    """
    journal, uri, retention = settings.journal, settings.metastore_uri, settings.retention
    if table_options is not None:
        ttl = ttl_options(table_options)
    else:
        ttl = kept_ttl_options(uri, identifier, purpose, partition_by)
    if ttl:
        return HivePartitionStagedTable(identifier, partition_by, {}, journal, uri, retention, task,
                                        conn_id=conn_id, purpose=purpose, table_options=table_options,
                                        replaces_table=True)
    return HiveStagedTable(identifier, purpose, journal, uri, retention, task, conn_id=conn_id,
                           table_options=table_options)


def kept_ttl_options(
    metastore_uri: str, identifier: TableIdentifier, purpose: StagingPurpose, partition_by: Sequence[str]
) -> dict[str, str]:
    """The partition TTL that a replace without options keeps: the table's, when it replaces one
    partitioned by the same columns. A whole-table switch would leave it a table whose partitions
    Spark finds in its directories, which no TTL can drop, while the option still says it expires."""
    if not purpose.replaces or not partition_by:
        return {}
    with MetastoreClient(metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
    keys = [key.name.lower() for key in (table.partitionKeys or [])] if table is not None else []
    if keys != [column.lower() for column in partition_by]:
        return {}
    return ttl_options(table.parameters or {})


def discovered_partitions(location: str, columns: Sequence[str]) -> dict[tuple[str, ...], str]:
    """The partitions Spark discovers under ``location``: values → directory (``col=value`` at each
    level; names starting with ``_`` or ``.`` are hidden from it)."""
    found: dict[tuple[str, ...], str] = {}
    level = [(normalize_location(location), "")]
    for _ in columns:
        level = [
            (normalize_location(entry.location), f"{relative}{entry.name}/")
            for directory, relative in level
            for entry in list_dir(directory)
            if entry.is_dir and "=" in entry.name and not entry.name.startswith(("_", "."))
        ]
    for directory, relative in level:
        values = partition_values(f"{relative}f", columns)
        if values is not None:
            found[values] = directory
    return found


def dir_stats(location: str) -> tuple[int, int]:
    """(files, bytes) of the data files directly in ``location``: the partition's fast statistics."""
    return _contents(location)[0]


def _contents(location: str) -> tuple[tuple[int, int], list[str]]:
    """One listing of ``location``: :func:`dir_stats`, and its subdirectories (hidden ones left out:
    Spark reads neither their files nor ``.``/``_`` files)."""
    shown = [entry for entry in list_dir(location) if not entry.name.startswith((".", "_"))]
    data = [entry for entry in shown if not entry.is_dir]
    nested = [entry.name for entry in shown if entry.is_dir]
    return (len(data), sum(entry.size for entry in data)), nested


def partition_stats(manifest: Manifest, columns: Sequence[str]) -> dict[tuple[str, ...], tuple[int, int]]:
    """(files, bytes) per written partition, from the manifest."""
    stats: dict[tuple[str, ...], tuple[int, int]] = {}
    for item in manifest.files:
        values = partition_values(item.path, columns)
        if values is not None:
            files, size = stats.get(values, (0, 0))
            stats[values] = (files + 1, size + item.bytes)
    return stats


def relocated(
    partition: ttypes.Partition, location: str, stats: dict[tuple[str, ...], tuple[int, int]]
) -> ttypes.Partition:
    """A copy of ``partition`` pointing at ``location``, with the statistics of what it holds there."""
    changed = copy.deepcopy(partition)
    changed.sd.location = location
    written = commit_parameters(stats.get(tuple(changed.values)))
    changed.parameters = {**(changed.parameters or {}), **written}
    return changed


def commit_parameters(stats: tuple[int, int] | None) -> dict[str, str]:
    """The metastore's fast statistics, given (without them it lists every partition's files),
    and the commit time (the partition's update time of the TTL's update-time strategy)."""
    files, size = stats or (0, 0)
    return {"numFiles": str(files), "totalSize": str(size), UPDATED_AT_KEY: str(int(time.time()))}


def switched_schema(table: ttypes.Table, manifest: Manifest, target: str) -> Manifest | None:
    """What switching partitions to ``manifest``'s files does to the table's schema.

    None: the table keeps its schema (the manifest's is the same, or the table's without data
    columns appended since: an older version, whose files read them as null). A manifest that
    appends data columns (CREATE OR ALTER MATERIALIZED TABLE) comes back with those columns
    nullable, for the table to take: the partitions left alone read them as null. Any other
    difference raises :class:`StagingError`.
    """
    current = (table.parameters or {}).get(SCHEMA_KEY)
    wanted = schema_parameters(manifest).get(SCHEMA_KEY)
    if not current or not wanted or json.loads(current) == json.loads(wanted):
        return None
    old, new = json.loads(current)["fields"], json.loads(wanted)["fields"]
    keys = len(manifest.partition_columns)  # partition columns come last
    old_data, new_data = old[: len(old) - keys], new[: len(new) - keys]
    shorter, longer = sorted((old_data, new_data), key=len)
    # Names and types must match; nullability not (Spark reads file-source columns as nullable).
    kept = [_shape(f) for f in longer[: len(shorter)]] == [_shape(f) for f in shorter]
    same_keys = [_shape(f) for f in old[len(old_data):]] == [_shape(f) for f in new[len(new_data):]]
    if len(shorter) == len(longer) or not kept or not same_keys:
        raise StagingError(
            f"the query's schema no longer matches table {target}: a partition refresh can only append "
            f"columns (table {[_shape(f) for f in old]}, query {[_shape(f) for f in new]})"
        )
    if len(new_data) < len(old_data):
        return None
    appended = [{**f, "nullable": True} for f in new_data[len(old_data):]]
    schema = {**json.loads(wanted), "fields": [*old_data, *appended, *new[len(new_data):]]}
    return dataclasses.replace(manifest, schema_json=json.dumps(schema, separators=(",", ":")))


def _shape(field: Mapping[str, Any]) -> tuple[str, str]:
    return field["name"].lower(), json.dumps(field["type"], sort_keys=True)


def check_same_schema(table: ttypes.Table, manifest: Manifest, target: str) -> None:
    """A version may switch back in (rollback) when its schema is the table's, or the table's
    without columns appended since; never one that would change the table's schema."""
    if switched_schema(table, manifest, target) is not None:
        raise StagingError(
            f"the version has columns table {target} does not have: a partition rollback cannot "
            "change its schema"
        )
