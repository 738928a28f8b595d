"""Staged tables on a Hive Metastore: each attempt is a version directory; commit is one call.

Layout: ``<table root>/_v=<attempt id>/`` holds an attempt's Parquet files and manifest.
The metastore points the (EXTERNAL) table at exactly one version; commit creates the table
there or alters it to the new version; abort deletes the attempt's directory; superseded
versions are deleted by the retention policy after later commits.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import (
    AlreadyExistsException,
    MetastoreClient,
    enforces_compare_and_set,
)
from airflow_provider_staged.catalogs.metastore.locks import lock_owner
from airflow_provider_staged.catalogs.metastore.tables import (
    current_location,
    is_version,
    new_table,
    repointed_table,
    tracks_partitions,
)
from airflow_provider_staged.staging import storage_paths
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose, SupportsStaging
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.errors import CatalogConflictError, TableAlreadyExistsError
from airflow_provider_staged.staging.faults import fault_point
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import (
    AttemptJournal,
    AttemptRecord,
    AttemptState,
    TaskRef,
)
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_ttl import with_ttl_options
from airflow_provider_staged.staging.versions import (
    RetentionPolicy,
    parse_version_dir,
    version_dir_name,
)
from airflow_provider_staged.storage.files import (
    Entry,
    check_location,
    delete_dir,
    join,
    list_dir,
    list_files,
    normalize_location,
    remove_empty_dir,
)

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

ROLLBACK_KIND = "hive_rollback"  # ``staging.rollback``: its location is the version it restores
# Kinds whose attempts are (or, for a rollback, point at) version directories under one
# table root: the sweep reads them all.
HIVE_KINDS = (
    "hive_table", "hive_partitions", "hive_partitions_continuous", ROLLBACK_KIND, "hive_overwrite",
)
# A sink append stages apart (``_staging/``) and owns a version directory when it creates the
# table or appends to catalog partitions: ``<root>/_v=<attempt id>``. Retention must know it, or
# that version, once superseded, would look like an orphan and be deleted at once, inside the grace.
APPEND_KIND = "hive_append"
VERSION_KINDS = (*HIVE_KINDS, APPEND_KIND)
# A partition-TTL expiry (``staging.expiry``): it writes no version, but the partitions it drops
# stop being read then, which starts their versions' retention grace.
EXPIRE_KIND = "hive_expire"
# The rows the sink appended to the current version (a table parameter the sink kinds keep).
SINK_ROWS_KEY = "sink.rows"
# Kinds whose manifest lists the files their job wrote into the attempt's location (a sink's
# commit and a continuous table's overwrite move files there in the commit itself; a rollback
# checks its version under the table's lock).
FILES_IN_LOCATION_KINDS = ("hive_table", "hive_partitions")


class HiveStagedTable(JournaledStagedTable):
    """An atomic CTAS/RTAS target in a Hive Metastore (Spark Parquet data-source table)."""

    kind = "hive_table"

    def __init__(
        self,
        identifier: TableIdentifier,
        purpose: StagingPurpose,
        journal: AttemptJournal,
        metastore_uri: str,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
        conn_id: str | None = None,
        table_options: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(identifier.name, purpose, journal, task, attempt_id, conn_id)
        self.identifier = identifier
        self.metastore_uri = metastore_uri
        self.retention = retention or RetentionPolicy()
        # Table options (partition TTL) the commit sets; None leaves the table's as they are.
        self.table_options = dict(table_options) if table_options is not None else None
        self._root: str | None = None  # resolved by target_exists, used by staging_location

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HiveStagedTable:
        return cls(
            TableIdentifier.parse(record.target),
            StagingPurpose.parse(record.purpose),
            table_options=record.catalog.get("table_options"),
            **cls.rebuilt(record, settings),
        )

    @staticmethod
    def rebuilt(record: AttemptRecord, settings: StagedSettings) -> dict[str, Any]:
        """The constructor arguments every Hive kind takes from the journal the same way."""
        return {
            "journal": settings.journal,
            # The journal belongs to the connection: its metastore is authoritative, the
            # address recorded at attempt time may be stale.
            "metastore_uri": settings.metastore_uri,
            "retention": settings.retention,
            "task": record.task,
            "attempt_id": record.attempt_id,
            "conn_id": record.conn_id,
        }

    def _client(self) -> MetastoreClient:
        # Its table locks name this attempt: reconcile releases those its dead process left.
        return MetastoreClient(self.metastore_uri, lock_owner=lock_owner(self.attempt_id))

    def release_locks(self) -> list[int]:
        with self._client() as client:
            return client.release_locks(self.identifier.database, self.identifier.table)

    def target_exists(self) -> bool:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
            # Resolve the root from this same read (raises for a missing database): each
            # metastore call costs tens of milliseconds, begin needs no further one.
            self._root = self.root_for(client, table)
            if table is not None and self._switches_in_one_call():
                client.probe_compare_and_set(table)  # once per process: lets the commit go unlocked
            return table is not None

    def catalog_ref(self) -> dict[str, Any]:
        ref: dict[str, Any] = {"metastore_uri": self.metastore_uri}
        if self.table_options is not None:
            ref["table_options"] = self.table_options
        return ref

    def with_options(self, table: ttypes.Table) -> ttypes.Table:
        """``table`` carrying this attempt's table options (unchanged when it has none)."""
        if self.table_options is not None:
            table.parameters = with_ttl_options(table.parameters, self.table_options)
        return table

    def write_spec(self) -> dict[str, Any]:
        return {"format": "parquet", "location": self.location}

    def table_root(self, client: MetastoreClient) -> str:
        """The directory that holds this table's version directories."""
        return self.root_for(client, client.get_table(self.identifier.database, self.identifier.table))

    def root_for(self, client: MetastoreClient, table: ttypes.Table | None) -> str:
        """``table_root`` of the target as the caller just read it (None: it does not exist).

        A version-managed table needs no other metastore call; otherwise the database's.
        """
        location = normalize_location(current_location(table)) if table is not None else None
        if location is not None:
            parent, _, leaf = location.rpartition("/")
            if parse_version_dir(leaf) is not None:
                return parent
        database_dir = normalize_location(client.database_location(self.identifier.database))
        if location == storage_paths.default_root(database_dir, self.identifier.table):
            # A table we did not make: never write inside the directory it reads.
            return storage_paths.side_root(database_dir, self.identifier.table)
        return storage_paths.default_root(database_dir, self.identifier.table)

    # Lifecycle kinds (expiry, rollback) write no data: nothing to check where they would write.
    writes_data = True

    def check_target(self) -> None:
        super().check_target()
        if self.writes_data and not self.skipped:
            # Where the job will write: an unusable store fails here, before any Spark work.
            check_location(self.staging_location())

    def staging_location(self) -> str:
        if self._root is None:
            with self._client() as client:
                self._root = self.table_root(client)
        return f"{self._root}/{version_dir_name(self.attempt_id)}"

    def _switches_in_one_call(self) -> bool:
        """This kind's commit is one ``alter_table`` (other Hive kinds make several calls)."""
        return self.kind == HiveStagedTable.kind and self.purpose.replaces

    @contextlib.contextmanager
    def catalog_transaction(self, exclusive: bool = True) -> Iterator[MetastoreClient]:
        """The metastore for one operation; ``exclusive`` holds the table's lock, except for a
        one-call switch on a metastore that enforces the compare-and-set of ``alter_table``:
        that needs no lock to never undo, nor be undone by, another writer."""
        with self._client() as client:
            lock_free = self._switches_in_one_call() and enforces_compare_and_set(self.metastore_uri)
            if not exclusive or lock_free:
                yield client
                return
            with client.locked(self.identifier.database, self.identifier.table):
                fault_point("table_locked")
                yield client

    def load_current(self, txn: MetastoreClient) -> ttypes.Table | None:
        return txn.read_for_update(self.identifier.database, self.identifier.table)

    def create_target(self, txn: MetastoreClient, record: AttemptRecord, manifest: Manifest) -> None:
        self.create_new_table(txn, manifest)

    def create_new_table(self, txn: MetastoreClient, manifest: Manifest) -> None:
        """Create the table this attempt read as missing. Created by someone else meanwhile (a
        lock-free commit of ours, or Spark, which takes no lock): a purpose that replaces reads
        again and replaces it, as it would have after waiting for the lock; a create-only one fails."""
        try:
            txn.create_table(self.with_options(new_table(self.identifier, manifest, self.attempt_id)))
        except AlreadyExistsException:
            if self.purpose.replaces:
                message = f"table {self.target} was created after this commit read it"
                raise CatalogConflictError(message) from None
            raise TableAlreadyExistsError(
                f"table {self.target} was created by someone else before this commit"
            ) from None

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> str | None:
        replaced = repointed_table(current, manifest, self.attempt_id)
        # The new version holds none of the rows a sink counted into the one it supersedes.
        replaced.parameters = {k: v for k, v in (replaced.parameters or {}).items() if k != SINK_ROWS_KEY}
        txn.alter_table(self.with_options(replaced))
        return normalize_location(current_location(current))

    def is_published(self, record: AttemptRecord) -> bool:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
        return is_version(table, record.location)

    def supports_audits(self) -> bool:
        return self.kind in FILES_IN_LOCATION_KINDS  # the kinds the Spark job writes alone

    def replaced_parts(self) -> dict[str, str]:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
        return {} if table is None else {"": normalize_location(current_location(table))}

    def current_columns(self) -> list[tuple[str, str]] | None:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
        if table is None:
            return None
        # The data columns, then the partition columns: the order the job's manifest lists them.
        columns = [*(table.sd.cols or []), *(table.partitionKeys or [])]
        return [(column.name, column.type) for column in columns]

    def recorded_rows(self, location: str) -> int | None:
        """From the manifest of the attempt that wrote the version directory holding ``location``
        (rows of the files under it, for a partition's directory). Rows a sink appended to a
        version since are not counted."""
        version = _version_dir(location)
        attempt_id = parse_version_dir(version.rpartition("/")[2])
        record = self.journal.get(attempt_id) if attempt_id else None
        if record is None or not record.manifest:
            return None
        manifest = Manifest.from_dict(record.manifest)
        inside = normalize_location(location)[len(version):].strip("/")
        if not inside or manifest.rows is None:
            return manifest.rows
        return sum(item.rows for item in manifest.files if item.path.startswith(inside + "/"))

    def missing_files(self, record: AttemptRecord) -> list[str]:
        if self.kind not in FILES_IN_LOCATION_KINDS:
            return []
        manifest = Manifest.from_dict(record.manifest or {"location": record.location})
        return missing_files(manifest.location, [item.path for item in manifest.files])

    def discard(self, record: AttemptRecord) -> None:
        delete_dir(record.location)
        # The first build of a table that failed: no table, so no sweep would ever remove it.
        remove_empty_dir(self.versions_root(record))

    def after_commit(self, record: AttemptRecord) -> None:
        # A create-only purpose supersedes nothing: skip the sweep's metastore read and listing.
        # Leftovers of earlier failed attempts go with a later sweep or the TTL sweep.
        if not self.purpose.replaces:
            return
        now = self.journal.now()
        oldest = self.journal.retention_mark(self.target)
        # Nothing kept by the last sweep, nor superseded since (later: by this commit), can be
        # due yet: skip the listing and the journal read (O(journal)) on the commit's path.
        if oldest is not None and now <= self.retention.earliest_expiry(min(oldest, record.updated_at)):
            return
        sweep_versions(self, self.retention, self.versions_root(record), now)

    def versions_root(self, record: AttemptRecord) -> str:
        """The directory holding the table's version directories (the one ``record`` wrote in)."""
        return normalize_location(record.location).rpartition("/")[0]


def missing_files(location: str, relative_paths: list[str]) -> list[str]:
    """Of ``relative_paths`` under ``location``, those that do not exist: one listing of the
    directory that holds them, or one recursive listing of ``location`` when they lie in several
    (a partition refresh's version: one request on an object store, not one per partition)."""
    if len({path.rpartition("/")[0] for path in relative_paths}) > 1:
        present = {entry.path for entry in list_files(location)}
        root = normalize_location(location)
        return [f"{root}/{path}" for path in sorted(relative_paths) if path not in present]
    by_directory: dict[str, set[str]] = {}
    for path in relative_paths:
        directory, _, name = path.rpartition("/")
        by_directory.setdefault(directory, set()).add(name)
    missing = []
    for directory, names in sorted(by_directory.items()):
        where = join(location, directory) if directory else normalize_location(location)
        present = {entry.name for entry in list_dir(where)}
        missing += [f"{where}/{name}" for name in sorted(names - present)]
    return missing


def sweep_versions(
    staged: HiveStagedTable, retention: RetentionPolicy, root: str, now: float | None = None
) -> list[str]:
    """Delete superseded and orphaned version directories under ``root``, ``staged``'s table root.

    The order matters: list the directories first, then read the journal, then read what is
    live. An attempt journals BEGUN before its directory exists, so every listed directory
    of a running attempt is in the journal; a commit that lands meanwhile is seen as live.
    The catalog is read only when something could be due: without the live locations the
    doomed set can only be larger, so an empty one needs no metastore call (the usual case
    right after a commit, inside the grace period). Records the oldest version it kept as the
    table's ``retention_mark`` in the journal, which lets ``after_commit`` skip sweeps.
    """
    now = staged.journal.now() if now is None else now
    listed = list_versions(root)
    records = staged.journal.records()
    deleted, kept = sweep_listed(staged, retention, listed, records, now)
    staged.journal.set_retention_mark(staged.target, min(kept.values(), default=now))
    return deleted


def list_versions(root: str) -> list[Entry]:
    """The version directories under a table root."""
    return [e for e in list_dir(root) if e.is_dir and parse_version_dir(e.name) is not None]


def sweep_listed(
    staged: HiveStagedTable,
    retention: RetentionPolicy,
    listed: list[Entry],
    journal_records: list[AttemptRecord],
    now: float | None = None,
) -> tuple[list[str], dict[str, float]]:
    """:func:`sweep_versions` of directories ``listed`` BEFORE ``journal_records`` were read
    (a sweep of many tables lists every root, then reads the journal once). Returns the deleted
    directories and the committed versions kept (location -> when it was superseded; the live
    ones included).

    A commit can land after the journal was read and before the catalog is: the version it
    superseded is then no longer live, but the journal read knows nothing of when it stopped
    being read. So before deleting such a version, the journal is read again, after the catalog:
    that commit is in it by then (an attempt journals BEGUN before its catalog call), as
    committed, with the versions it superseded, or still in flight (then they count as
    superseded now).

    An orphan (no record names it as in flight or committed) is deleted only a grace period after
    it died by the journal's clock: its abort, or, when no record names it at all (a writer on
    another journal), the sweep that first saw it (``orphans_seen``)."""
    now = staged.journal.now() if now is None else now
    records = version_records(journal_records, staged.target)
    named, unknown = superseded_times(records, now)
    candidates, orphans = _candidates(listed, records, now, (named, unknown))
    unrecorded = [location for location, since in orphans.items() if since is None]
    if unrecorded:
        orphans.update(staged.journal.orphans_seen(staged.target, unrecorded))
    if not _due(candidates, orphans, set(), retention, now):
        return [], candidates
    with staged._client() as client:
        table = client.get_table(staged.identifier.database, staged.identifier.table)
        if table is None:
            return [], candidates
        live = {normalize_location(current_location(table))}
        # Partitions left in the catalog of a table that a whole-table replace switched to its
        # directories are read by nobody: they keep no version alive.
        if tracks_partitions(table):
            live |= {_version_dir(p.sd.location) for p in client.partitions(table.dbName, table.tableName)}
    # Versions whose end a record names are dated right whatever landed since.
    if any(location not in named for location in _due(candidates, {}, live, retention, now)):
        later = version_records(staged.journal.records(), staged.target)
        candidates, _ = _candidates(listed, records, now, superseded_times(later, now))
    doomed = _due(candidates, orphans, live, retention, now)
    for location in doomed:
        log.info("retention: deleting %s version %s of %s",
                 "orphaned" if location in orphans else "superseded", location, staged.target)
        delete_dir(location)
    if set(unrecorded) & set(doomed):  # their sightings are done with
        staged.journal.orphans_seen(staged.target, [o for o in unrecorded if o not in doomed])
    return doomed, {location: at for location, at in candidates.items() if location not in doomed}


def _doomed(
    listed: list[Entry], records: list[AttemptRecord], live: set[str], retention: RetentionPolicy, now: float
) -> list[str]:
    """The listed version directories to delete: orphans, and superseded versions past retention
    (an orphan no record names counts as first seen ``now``: not due)."""
    candidates, orphans = _candidates(listed, records, now)
    return _due(candidates, {o: now if at is None else at for o, at in orphans.items()}, live, retention, now)


def _due(
    candidates: dict[str, float],
    orphans: Mapping[str, float | None],
    live: set[str],
    retention: RetentionPolicy,
    now: float,
) -> list[str]:
    """Of ``_candidates``' result, the directories to delete: orphans dead for longer than the
    grace period (``orphans``: location -> since when, None: unknown, kept), and superseded
    versions past retention; never one in ``live`` (what the catalog points at)."""
    superseded = {location: at for location, at in candidates.items() if location not in live}
    dead = [
        location
        for location, since in orphans.items()
        if location not in live and since is not None and now - since > retention.grace_seconds
    ]
    return dead + retention.expired(superseded, now)


def superseded_times(records: list[AttemptRecord], now: float) -> tuple[dict[str, float], float]:
    """When each version stopped being read (the newest commit or expiry that superseded, or
    dropped, the last of it, after any rollback to it), and the time for a version whose end no
    record names: ``now`` while an attempt is in flight (it may have switched the table a moment
    ago), else the newest commit (it came after whatever superseded the version)."""
    commits = [r for r in records if r.state is AttemptState.COMMITTED]
    superseded_at: dict[str, float] = {}
    restored_at: dict[str, float] = {}
    for r in commits:
        for location in superseded_locations(r):
            superseded_at[location] = max(superseded_at.get(location, 0.0), r.updated_at)
        if r.kind == ROLLBACK_KIND:
            location = version_location(r)
            restored_at[location] = max(restored_at.get(location, 0.0), r.updated_at)
    # A rollback made the version current again after its recorded end: its end since is unknown.
    named = {location: at for location, at in superseded_at.items() if at > restored_at.get(location, 0.0)}
    # A quarantined attempt switched nothing (``staged publish`` journals another verdict before
    # it commits): it would otherwise hold back this retention for its whole quarantine.
    if any(not r.state.ended and (r.audits or {}).get("verdict") != "quarantined" for r in records):
        return named, now
    return named, max((r.updated_at for r in commits), default=now)


def _candidates(
    listed: list[Entry],
    records: list[AttemptRecord],
    now: float,
    times: tuple[dict[str, float], float] | None = None,
) -> tuple[dict[str, float], dict[str, float | None]]:
    """The listed versions that retention decides on (location -> when it was superseded, from
    ``times`` if given, else from ``records``: :func:`superseded_times`), and the orphans
    (neither in flight nor committed: location -> when it was aborted, None when no record names
    it); live ones included (``_due`` drops them)."""
    writes = [r for r in records if r.kind in VERSION_KINDS]
    in_flight = {version_location(r) for r in writes if not r.state.ended}
    committed = {version_location(r) for r in writes if r.state is AttemptState.COMMITTED}
    aborted: dict[str, float] = {}
    for r in writes:
        if r.state is AttemptState.ABORTED:
            aborted[version_location(r)] = max(aborted.get(version_location(r), 0.0), r.updated_at)
    superseded_at, unknown = times or superseded_times(records, now)
    candidates: dict[str, float] = {}
    orphans: dict[str, float | None] = {}
    for entry in listed:
        if entry.location in in_flight:
            continue
        if entry.location in committed:
            candidates[entry.location] = superseded_at.get(entry.location, unknown)
        else:
            orphans[entry.location] = aborted.get(entry.location)  # never readable
    return candidates, orphans


def version_records(records: list[AttemptRecord], target: str) -> list[AttemptRecord]:
    """The attempts of ``target`` that write, create or point at its version directories, and its
    expiries (which end the reading of versions)."""
    return [r for r in records if r.kind in (*VERSION_KINDS, EXPIRE_KIND) and r.target == target]


def version_location(record: AttemptRecord) -> str:
    """The version directory an attempt writes: its location, or the one a sink append creates."""
    if record.kind == APPEND_KIND:
        return f"{normalize_location(record.catalog['root'])}/{version_dir_name(record.attempt_id)}"
    return normalize_location(record.location)


def superseded_locations(record: AttemptRecord) -> list[str]:
    """The version directories a commit superseded (one for a table, several for partitions)."""
    found = record.superseded_location
    if not found:
        return []
    return [_version_dir(item) for item in ([found] if isinstance(found, str) else found)]


def _version_dir(location: str) -> str:
    """The version directory that holds a (partition) location."""
    parts = normalize_location(location).split("/")
    for index, part in enumerate(parts):
        if parse_version_dir(part) is not None:
            return "/".join(parts[: index + 1])
    return normalize_location(location)


class HiveStagingSink(SupportsStaging):
    """``SupportsStaging`` for a Hive Metastore table (FLIP-305's HiveTableSink)."""

    def __init__(
        self,
        identifier: TableIdentifier,
        journal: AttemptJournal,
        metastore_uri: str,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
        conn_id: str | None = None,
    ) -> None:
        self.identifier = identifier
        self.journal = journal
        self.metastore_uri = metastore_uri
        self.retention = retention
        self.task = task
        self.conn_id = conn_id

    def apply_staging(self, context: StagingContext) -> HiveStagedTable:
        return HiveStagedTable(
            self.identifier,
            context.purpose,
            self.journal,
            self.metastore_uri,
            self.retention,
            self.task,
            conn_id=self.conn_id,
        )
