"""Turn an operator's ``target`` into the sink that stages it (Hive table or JDBC table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_staged.airflow.assets import table_asset_uri
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


def asset_uri(target: str, staged_conn_id: str) -> str:
    if is_jdbc(target):
        return target
    return table_asset_uri(TableIdentifier.parse(target), staged_conn_id)
