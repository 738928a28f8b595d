"""Atomic replacement of some partitions of a Hive Metastore table (materialized-table refresh).

Same two-phase protocol and journal as :class:`HiveStagedTable`; only ``publish`` differs: the
attempt's version directory holds the refreshed partitions, and commit points those partitions
at it with one ``alter_partitions`` (existing partitions) and one ``add_partitions`` (new ones).
A partition refresh that only touches existing partitions, or only new ones (every periodic
run), is therefore one metastore call. The first refresh creates the table with Spark's
directory-discovered layout (one call, complete), registers its partitions (invisible to Spark
until the last step), then switches the table to catalog-tracked partitions.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.metastore.client import AlreadyExistsException, MetastoreClient
from airflow_provider_staged.metastore.tables import SCHEMA_KEY, new_table, schema_parameters
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.errors import StagingError, TableAlreadyExistsError
from airflow_provider_staged.staging.hive import HiveStagedTable
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import matches, partition_path, partition_values
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage import normalize_location

PARTITION_PROVIDER_KEY = "spark.sql.partitionProvider"


class HivePartitionStagedTable(HiveStagedTable):
    """Replace the partitions inside ``partition_spec`` (all partitions when it is empty)."""

    def __init__(
        self,
        identifier: TableIdentifier,
        partition_columns: Sequence[str],
        partition_spec: Mapping[str, str],
        journal: AttemptJournal,
        metastore_uri: str,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
    ) -> None:
        super().__init__(
            identifier, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, metastore_uri, retention, task
        )
        unknown = sorted(set(partition_spec) - set(partition_columns))
        if not partition_columns or unknown:
            raise StagingError(f"partition spec {dict(partition_spec)} does not fit {partition_columns}")
        self.partition_columns = list(partition_columns)
        self.partition_spec = dict(partition_spec)

    def write_spec(self) -> dict[str, Any]:
        return {**super().write_spec(), "partition_by": self.partition_columns}

    def _partition(self, table: ttypes.Table, values: tuple[str, ...], location: str) -> ttypes.Partition:
        storage = copy.deepcopy(table.sd)
        storage.location = location
        return ttypes.Partition(
            values=list(values), dbName=table.dbName, tableName=table.tableName, sd=storage, parameters={}
        )

    def _targets(self, manifest: Manifest, existing: Sequence[tuple[str, ...]]) -> set[tuple[str, ...]]:
        written = {partition_values(f.path, self.partition_columns) for f in manifest.files}
        if None in written:
            raise StagingError(f"attempt {self.attempt_id} wrote files outside partition directories")
        outside = [v for v in written if not matches(v, self.partition_columns, self.partition_spec)]
        if outside:
            raise StagingError(
                f"refresh of {self.partition_spec} produced rows of other partitions: {sorted(outside)[:3]}"
            )
        inside = {v for v in existing if matches(v, self.partition_columns, self.partition_spec)}
        return written | inside  # type: ignore[operator]

    def _location(self, record: AttemptRecord, values: tuple[str, ...]) -> str:
        location = f"{normalize_location(record.location)}/{partition_path(self.partition_columns, values)}"
        # A partition the refresh emptied still needs a (empty) directory to point at.
        Path(location.removeprefix("file:")).mkdir(parents=True, exist_ok=True)
        return location

    def publish(self, record: AttemptRecord) -> str | None:
        manifest = Manifest.from_dict(record.manifest or {})
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
            if table is None:
                self._create(client, record, manifest)
                return None
            _check_same_schema(table, manifest, self.target)
            existing = {tuple(p.values): p for p in client.partitions(table.dbName, table.tableName)}
            replaced, added = [], []
            for values in sorted(self._targets(manifest, list(existing))):
                location = self._location(record, values)
                if values in existing:
                    partition = copy.deepcopy(existing[values])
                    partition.sd.location = location
                    replaced.append(partition)
                else:
                    added.append(self._partition(table, values, location))
            client.alter_partitions(table.dbName, table.tableName, replaced)
            client.add_partitions(added)
        return None

    def _create(self, client: MetastoreClient, record: AttemptRecord, manifest: Manifest) -> None:
        table = new_table(self.identifier, manifest, self.attempt_id)
        try:
            client.create_table(table)
        except AlreadyExistsException:
            raise TableAlreadyExistsError(f"table {self.target} was created concurrently") from None
        created = client.get_table(self.identifier.database, self.identifier.table)
        targets = sorted(self._targets(manifest, []))
        client.add_partitions([self._partition(created, v, self._location(record, v)) for v in targets])
        created.parameters[PARTITION_PROVIDER_KEY] = "catalog"
        client.alter_table(created)

    def is_published(self, record: AttemptRecord) -> bool:
        prefix = normalize_location(record.location) + "/"
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
            if table is None:
                return False
            partitions = client.partitions(table.dbName, table.tableName)
        return any(normalize_location(p.sd.location).startswith(prefix) for p in partitions)


def _check_same_schema(table: ttypes.Table, manifest: Manifest, target: str) -> None:
    current = (table.parameters or {}).get(SCHEMA_KEY)
    wanted = schema_parameters(manifest).get(SCHEMA_KEY)
    if current and wanted and json.loads(current) != json.loads(wanted):
        raise StagingError(
            f"the query's schema no longer matches table {target}: a partition refresh cannot change it"
        )
