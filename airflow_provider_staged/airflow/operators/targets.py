"""Turn an operator's ``target`` into the sink that stages it (Hive table or JDBC table), its
Asset and its OpenLineage dataset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset

from airflow_provider_staged.airflow.assets import table_asset
from airflow_provider_staged.airflow.callbacks import staged_settings
from airflow_provider_staged.lineage.datasets import DatasetName, hive_dataset, postgres_dataset
from airflow_provider_staged.staging.api import SupportsStaging
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import TaskRef
from airflow_provider_staged.staging.kinds.hive_table import HiveStagingSink
from airflow_provider_staged.staging.settings import StagedSettings

JDBC_PREFIX = "jdbc://"


def is_jdbc(target: str) -> bool:
    return target.startswith(JDBC_PREFIX)


def resolve_sink(
    target: str,
    settings: StagedSettings,
    task: TaskRef | None,
    jdbc_options: Mapping[str, Any] | None = None,
    conn_id: str | None = None,
) -> SupportsStaging:
    """``db.table`` → Hive Metastore; ``jdbc://<postgres conn id>/<schema>.<table>`` → PostgreSQL."""
    if is_jdbc(target):
        from airflow_provider_staged.staging.kinds.jdbc_table import JdbcWriteOptions, jdbc_sink_for_target

        options = JdbcWriteOptions.from_mapping(jdbc_options)
        return jdbc_sink_for_target(target, settings.journal, task, options, conn_id)
    return HiveStagingSink(
        TableIdentifier.parse(target),
        settings.journal,
        settings.metastore_uri,
        settings.retention,
        task,
        conn_id,
    )


def target_asset(target: str, staged_conn_id: str) -> Asset:
    """The target's asset: a Hive table's is named after its metastore, so the staged
    connection is read (when the DAG is parsed); a ``jdbc://`` target is its own URI."""
    if is_jdbc(target):
        return Asset(uri=target, name=target)
    return table_asset(TableIdentifier.parse(target), staged_settings(staged_conn_id).metastore_uri)


def target_dataset(target: str, metastore_uri: str) -> DatasetName:
    """The OpenLineage dataset the target is: the Hive table of the metastore at
    ``metastore_uri``, or the PostgreSQL table of a ``jdbc://`` target (its connection read)."""
    if is_jdbc(target):
        from airflow_provider_staged.catalogs.postgres_connections import postgres_connection
        from airflow_provider_staged.staging.kinds.jdbc_table import JdbcTarget

        table = JdbcTarget.parse(target)
        conn = postgres_connection(table.conn_id)
        return postgres_dataset(conn.host, conn.port, conn.database, table.schema, table.table)
    return hive_dataset(metastore_uri, TableIdentifier.parse(target).name)
