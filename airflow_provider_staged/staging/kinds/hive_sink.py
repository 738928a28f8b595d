"""The commits of the built-in Hive sink: an append (``hive_append``) and an overwrite (``hive_overwrite``).

A sink write stages its files under ``<table root>/_staging/<attempt id>/ready/`` (never read:
``_`` names are hidden from Spark, and the version sweep lists only ``_v=`` directories).

- **append**: the commit moves each staged directory into the version the table points at,
  as ``<version>/[<partition>/]batch-<attempt id>/`` (one rename per partition, atomic each),
  registers partitions the table tracks in the catalog and does not have yet, and records the
  streaming query's batch (``sink.batch.<query id>``) and the row count in ONE ``alter_table``.
  A table that does not exist is created at a new version holding the batch. ``is_published`` is
  exact: a ``batch-<attempt id>`` directory under the current version, or the recorded batch.
  A commit cut short after a rename is rolled forward (``complete_publish``), never discarded.
- **overwrite**: the staged replace of CTAS (``hive_table``): the staged files become the
  attempt's version directory with one rename, and the pointer swap records the batch too.

Everything runs under the table's metastore lock (``metastore.locks``).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.metastore.client import AlreadyExistsException, MetastoreClient
from airflow_provider_staged.metastore.tables import (
    PARTITION_PROVIDER_KEY,
    SCHEMA_KEY,
    current_location,
    new_table,
    schema_parameters,
)
from airflow_provider_staged.sink.api import fault_point
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.errors import StagingError, TableAlreadyExistsError
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import partition_values
from airflow_provider_staged.staging.versions import RetentionPolicy, version_dir_name
from airflow_provider_staged.storage import delete_dir, exists, normalize_location

if TYPE_CHECKING:
    from airflow_provider_staged.settings import StagedSettings

STAGING_DIR = "_staging"
READY_DIR = "ready"
BATCH_DIR_PREFIX = "batch-"
MARKER_PREFIX = "sink.batch."


def marker_key(query_id: str) -> str:
    """The table parameter holding the last micro-batch of ``query_id`` committed into it."""
    return MARKER_PREFIX + query_id


def recorded_batch(table: ttypes.Table | None, query_id: str) -> int | None:
    value = (table.parameters or {}).get(marker_key(query_id)) if table is not None else None
    return int(value) if value is not None else None


def staging_dir(root: str, attempt_id: str) -> str:
    return f"{normalize_location(root)}/{STAGING_DIR}/{attempt_id}"


def create_dir(location: str) -> None:
    from pyarrow import fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(location)
    filesystem.create_dir(path, recursive=True)


def _move(source: str, target: str) -> None:
    """Rename ``source`` to ``target`` (a directory), creating ``target``'s parent."""
    from pyarrow import fs as pafs

    filesystem, source_path = pafs.FileSystem.from_uri(source)
    _, target_path = pafs.FileSystem.from_uri(target)
    filesystem.create_dir(os.path.dirname(target_path), recursive=True)
    filesystem.move(source_path, target_path)


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
    ) -> None:
        super().__init__(
            identifier, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, metastore_uri, retention, task,
            attempt_id, conn_id,
        )
        self.query_id = query_id
        self.batch_id = batch_id
        self.streaming = streaming
        self._root = root

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> HiveSinkCommit:
        ref = record.catalog
        return cls(
            TableIdentifier.parse(record.target), query_id=ref["query_id"], batch_id=int(ref["batch_id"]),
            streaming=bool(ref["streaming"]), root=ref["root"], **cls.rebuilt(record, settings),
        )

    def catalog_ref(self) -> dict[str, Any]:
        return {
            **super().catalog_ref(),
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "streaming": self.streaming,
            "root": self.table_root_resolved,
        }

    def check_target(self) -> None:
        """Nothing to check: a sink write appends to or replaces whatever is there, or creates it."""

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
        params["sink.rows"] = str(int(params.get("sink.rows", "0")) + (manifest.rows or 0))
        return params

    def discard(self, record: AttemptRecord) -> None:
        delete_dir(self.staging)

    def after_commit(self, record: AttemptRecord) -> None:
        # What is left in the staging area: failed and speculative task attempts' files.
        delete_dir(self.staging)


class HiveAppendStagedTable(HiveSinkCommit):
    """One sink write appended to a Hive table (see the module docstring)."""

    kind = "hive_append"

    def staging_location(self) -> str:
        return self.staging

    def _groups(self, manifest: Manifest) -> list[str]:
        """The staged directories relative to ``ready/``: partition paths, or "" (unpartitioned)."""
        return sorted({os.path.dirname(item.path) for item in manifest.files} or {""})

    def _batch_dir(self, version: str, group: str) -> str:
        return "/".join(part for part in (version, group, BATCH_DIR_PREFIX + self.attempt_id) if part)

    def publish(self, record: AttemptRecord) -> None:
        manifest = Manifest.from_dict(record.manifest or {})
        with self.catalog_transaction() as txn:
            current = self.load_current(txn)
            if self.recorded(current):
                return None
            if current is None:
                self._create(txn, record, manifest)
                return None
            _check_fits(current, manifest, self.target)
            version = normalize_location(current_location(current))
            self._place(manifest, version)
            self._register_partitions(txn, current, manifest, version)
            changed = _reads_batch_dirs(copy.deepcopy(current))
            changed.parameters = self.marked(changed.parameters, manifest)
            txn.alter_table(changed)
        return None

    def _create(self, txn: MetastoreClient, record: AttemptRecord, manifest: Manifest) -> None:
        version = f"{self.table_root_resolved}/{version_dir_name(self.attempt_id)}"
        self._place(manifest, version)
        create_dir(version)  # an empty first write still needs a directory to read
        table = new_table(self.identifier, Manifest.from_dict({**manifest.to_dict(), "location": version}),
                          self.attempt_id)
        table.parameters = self.marked(table.parameters, manifest)
        try:
            txn.create_table(_reads_batch_dirs(table))
        except AlreadyExistsException:
            raise TableAlreadyExistsError(f"table {self.target} was created without its lock") from None

    def _place(self, manifest: Manifest, version: str) -> None:
        """Move each staged directory into ``version`` (skipping those already moved)."""
        ready = f"{self.staging}/{READY_DIR}"
        for group in self._groups(manifest):
            target = self._batch_dir(version, group)
            source = "/".join(part for part in (ready, group) if part)
            if not exists(target) and exists(source):
                _move(source, target)
        fault_point("global_commit")

    def _register_partitions(
        self, txn: MetastoreClient, table: ttypes.Table, manifest: Manifest, version: str
    ) -> None:
        """Partitions a catalog-tracked table does not have yet, at ``<version>/<partition>``."""
        if (table.parameters or {}).get(PARTITION_PROVIDER_KEY) != "catalog":
            return  # Spark discovers the partitions from the directories
        columns = [key.name for key in table.partitionKeys]
        registered = {tuple(p.values) for p in txn.partitions(table.dbName, table.tableName)}
        new = []
        for group in self._groups(manifest):
            values = partition_values(f"{group}/f", columns)
            if values is not None and values not in registered:
                storage = copy.deepcopy(table.sd)
                storage.location = f"{version}/{group}"
                new.append(ttypes.Partition(
                    values=list(values), dbName=table.dbName, tableName=table.tableName, sd=storage,
                    parameters={},
                ))
        txn.add_partitions(new)

    def is_published(self, record: AttemptRecord) -> bool:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
        if table is None or not record.manifest:
            return False
        if self.recorded(table):
            return True
        version = normalize_location(current_location(table))
        if version == normalize_location(f"{self.table_root_resolved}/{version_dir_name(self.attempt_id)}"):
            return True  # this attempt created the table
        manifest = Manifest.from_dict(record.manifest)
        return any(exists(self._batch_dir(version, group)) for group in self._groups(manifest))

    def complete_publish(self, record: AttemptRecord) -> None:
        """Roll a commit cut short after its first rename forward: the rest, then the record."""
        if record.manifest:
            self.publish(record)


class HiveOverwriteStagedTable(HiveSinkCommit):
    """One sink write replacing a Hive table (the staged replace of CTAS), recording its batch."""

    kind = "hive_overwrite"

    def with_options(self, table: ttypes.Table) -> ttypes.Table:
        table = super().with_options(table)
        manifest = Manifest.from_dict(self.journal.require(self.attempt_id).manifest or {})
        # An overwrite counts rows afresh.
        table.parameters = self.marked({**(table.parameters or {}), "sink.rows": "0"}, manifest)
        return table

    def promote(self) -> None:
        """Make the staged files this attempt's version directory (one rename; idempotent)."""
        ready = f"{self.staging}/{READY_DIR}"
        if not exists(self.location) and exists(ready):
            _move(ready, self.location)

    def publish(self, record: AttemptRecord) -> str | list[str] | None:
        with self.catalog_transaction() as txn:
            if self.recorded(self.load_current(txn)):
                return None
        return super().publish(record)

    def discard(self, record: AttemptRecord) -> None:
        delete_dir(record.location)
        super().discard(record)

    def after_commit(self, record: AttemptRecord) -> None:
        HiveSinkCommit.after_commit(self, record)
        HiveStagedTable.after_commit(self, record)  # retention of superseded versions


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
