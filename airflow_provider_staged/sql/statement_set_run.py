"""Run a statement set's INSERTs as one commit group: every target is published or none is.

Each INSERT is a staged attempt of the Hive sink's kinds (``staging.kinds.hive_sink``): INSERT
INTO appends (``hive_append``: its files staged under ``<table>/_staging/<attempt>/ready``),
INSERT OVERWRITE replaces (``hive_overwrite``: a new version directory). The query's result is
written by the client's Spark session as the staged CTAS is (``SessionEngine``); the group is
decided once every INSERT is written, then every target commits (``staging.attempts.run_group``,
where ``staging.groups`` says what a reader sees meanwhile and how long). Columns go by position
and are cast to the table's types, as Spark's INSERT does; the table must exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import PARQUET_SERDE, SCHEMA_KEY
from airflow_provider_staged.sql.session_engine import SessionEngine
from airflow_provider_staged.sql.splitting import Statement
from airflow_provider_staged.sql.statement_set import InsertPlan
from airflow_provider_staged.staging.attempts import JournaledStagedTable, run_group
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.kinds.hive_sink import (
    READY_DIR,
    HiveAppendStagedTable,
    HiveOverwriteStagedTable,
    HiveSinkCommit,
)
from airflow_provider_staged.staging.manifest import Manifest

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

# The sink kinds journal a streaming query's id; a statement set's writes are batches of none.
QUERY_ID = "statement-set"


class InsertFailed(Exception):
    """One INSERT of the set failed (its cause); the whole set was aborted. ``query_offset``:
    where the INSERT's query starts in ``member.text`` when the query ran (``cast_query``)."""

    def __init__(self, member: Statement, query_offset: int | None = None) -> None:
        super().__init__(member.text)
        self.member = member
        self.query_offset = query_offset


@dataclass(frozen=True)
class _Insert:
    member: Statement
    plan: InsertPlan
    staged: HiveSinkCommit
    query: str
    partition_by: list[str]
    schema_json: str | None


def run_statement_set(
    spark: Any, settings: StagedSettings, inserts: list[tuple[Statement, InsertPlan]]
) -> tuple[list[tuple[Any, ...]], float]:
    """Run ``inserts`` all or nothing; one row per INSERT and the seconds between the first and
    the last target's commit (the window in which a reader can see some new and others old)."""
    planned = [_planned(spark, settings, member, plan) for member, plan in inserts]
    by_attempt = {item.staged.attempt_id: item for item in planned}
    engine = SessionEngine(settings, spark)

    def write(staged: JournaledStagedTable, spec: dict[str, Any]) -> dict[str, Any]:
        item = by_attempt[staged.attempt_id]
        # An append's files wait in ``ready/`` of its staging directory; an overwrite's are its version.
        location = f"{spec['location']}/{READY_DIR}" if isinstance(staged, HiveAppendStagedTable) \
            else spec["location"]
        try:
            manifest = engine.run(item.query, {"format": "parquet", "location": location,
                                               "partition_by": item.partition_by}, {})
        except Exception as error:
            raise InsertFailed(item.member, len(item.member.text) - len(item.plan.query)) from error
        # The table keeps its own schema: the cast rows may differ from it only in nullability.
        return {**manifest, "schema_json": item.schema_json or manifest["schema_json"]}

    manifests, window = run_group([item.staged for item in planned], write, settings.attempt_ttl_seconds)
    for item in planned:
        spark.catalog.refreshTable(item.plan.target.quoted)  # committed behind Spark's back
    return [_row(item, manifest) for item, manifest in zip(planned, manifests, strict=True)], window


def _planned(spark: Any, settings: StagedSettings, member: Statement, plan: InsertPlan) -> _Insert:
    """The INSERT's staged attempt and the query cast to the table's columns (before any work)."""
    try:
        schema = spark.table(plan.target.quoted).schema
        with MetastoreClient(settings.metastore_uri) as client:
            table = client.get_table(plan.target.database, plan.target.table)
        if table is not None and not is_parquet(table):
            raise StagingError(f"{plan.target} is not a Parquet table: a statement set writes Parquet "
                               "files (INSERT into it outside a statement set)")
    except Exception as error:
        raise InsertFailed(member) from error
    staged = insert_attempt(settings, plan)
    partition_by = [key.name for key in (table.partitionKeys or [])] if table is not None else []
    stored = (table.parameters or {}).get(SCHEMA_KEY) if table is not None else None
    return _Insert(member, plan, staged, cast_query(plan.query, schema), partition_by, stored)


def is_parquet(table: Any) -> bool:
    """Whether the metastore ``table`` reads Parquet files (Spark's provider, else Hive's SerDe)."""
    provider = (table.parameters or {}).get("spark.sql.sources.provider")
    if provider is not None:
        return provider.lower() == "parquet"
    return table.sd.serdeInfo is not None and table.sd.serdeInfo.serializationLib == PARQUET_SERDE


def insert_attempt(settings: StagedSettings, plan: InsertPlan) -> HiveSinkCommit:
    """The staged attempt of one INSERT: an append (INTO) or a replace (OVERWRITE) of its target."""
    kind = HiveOverwriteStagedTable if plan.overwrite else HiveAppendStagedTable
    return kind(plan.target, settings.journal, settings.metastore_uri, query_id=QUERY_ID, batch_id=0,
                streaming=False, retention=settings.retention)


def cast_query(query: str, schema: Any) -> str:
    """``query``'s columns by position, cast to and named as the table's (Spark's INSERT). The
    query stands from the second line on, so Spark's positions of its errors map back to it."""
    names = [f"`_c{index}`" for index in range(len(schema.fields))]
    columns = ", ".join(
        f"CAST({name} AS {field.dataType.simpleString()}) AS `{field.name.replace('`', '``')}`"
        for name, field in zip(names, schema.fields, strict=True)
    )
    return f"SELECT {columns} FROM (\n{query}\n) AS `_inserted`({', '.join(names)})"


def _row(item: _Insert, manifest: Manifest) -> tuple[Any, ...]:
    mode = "overwrite" if item.plan.overwrite else "append"
    return item.plan.target.name, mode, item.staged.attempt_id, manifest.rows, len(manifest.files)
