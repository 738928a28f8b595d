"""The commits of the built-in Hive sink: an append (``hive_append``) and an overwrite (``hive_overwrite``).

A sink write stages its files under ``<table root>/_staging/<attempt id>/ready/`` (never read:
``_`` names are hidden from Spark, and the version sweep lists only ``_v=`` directories).

- **append** to a table whose partitions Spark discovers from directories (or an unpartitioned
  one): the commit moves each staged directory into the version the table points at, as
  ``<version>/[<partition>/]batch-<attempt id>/`` (one rename per partition, atomic each), and
  records the streaming query's batch (``sink.batch.<query id>``) and the row count in ONE
  ``alter_table``. ``is_published``: a ``batch-<attempt id>`` directory under the current
  version, or the recorded batch.
- **append** on an object store (no directory rename): this attempt's version directory becomes
  the current version's files (server-side copies, nothing rewritten by this process) plus the
  batch's directories, then ONE ``alter_table`` points the table at it and records the batch: a
  new version, as a replace makes one. The cost per micro-batch grows with the table's file count
  (copies on the store's side); the superseded version goes through the retention of version
  directories.
- **append** to a table that tracks its partitions in the catalog: Spark reads only the files
  directly inside a catalog partition's location (its file index lists the partition path's own
  children), so a batch directory there would be invisible, and files moved in one by one would
  show half a micro-batch. Instead the commit publishes a NEW version of every partition it
  touches, ``<root>/_v=<attempt id>/<partition>/``: the batch's files (named
  ``<attempt id>-<name>``: :func:`streamed_batch` reads the micro-batch back) beside hard links
  to the partition's current files (copies where links are impossible; no data is rewritten on a
  local filesystem), then switches all of them in ONE ``alter_partitions`` (partitions the table
  does not have yet are first registered at the empty placeholder ``<root>/_empty``, as the
  partition refresh does). Readers see the old or the new partition, never part of a batch. The
  superseded partition versions go through the retention of version directories. The cost per
  micro-batch grows with the number of files in the touched partitions (links, not data).
  ``is_published``: a partition pointing into ``_v=<attempt id>``, or the recorded batch.
- A table that does not exist is created at a new version holding the batch. With
  ``track_partitions`` (the sink of a CONTINUOUS materialized table) a partitioned one holds its
  files directly in its partition directories and then tracks its partitions in the catalog, so a
  one-time partition overwrite can switch them (``hive_partitions_continuous``); other partitioned
  sink tables keep directory-discovered partitions (a file stream can follow them).
  A commit cut short after it changed what readers see is rolled forward (``complete_publish``),
  never discarded.
- **overwrite**: the staged replace of CTAS (``hive_table``): the staged files become the
  attempt's version directory (one rename; on an object store each file is moved, nothing reads
  there yet), and the pointer swap records the batch too.

Everything runs under the table's metastore lock (``metastore.locks``), except an append to an
existing unpartitioned table on a metastore that enforces ``alter_table``'s compare-and-set
(probed once per process, under the lock): its one checked ``alter_table`` needs none.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import (
    AlreadyExistsException,
    MetastoreClient,
    enforces_compare_and_set,
)
from airflow_provider_staged.catalogs.metastore.tables import (
    PARTITION_PROVIDER_KEY,
    SCHEMA_KEY,
    VERSION_KEY,
    current_location,
    is_version,
    new_table,
    schema_parameters,
    tracks_partitions,
)
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.errors import StagingError, TableAlreadyExistsError
from airflow_provider_staged.staging.faults import fault_point
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.kinds.hive_partitions import (
    EMPTY_DIR_NAME,
    dir_stats,
    relocated,
)
from airflow_provider_staged.staging.kinds.hive_table import SINK_ROWS_KEY, HiveStagedTable
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import is_data_path, partition_path, partition_values
from airflow_provider_staged.staging.versions import RetentionPolicy, version_dir_name
from airflow_provider_staged.storage.files import (
    copy_file,
    delete_dir,
    delete_file,
    exists,
    is_local,
    join,
    link_or_copy,
    list_dir,
    list_files,
    make_dirs,
    move_file,
    normalize_location,
    rename_dir,
)

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

STAGING_DIR = "_staging"
READY_DIR = "ready"
BATCH_DIR_PREFIX = "batch-"
MARKER_PREFIX = "sink.batch."
# ``<query id><STREAM_SUFFIX>`` under ``_staging``: where Spark's file sink writes a stream.
STREAM_SUFFIX = "-stream"


def marker_key(query_id: str) -> str:
    """The table parameter holding the last micro-batch of ``query_id`` committed into it."""
    return MARKER_PREFIX + query_id


def recorded_batch(table: ttypes.Table | None, query_id: str) -> int | None:
    value = (table.parameters or {}).get(marker_key(query_id)) if table is not None else None
    return int(value) if value is not None else None


def staging_dir(root: str, attempt_id: str) -> str:
    return f"{normalize_location(root)}/{STAGING_DIR}/{attempt_id}"


def move_file_once(source: str, target: str) -> None:
    """Move file ``source`` to ``target`` unless it is gone or already there (a retry)."""
    if exists(source) and not exists(target):
        move_file(source, target)



class HiveSinkCommit(HiveStagedTable):
    """What both sink kinds journal and check: the query's batch, the staged ready directory."""

    def __init__(
        self,
        identifier: TableIdentifier,
        journal: AttemptJournal,
        metastore_uri: str,
        query_id: str,
        batch_id: int,
        streaming: bool,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
        conn_id: str | None = None,
        root: str | None = None,
        track_partitions: bool = False,
        stream_source: str | None = None,
    ) -> None:
        super().__init__(
            identifier, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, metastore_uri, retention, task,
            attempt_id, conn_id,
        )
        self.query_id = query_id
        self.batch_id = batch_id
        self.streaming = streaming
        self._root = root
        # A partitioned table this write creates tracks its partitions in the catalog.
        self.track_partitions = track_partitions
        # A logged micro-batch's stream staging directory (``sink.file_stream``): its files are
        # the stream's, not this attempt's, and an abort moves them back there.
        self.stream_source = stream_source

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HiveSinkCommit:
        ref = record.catalog
        return cls(
            TableIdentifier.parse(record.target), query_id=ref["query_id"], batch_id=int(ref["batch_id"]),
            streaming=bool(ref["streaming"]), root=ref["root"],
            track_partitions=bool(ref.get("track_partitions", False)), stream_source=ref.get("stream_source"),
            **cls.rebuilt(record, settings),
        )

    def catalog_ref(self) -> dict[str, Any]:
        return {
            **super().catalog_ref(),
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "streaming": self.streaming,
            "root": self.table_root_resolved,
            "track_partitions": self.track_partitions,
            "stream_source": self.stream_source,
        }

    def check_target(self) -> None:
        """Nothing to check: a sink write appends to or replaces whatever is there, or creates it."""

    def supports_audits(self) -> bool:
        return True  # the sink's writer counts them (``HiveSink.write_native``)

    @property
    def table_root_resolved(self) -> str:
        if self._root is None:
            with self._client() as client:
                self._root = self.table_root(client)
        return self._root

    @property
    def staging(self) -> str:
        return staging_dir(self.table_root_resolved, self.attempt_id)

    def recorded(self, table: ttypes.Table | None) -> bool:
        """Whether ``table`` records this attempt's micro-batch as committed."""
        if not self.streaming:
            return False
        batch = recorded_batch(table, self.query_id)
        return batch is not None and batch >= self.batch_id

    def marked(self, parameters: Mapping[str, str] | None, manifest: Manifest) -> dict[str, str]:
        """``parameters`` with this batch recorded (streaming) and the rows counted."""
        params = dict(parameters or {})
        if self.streaming:
            params[marker_key(self.query_id)] = str(self.batch_id)
        params[SINK_ROWS_KEY] = str(int(params.get(SINK_ROWS_KEY, "0")) + (manifest.rows or 0))
        return params

    def versions_root(self, record: AttemptRecord) -> str:
        return self.table_root_resolved

    def discard(self, record: AttemptRecord) -> None:
        self.return_logged()
        delete_dir(self.staging)

    def return_logged(self, *trees: str) -> None:
        """Move a logged micro-batch's files back to the stream staging directory, from ``ready/``
        and ``trees`` (named ``[<attempt id>-]<stream dir>-<name>`` there; links of older files
        are not the batch's): the stream's log lists them, so its next start publishes them."""
        if self.stream_source is None:
            return
        prefix = normalize_location(self.stream_source).rpartition("/")[2] + "-"
        for tree in (f"{self.staging}/{READY_DIR}", *trees):
            for entry in list_files(tree):
                directory, _, name = entry.path.rpartition("/")
                group = [part for part in directory.split("/") if "=" in part]
                base = name.removeprefix(f"{self.attempt_id}-")
                if base.startswith(prefix):
                    target = join(self.stream_source, *group, base.removeprefix(prefix))
                    move_file_once(entry.location, target)
                    fault_point("return_logged")

    def after_commit(self, record: AttemptRecord) -> None:
        # What is left in the staging area: failed and speculative task attempts' files.
        delete_dir(self.staging)


class HiveAppendStagedTable(HiveSinkCommit):
    """One sink write appended to a Hive table (see the module docstring)."""

    kind = "hive_append"

    def staging_location(self) -> str:
        return self.staging

    @property
    def version(self) -> str:
        """This attempt's version directory: the table it creates, or the new versions of the
        catalog partitions it appends to."""
        return f"{self.table_root_resolved}/{version_dir_name(self.attempt_id)}"

    def _groups(self, manifest: Manifest) -> list[str]:
        """The staged directories relative to ``ready/``: partition paths, or "" (unpartitioned)."""
        return sorted({item.path.rpartition("/")[0] for item in manifest.files} or {""})

    def _batch_dir(self, version: str, group: str) -> str:
        return "/".join(part for part in (version, group, BATCH_DIR_PREFIX + self.attempt_id) if part)

    def publish(self, record: AttemptRecord) -> list[str] | None:
        manifest = Manifest.from_dict(record.manifest or {})
        if not manifest.partition_columns and enforces_compare_and_set(self.metastore_uri):
            # An unpartitioned append is one rename, then one checked alter_table: like the
            # whole-table switch, it needs no lock to never undo, nor be undone by, another writer.
            with self.catalog_transaction(exclusive=False) as txn:
                current = self.load_current(txn)
                if current is not None:
                    return None if self.recorded(current) else self._append(txn, current, manifest)
        with self.catalog_transaction() as txn:
            current = self.load_current(txn)
            if self.recorded(current):
                return None
            if current is None:
                self._create(txn, manifest)
                return None
            txn.probe_compare_and_set(current)  # once per process: the next appends may go unlocked
            return self._append(txn, current, manifest)

    def _append(self, txn: MetastoreClient, current: ttypes.Table, manifest: Manifest) -> list[str] | None:
        """Add the batch to ``current`` and record it; the superseded partition locations."""
        _check_fits(current, manifest, self.target)
        superseded = None
        changed = _reads_batch_dirs(copy.deepcopy(current))
        old = normalize_location(current_location(current))
        if tracks_partitions(current):
            superseded = self._switch_partitions(txn, current, manifest)
        elif not is_local(old):
            if old == normalize_location(self.version):
                return None  # switched already: a retried commit
            self._copy_forward(old, manifest)
            changed = _located(changed, self.version)
            superseded = old
        elif not self._place(manifest, old):
            # Placed into a version that a replace then superseded (it landed between this
            # append's read and write, which made the write read again): the append came
            # first and the replace dropped its rows, so none are counted here.
            manifest = dataclasses.replace(manifest, rows=0)
        changed.parameters = self.marked(changed.parameters, manifest)
        txn.alter_table(changed)
        return superseded

    def _copy_forward(self, current: str | None, manifest: Manifest) -> None:
        """Make this attempt's version directory the files of version ``current`` (server-side
        copies; None: a table this attempt creates) plus the batch in its batch directories (moved
        from ``ready/``). Idempotent, and exact again when ``current`` changed since a first try (a
        conflict made it read again): copies it lacks are made, copies of files ``current`` no
        longer has are deleted."""
        found = list_files(current) if current is not None else []
        wanted = {entry.path: entry.location for entry in found if is_data_path(entry.path)}
        batches = tuple(f"{self._batch_dir('', group)}/".lstrip("/") for group in self._groups(manifest))
        have = {entry.path: entry.location for entry in list_files(self.version)}
        for path, location in have.items():
            if path not in wanted and not path.startswith(batches):
                delete_file(location)
        for path, location in wanted.items():
            if path not in have:
                copy_file(location, join(self.version, path))
        ready = f"{self.staging}/{READY_DIR}"
        for entry in list_files(ready):
            group, _, name = entry.path.rpartition("/")
            move_file_once(entry.location, f"{self._batch_dir(self.version, group)}/{name}")
        make_dirs(self.version)  # an empty table still needs a directory to read
        fault_point("global_commit")

    def _create(self, txn: MetastoreClient, manifest: Manifest) -> None:
        tracked = self.track_partitions and bool(manifest.partition_columns)
        if tracked:
            self._place_flat(manifest)
        elif is_local(self.version):
            self._place(manifest, self.version)
        else:
            self._copy_forward(None, manifest)
        make_dirs(self.version)  # an empty first write still needs a directory to read
        located = Manifest.from_dict({**manifest.to_dict(), "location": self.version})
        table = new_table(self.identifier, located, self.attempt_id)
        table.parameters = self.marked(table.parameters, manifest)
        try:
            txn.create_table(_reads_batch_dirs(table))
        except AlreadyExistsException:
            raise TableAlreadyExistsError(f"table {self.target} was created without its lock") from None
        if tracked:
            self._track_partitions(txn, manifest)

    def _track_partitions(self, txn: MetastoreClient, manifest: Manifest) -> None:
        """Register the partitions of the table this attempt created, then make Spark read them from
        the catalog. Until then Spark discovers the same partitions from the directories: the table
        reads the same at every step."""
        table = txn.read_for_update(self.identifier.database, self.identifier.table)
        if not is_version(table, self.version):
            return  # a lock-free replace came after the create: it stands, and reads its own files
        columns = [key.name for key in table.partitionKeys]
        registered = {tuple(p.values) for p in txn.partitions(table.dbName, table.tableName)}
        new = []
        for group in self._groups(manifest):
            values = partition_values(f"{group}/f", columns)
            if values is not None and values not in registered:
                location = f"{self.version}/{group}"
                new.append(relocated(_partition(table, values), location, {values: dir_stats(location)}))
        txn.add_partitions(new)
        table.parameters[PARTITION_PROVIDER_KEY] = "catalog"
        txn.alter_table(table)

    def _place(self, manifest: Manifest, version: str) -> bool:
        """Move each staged directory into ``version`` (skipping those already moved); whether
        they are all there (False: moved before into another version)."""
        ready = f"{self.staging}/{READY_DIR}"
        placed = True
        for group in self._groups(manifest):
            target = self._batch_dir(version, group)
            source = "/".join(part for part in (ready, group) if part)
            if not exists(target) and exists(source):
                rename_dir(source, target)
            placed = placed and exists(target)
        fault_point("global_commit")
        return placed

    def _place_flat(self, manifest: Manifest) -> None:
        """Move each staged file into its partition directory of :attr:`version`, named
        ``<attempt id>-<name>`` (skipping those already moved). Nothing reads there yet."""
        for item in manifest.files:
            group, _, name = item.path.rpartition("/")
            target = f"{self.version}/{group}/{self.attempt_id}-{name}"
            move_file_once(f"{self.staging}/{READY_DIR}/{item.path}", target)
        fault_point("global_commit")

    def _switch_partitions(self, txn: MetastoreClient, table: ttypes.Table, manifest: Manifest) -> list[str]:
        """New versions of the touched catalog partitions, switched in one ``alter_partitions``;
        returns the superseded partition locations."""
        self._place_flat(manifest)
        columns = [key.name for key in table.partitionKeys]
        groups = {}  # values -> the staged directory; none: an empty micro-batch
        for group in sorted({item.path.rpartition("/")[0] for item in manifest.files}):
            values = partition_values(f"{group}/f", columns)
            if values is None:
                raise StagingError(f"attempt {self.attempt_id} wrote files outside partition directories")
            groups[values] = group
        # Only the touched partitions are read (a table may have thousands), by the metastore's
        # names: its (lower-case) columns, values escaped as in paths.
        names = [partition_path(columns, values) for values in groups]
        current = {tuple(p.values): p for p in txn.partitions_named(table.dbName, table.tableName, names)}
        placeholder = f"{self.table_root_resolved}/{EMPTY_DIR_NAME}"
        make_dirs(placeholder)
        new, switched, superseded = [], [], []
        for values, group in groups.items():
            location = f"{self.version}/{group}"
            partition = current.get(values)
            if partition is None:
                partition = _partition(table, values, placeholder)
                new.append(partition)
            old = normalize_location(partition.sd.location)
            if old not in (location, placeholder):  # not a retried switch, not an empty partition
                link_files(old, location)
                superseded.append(old)
            switched.append(relocated(partition, location, {values: dir_stats(location)}))
        # Visible as empty partitions until the switch below: as they were while absent.
        txn.add_partitions(new)
        txn.alter_partitions(table.dbName, table.tableName, switched)
        fault_point("partition_switch")  # readers see the batch, the table does not record it yet
        return superseded

    def is_published(self, record: AttemptRecord) -> bool:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
            if table is None or not record.manifest:
                return False
            if self.recorded(table):
                return True
            version = normalize_location(current_location(table))
            if version == normalize_location(self.version):
                return True  # this attempt created the table
            if tracks_partitions(table):
                mine = normalize_location(self.version) + "/"
                return any(normalize_location(p.sd.location).startswith(mine)
                           for p in client.partitions(table.dbName, table.tableName))
        manifest = Manifest.from_dict(record.manifest)
        return any(exists(self._batch_dir(version, group)) for group in self._groups(manifest))

    def complete_publish(self, record: AttemptRecord) -> None:
        """Roll a commit cut short after readers saw it forward: the rest, then the record."""
        if not record.manifest:
            return
        manifest = Manifest.from_dict(record.manifest)
        with self.catalog_transaction() as txn:
            table = self.load_current(txn)
            # Created by this attempt (an append on an object store also moves the table to its
            # version, but keeps the version key of the one that created it).
            created = is_version(table, self.version) and table.parameters.get(VERSION_KEY) == self.attempt_id
            untracked = self.track_partitions and manifest.partition_columns and not tracks_partitions(table)
            if created and untracked:
                self._track_partitions(txn, manifest)
        if not created:
            self.publish(record)

    def discard(self, record: AttemptRecord) -> None:
        self.return_logged(self.version)
        if record.manifest:
            self._unregister_placeholders(Manifest.from_dict(record.manifest))
        super().discard(record)
        delete_dir(self.version)  # unpublished: nothing reads the partition versions it made

    def _unregister_placeholders(self, manifest: Manifest) -> None:
        """Drop the partitions this append registered at the empty placeholder and never switched
        (it died between the two calls): absent again, as they were (and read the same)."""
        if not manifest.partition_columns:
            return
        placeholder = f"{self.table_root_resolved}/{EMPTY_DIR_NAME}"
        with self.catalog_transaction() as txn:
            table = self.load_current(txn)
            if table is None or not tracks_partitions(table):
                return
            columns = [key.name for key in table.partitionKeys]
            names = [partition_path(columns, values) for group in self._groups(manifest)
                     if (values := partition_values(f"{group}/f", columns)) is not None]
            left = [partition_path(columns, p.values)
                    for p in txn.partitions_named(table.dbName, table.tableName, names)
                    if normalize_location(p.sd.location) == placeholder]
            txn.drop_partitions(table.dbName, table.tableName, left)

    def after_commit(self, record: AttemptRecord) -> None:
        super().after_commit(record)
        if record.superseded_location:  # partition versions: the retention of version directories
            HiveStagedTable.after_commit(self, record)


class HiveOverwriteStagedTable(HiveSinkCommit):
    """One sink write replacing a Hive table (the staged replace of CTAS), recording its batch."""

    kind = "hive_overwrite"

    def with_options(self, table: ttypes.Table) -> ttypes.Table:
        table = super().with_options(table)
        manifest = Manifest.from_dict(self.journal.require(self.attempt_id).manifest or {})
        # An overwrite counts rows afresh.
        table.parameters = self.marked({**(table.parameters or {}), SINK_ROWS_KEY: "0"}, manifest)
        return table

    def promote(self) -> None:
        """Make the staged files this attempt's version directory (one rename, or on an object
        store a move per file: nothing reads there until the swap; idempotent)."""
        ready = f"{self.staging}/{READY_DIR}"
        if is_local(ready):
            if not exists(self.location) and exists(ready):
                rename_dir(ready, self.location)
            return
        for entry in list_files(ready):
            move_file_once(entry.location, join(self.location, entry.path))

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> str | None:
        """Nothing when the table records this micro-batch already (a replay); else the replace."""
        if self.recorded(current):
            return None
        return super().swap(txn, current, record, manifest)

    def discard(self, record: AttemptRecord) -> None:
        delete_dir(record.location)
        super().discard(record)

    def after_commit(self, record: AttemptRecord) -> None:
        HiveSinkCommit.after_commit(self, record)
        HiveStagedTable.after_commit(self, record)  # retention of superseded versions


def streamed_batch(name: str, query_id: str) -> int | None:
    """The micro-batch of ``query_id`` whose append placed file ``name`` in a catalog partition
    (None: not one of its); write ids start with ``<query id>-b<batch id>-``."""
    found = re.fullmatch(rf"{re.escape(query_id)}-b(\d+)-.+", name)
    return int(found.group(1)) if found else None


def link_files(source: str, target: str, wanted: Callable[[str], bool] = lambda name: True) -> None:
    """Put the ``wanted`` data files directly in directory ``source`` into directory ``target`` under
    the same names: hard links on a local filesystem (no data written), server-side copies on an
    object store. A name
    already in ``target`` is kept (a retried step)."""
    make_dirs(target)
    for entry in list_dir(source):
        if entry.is_dir or entry.name.startswith((".", "_")) or not wanted(entry.name):
            continue  # hidden files are Spark's markers and checksums, never read as data
        destination = f"{target}/{entry.name}"
        if exists(destination):
            continue
        link_or_copy(entry.location, destination)


def _located(table: ttypes.Table, location: str) -> ttypes.Table:
    """``table`` reading ``location`` (its storage location and, if Spark keeps one, serde path)."""
    table.sd.location = location
    serde = table.sd.serdeInfo
    if (serde.parameters or {}).get("path"):
        serde.parameters = {**serde.parameters, "path": location}
    return table


def _partition(table: ttypes.Table, values: tuple[str, ...], location: str = "") -> ttypes.Partition:
    storage = copy.deepcopy(table.sd)
    storage.location = location
    return ttypes.Partition(
        values=list(values), dbName=table.dbName, tableName=table.tableName, sd=storage, parameters={}
    )


def _reads_batch_dirs(table: ttypes.Table) -> ttypes.Table:
    """``table`` reading the files in its batch directories.

    Spark reads an unpartitioned table's files in subdirectories only with the data source option
    ``recursiveFileLookup`` (a serde parameter, beside ``path``); a partitioned table discovers
    its partitions, and their batch directories, from the directory names.
    """
    if not table.partitionKeys:
        serde = table.sd.serdeInfo
        serde.parameters = {**(serde.parameters or {}), "recursiveFileLookup": "true"}
    return table


def _check_fits(table: ttypes.Table, manifest: Manifest, target: str) -> None:
    """The batch's schema and partition columns must be the table's: an append cannot change them."""
    keys = [key.name for key in table.partitionKeys or []]
    if keys != list(manifest.partition_columns):
        raise StagingError(
            f"table {target} is partitioned by {keys}: the sink writes {manifest.partition_columns}"
        )
    current = (table.parameters or {}).get(SCHEMA_KEY)
    wanted = schema_parameters(manifest).get(SCHEMA_KEY)
    if current and wanted and json.loads(current) != json.loads(wanted):
        raise StagingError(
            f"the rows' schema {wanted} does not match table {target}'s {current}: an append cannot change it"
        )
