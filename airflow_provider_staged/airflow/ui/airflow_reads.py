"""The Airflow side of the page: refresh DAGs, their latest runs and refreshes, in 3 queries.

Runs inside the api-server on its own metadatabase session (the same data the REST API
serves), so 1,000 tables cost three queries, not 1,000 REST calls.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from airflow.models.asset import AssetEvent
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from airflow_provider_staged.airflow.ui.history import RunHistoryFacts
from airflow_provider_staged.airflow.ui.rows import DagFacts, RefreshFacts, RunFacts, refresh_from_event


@dataclass
class AirflowFacts:
    """Per DAG id: the DAG, its latest run and its latest refresh (asset event)."""

    dags: dict[str, DagFacts] = field(default_factory=dict)
    runs: dict[str, RunFacts] = field(default_factory=dict)
    refreshes: dict[str, RefreshFacts] = field(default_factory=dict)
    queries: int = 0


def read_airflow(session: Session, dag_ids: Collection[str]) -> AirflowFacts:
    facts = AirflowFacts()
    if not dag_ids:
        return facts
    ids = list(dag_ids)
    for dag in session.scalars(select(DagModel).where(DagModel.dag_id.in_(ids), ~DagModel.is_stale)):
        facts.dags[dag.dag_id] = DagFacts(
            dag.dag_id, bool(dag.is_paused), dag.timetable_summary, dag.next_dagrun_create_after
        )
    # The newest row per DAG by primary key: one grouped subquery, not one query per DAG.
    newest_run = (
        select(func.max(DagRun.id)).where(DagRun.dag_id.in_(ids)).group_by(DagRun.dag_id).scalar_subquery()
    )
    for run in session.execute(
        select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.run_after, DagRun.end_date)
        .where(DagRun.id.in_(newest_run))
    ):
        facts.runs[run.dag_id] = RunFacts(run.run_id, _value(run.state), run.run_after, run.end_date)
    newest_event = (
        select(func.max(AssetEvent.id))
        .where(AssetEvent.source_dag_id.in_(ids))
        .group_by(AssetEvent.source_dag_id)
        .scalar_subquery()
    )
    for event in session.execute(
        select(AssetEvent.source_dag_id, AssetEvent.extra, AssetEvent.timestamp).where(
            AssetEvent.id.in_(newest_event)
        )
    ):
        facts.refreshes[event.source_dag_id] = refresh_from_event(event.extra or {}, event.timestamp)
    facts.queries = 3
    return facts


def read_run_history(session: Session, dag_id: str, limit: int) -> list[RunHistoryFacts]:
    """The newest ``limit`` runs of ``dag_id``, newest first (one query)."""
    found = session.execute(
        select(DagRun.run_id, DagRun.run_type, DagRun.state, DagRun.conf, DagRun.start_date, DagRun.end_date)
        .where(DagRun.dag_id == dag_id)
        .order_by(DagRun.id.desc())
        .limit(limit)
    )
    return [
        RunHistoryFacts(
            run.run_id,
            _value(run.run_type),
            _value(run.state),
            run.conf if isinstance(run.conf, dict) else None,
            run.start_date,
            run.end_date,
        )
        for run in found
    ]


def _value(field_value: object) -> str | None:
    """An Airflow enum column's plain value (older rows may hold the plain string)."""
    if field_value is None:
        return None
    return str(getattr(field_value, "value", field_value))
