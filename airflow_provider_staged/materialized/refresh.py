"""The refresh of a materialized table: an atomic staged replace of the table or its partitions.

Partitioned tables refresh exactly the partitions of the request (the periodic partition of
the schedule time, or the static partitions of a one-time refresh) through
:class:`HivePartitionStagedTable`; unpartitioned tables are replaced whole through
:class:`HiveStagedTable`. Both use the same journaled commit/abort as the staged operator, and
the same audits: the definition's EXPECT constraints are row expectations of the staged write
(:func:`definition_audits`), judged before the commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.engine.base import Engine
from airflow_provider_staged.engine.connect import ConnectEngine
from airflow_provider_staged.engine.execution import execute_staged
from airflow_provider_staged.engine.runners import EmbeddedEngine
from airflow_provider_staged.lineage.datasets import source_tables
from airflow_provider_staged.materialized.catalog_status import workflow_options
from airflow_provider_staged.materialized.continuous_run import one_time_staged, snapshot_query
from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    MaterializedTableDefinition,
    RefreshMode,
    definition_audits,
    read_identifier,
)
from airflow_provider_staged.materialized.graph import Node, materialized_inputs
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB
from airflow_provider_staged.materialized.output_schema import refresh_query
from airflow_provider_staged.materialized.params import (
    RefreshRequest,
    execution_conf,
    writer_options,
)
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.identifiers import quote_name
from airflow_provider_staged.staging.journal import TaskRef
from airflow_provider_staged.staging.kinds.continuous_partitions import ContinuousPartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import partition_values
from airflow_provider_staged.staging.partition_ttl import materialized_table_options
from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)
# A refresh of many partitions names the first ones only: one readable line in the task log.
_LISTED_PARTITIONS = 10


def string_literal(value: str) -> str:
    """A Spark SQL string literal; values are validated upstream, escaping is the second guard."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def partition_query(query: str, partition_spec: Mapping[str, str]) -> str:
    """The definition's query restricted to the partitions being refreshed."""
    if not partition_spec:
        return query
    condition = " AND ".join(
        f"{quote_name(column)} = {string_literal(value)}" for column, value in sorted(partition_spec.items())
    )
    return f"SELECT * FROM (\n{query}\n) AS _materialized_source WHERE {condition}"


def staged_refresh(
    definition: MaterializedTableDefinition,
    request: RefreshRequest,
    settings: StagedSettings,
    task: TaskRef | None,
    conn_id: str | None = None,
) -> JournaledStagedTable:
    if definition.refresh_mode is RefreshMode.CONTINUOUS:  # a one-time overwrite beside the stream
        return one_time_staged(definition, request.partition_spec, settings, task, conn_id)
    staged = _staged_build(definition, request, settings, task, conn_id)
    staged.audits = definition_audits(definition)
    return staged


def _staged_build(
    definition: MaterializedTableDefinition,
    request: RefreshRequest,
    settings: StagedSettings,
    task: TaskRef | None,
    conn_id: str | None,
) -> JournaledStagedTable:
    if definition.partition_by:
        return HivePartitionStagedTable(
            definition.identifier,
            definition.partition_by,
            request.partition_spec,
            settings.journal,
            settings.metastore_uri,
            settings.retention,
            task,
            conn_id=conn_id,
            table_options=materialized_table_options(definition.options, definition.partition_by),
        )
    return HiveStagedTable(
        definition.identifier,
        StagingPurpose.CREATE_OR_REPLACE_TABLE_AS,
        settings.journal,
        settings.metastore_uri,
        settings.retention,
        task,
        conn_id=conn_id,
    )


class SourceTableNotFoundError(RuntimeError):
    """A table the definition's query reads does not exist."""


def check_sources(definition: MaterializedTableDefinition, metastore_uri: str) -> None:
    """Fail before any attempt begins or Spark starts when a source table is missing.

    A missing upstream table is the commonest refresh failure: this turns a JVM start and
    Spark's analysis error (half a minute) into one metastore read per source table. Only a
    table whose database exists is checked: ``parquet.`/path``` or ``global_temp.v`` are not
    metastore tables, and Spark decides about them.
    """
    tables = source_tables(definition.query)
    if not tables:
        return
    with MetastoreClient(metastore_uri) as client:
        for name in tables:
            database, table = name.split(".", 1)
            if client.get_table(database, table) is None and database in client.thrift.get_all_databases():
                raise SourceTableNotFoundError(
                    f"[TABLE_OR_VIEW_NOT_FOUND] table {name}, read by {definition.identifier}, does not exist"
                )


def uncommitted_inputs(
    definition: MaterializedTableDefinition, spec: Mapping[str, str], metastore_uri: str
) -> Callable[[], list[str]] | None:
    """A probe of the upstream materialized tables (defined beside ``definition``) that have not
    committed ``spec`` yet; None when the query reads none. A table not in the catalog has
    committed nothing; one partitioned by other columns cannot say, and is not waited for."""
    folder = Path(definition.source_path).parent
    defined = set()
    for path in folder.glob(DEFINITION_GLOB):
        try:
            defined.add(read_identifier(path))  # the first tokens only
        except DefinitionError:
            continue
    upstream = materialized_inputs(Node.of(definition), defined)
    if not upstream:
        return None

    def missing() -> list[str]:
        found = []
        with MetastoreClient(metastore_uri) as client:
            for table in upstream:
                info = client.get_table(table.database, table.table)
                columns = [key.name for key in (info.partitionKeys or [])] if info is not None else []
                if info is None or (set(spec) <= set(columns) and not client.partitions_matching(
                        table.database, table.table, columns, dict(spec))):
                    found.append(table.name)
        return found

    return missing


def table_query(definition: MaterializedTableDefinition, engine: Engine, query: str) -> str:
    """``query`` (the definition's, or its snapshot) cast and ordered as the column list says,
    after the checks CREATE ran (a definition file never met them): Spark analyses the query."""
    if isinstance(engine, EmbeddedEngine | ConnectEngine):
        return refresh_query(definition, engine.session(), query)
    if definition.columns:
        raise ValueError(f"the column list of {definition.identifier} needs the embedded or connect "
                         f"engine to analyse its query, not {type(engine).__name__}")
    return query


def run_refresh(
    definition: MaterializedTableDefinition,
    request: RefreshRequest,
    settings: StagedSettings,
    staged: JournaledStagedTable,
    engine: Engine | None = None,
    killed: threading.Event | None = None,
) -> dict[str, Any]:
    """Run the staged attempt ``staged`` (from :func:`staged_refresh`) as ``request`` says;
    return what was committed.

    The workflow's stored defaults (set on create or resume) apply under the run's own
    ``dynamicOptions`` / ``executionConfig``.
    """
    default_options, default_conf = workflow_options(definition.source_path)
    options = writer_options({**default_options, **request.dynamic_options})
    sql_conf = execution_conf({**default_conf, **request.execution_config})
    check_sources(definition, settings.metastore_uri)
    engine = engine or EmbeddedEngine(settings)
    query = definition.query
    if isinstance(staged, ContinuousPartitionStagedTable):
        if not isinstance(engine, EmbeddedEngine | ConnectEngine):
            raise ValueError(f"a one-time refresh of continuous table {definition.identifier} runs on the "
                             f"embedded or connect engine, not {type(engine).__name__}")
        query = snapshot_query(definition, staged, engine.session(), settings.metastore_uri)
    query = table_query(definition, engine, query)
    manifest = execute_staged(
        staged,
        engine,
        partition_query(query, request.partition_spec),
        {"options": options, "sql_conf": sql_conf},
        settings.attempt_ttl_seconds,
        killed,
    )
    assert manifest is not None  # create_or_replace never skips
    result = {
        "target": definition.identifier.name,
        "version": staged.attempt_id,
        "partitions": dict(request.partition_spec),
        "schedule_time": request.schedule_time_text,
        "is_periodic": request.is_periodic,
        "rows": manifest.rows,
        "bytes": manifest.bytes,
    }
    record = staged.journal.get(staged.attempt_id) if staged.audits else None
    if record is not None and (record.audits or {}).get("results"):
        # Outcomes only (the asset event, the page): sample rows stay in the journal.
        shown = ("name", "kind", "mode", "passed", "failing")
        result["audits"] = [{key: item[key] for key in shown} for item in record.audits["results"]]
        result["dropped_rows"] = manifest.dropped_rows
    log.info("%s", commit_summary(definition, request, staged.attempt_id, manifest))
    return result


def commit_summary(
    definition: MaterializedTableDefinition, request: RefreshRequest, version: str, manifest: Manifest
) -> str:
    """One line naming what a refresh committed: table, partitions (rows each), version, rows."""
    kind = "periodic" if request.is_periodic else "one-time"
    if not definition.partition_by:
        what = "whole table"
    else:
        rows: dict[tuple[str, ...], int] = {}
        for item in manifest.files:
            values = partition_values(item.path, definition.partition_by)
            if values is not None:
                rows[values] = rows.get(values, 0) + item.rows
        spec = ", ".join(f"{k}={_shown(v)}" for k, v in request.partition_spec.items()) or "all partitions"
        written = [
            "/".join(f"{k}={_shown(v)}" for k, v in zip(definition.partition_by, values, strict=True))
            + f" ({_rows(count)})"
            for values, count in sorted(rows.items())
        ]
        shown = ", ".join(written[:_LISTED_PARTITIONS]) or "no rows: the partitions are now empty"
        if len(written) > _LISTED_PARTITIONS:
            shown += f", ... ({len(written)} partitions)"
        what = f"partitions {spec}: {shown}"
    dropped = ""
    if manifest.dropped_rows:
        dropped = f" ({_rows(manifest.dropped_rows)} dropped by DROP ROW constraints)"
    return (
        f"Refresh committed ({kind}, schedule time {request.schedule_time_text}): table "
        f"{definition.identifier.name}, {what}; version {version}, {_rows(manifest.rows)}{dropped}"
    )


def _shown(value: str) -> str:
    """A partition value in the log line: quoted when it has a newline or another control
    character the data put there, so the line stays one line."""
    return value if value.isprintable() else repr(value)


def _rows(count: int | None) -> str:
    return "1 row" if count == 1 else f"{count} rows"
