"""One row of the Materialized tables page per definition, from facts read in batches.

Pure (no Airflow import, no I/O): the callers read the definitions folder, the catalog and
Airflow once for all tables and hand the facts in, so the page costs a constant number of
remote calls whatever the number of tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_provider_staged.materialized.catalog_status import CatalogStatus
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.failure_streak import suspension_note
from airflow_provider_staged.materialized.graph import TableGraph
from airflow_provider_staged.materialized.lag import table_lag
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus
from airflow_provider_staged.staging.audits import audit_summary
from airflow_provider_staged.staging.identifiers import TableIdentifier

# A date-formatter rendered on this instant shows the user the shape a value must have.
EXAMPLE_INSTANT = datetime(2024, 1, 2, 3, 4, 5)


@dataclass(frozen=True)
class DagFacts:
    """What Airflow knows of a refresh DAG."""

    dag_id: str
    is_paused: bool
    schedule: str | None
    next_run: datetime | None


@dataclass(frozen=True)
class RunFacts:
    """The latest run of a refresh DAG."""

    run_id: str
    state: str | None
    run_after: datetime | None
    end_date: datetime | None


@dataclass(frozen=True)
class RefreshFacts:
    """The last committed refresh: when, which partitions, how many rows, which version."""

    at: datetime
    partitions: Mapping[str, str]
    rows: int | None
    version: str | None
    audits: str | None = None  # the refresh's audits in a few words (``history.audit_summary``)


@dataclass(frozen=True)
class TableEntry:
    """A definition file of the folder: its table and parsed definition, or why it is broken."""

    identifier: TableIdentifier
    path: Path
    definition: MaterializedTableDefinition
    file_key: tuple[int, int, int]  # (inode, mtime_ns, size) of the file when it was parsed


def refresh_from_event(extra: Mapping[str, Any], timestamp: datetime) -> RefreshFacts:
    """A refresh task's asset event (its ``extra`` is what ``run_refresh`` returned)."""
    rows = extra.get("rows")
    return RefreshFacts(
        at=timestamp,
        partitions=dict(extra.get("partitions") or {}),
        rows=rows if isinstance(rows, int) else None,
        version=extra.get("version"),
        audits=audit_summary(extra.get("audits")),
    )


def refresh_from_table(params: Mapping[str, str] | None) -> RefreshFacts | None:
    """A whole-table commit as the table's ``staged.*`` parameters record it (no asset event:
    e.g. a table built before its DAG existed)."""
    if not params or "staged.committed_at" not in params:
        return None
    rows = params.get("staged.rows", "")
    return RefreshFacts(
        at=datetime.fromtimestamp(int(params["staged.committed_at"]), timezone.utc),
        partitions={},
        rows=int(rows) if rows.isdigit() else None,
        version=params.get("staged.version"),
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _status(status: CatalogStatus, dag: DagFacts | None) -> tuple[str, str | None]:
    """The status shown and, when it is not simply ACTIVATED, the reason why."""
    if dag is None:
        return "NO DAG", "Airflow has not parsed this table's refresh DAG (yet)"
    refresh = status.refresh_status
    if refresh is RefreshStatus.SUSPENDED:
        # An automatic suspension says why (SUSPENDED_DUE_TO_ERRORS, the failures, the last one).
        return refresh.value, suspension_note(status.suspend_reason, status.failures) or "suspended by a user"
    if dag.is_paused:
        return "SUSPENDED", "the DAG is paused in Airflow"
    return (refresh or RefreshStatus.ACTIVATED).value, None


def page_row(
    entry: TableEntry,
    status: CatalogStatus,
    table_exists: bool,
    dag: DagFacts | None,
    last_run: RunFacts | None,
    last_refresh: RefreshFacts | None,
    can_edit: bool,
    now: datetime,
) -> dict[str, Any]:
    """The JSON row of one table."""
    definition = entry.definition
    freshness = definition.freshness.as_timedelta()
    shown, reason = _status(status, dag)
    # Flink's freshness: the newest committed period against the current one. The page's batched
    # reads carry one partition, the last refresh's (its asset event; partition commits leave the
    # table's parameters alone, and listing partitions is a metastore call per table), so after a
    # backfill of an older partition the lag reads long until the next periodic commit. The DAGs'
    # zone is build_dags' default, UTC, as the page's refresh validation assumes.
    lag_delta = None if last_refresh is None else table_lag(
        definition, now, [last_refresh.partitions], last_commit=last_refresh.at)
    lag = lag_delta.total_seconds() if lag_delta is not None else None
    dag_id = dag.dag_id if dag is not None else None
    return {
        "table": entry.identifier.name,
        "dag_id": dag_id,
        "definition": entry.path.name,
        "freshness": definition.freshness_text,
        "freshness_seconds": freshness.total_seconds(),
        "refresh_mode": definition.refresh_mode.value,
        "schedule": dag.schedule if dag is not None else definition.schedule,
        "status": shown,
        "reason": reason,
        "table_exists": table_exists,
        "last_refresh": None if last_refresh is None else {
            "at": _iso(last_refresh.at),
            "partitions": dict(last_refresh.partitions),
            "rows": last_refresh.rows,
            "version": last_refresh.version,
            "audits": last_refresh.audits,
        },
        "last_run": None if last_run is None else {
            "run_id": last_run.run_id, "state": last_run.state, "run_after": _iso(last_run.run_after),
        },
        "next_run": _iso(dag.next_run) if dag is not None and not dag.is_paused else None,
        "lag_seconds": lag,
        # Within freshness: the newest committed period ended no longer ago than the table promises.
        "late": lag is not None and lag > freshness.total_seconds(),
        "partition_columns": [
            {"name": column,
             "example": (EXAMPLE_INSTANT.strftime(definition.partition_formatters[column])
                         if column in definition.partition_formatters else None)}
            for column in definition.partition_by
        ],
        "can_edit": can_edit and dag is not None,
    }


def note_inputs(rows: list[dict[str, Any]], graph: TableGraph) -> None:
    """Give each row the materialized tables it reads among the rows shown (the page's graph),
    and say on it which of those are suspended: an auto-suspended upstream shows on its
    dependents, whose input stops changing."""
    shown = {TableIdentifier.parse(row["table"]): row for row in rows}
    for table, row in shown.items():
        upstream = [up for up in graph.upstream(table) if up in shown]
        row["upstream"] = [up.name for up in upstream]
        suspended = [up.name for up in upstream
                     if shown[up]["status"].startswith(RefreshStatus.SUSPENDED.value)]
        row["suspended_inputs"] = suspended
        if suspended:
            note = f"its input {', '.join(suspended)} is suspended: no new data from it until resumed"
            row["reason"] = f"{row['reason']}; {note}" if row["reason"] else note
