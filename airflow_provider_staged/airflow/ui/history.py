"""A table's refresh history for the page: its DAG's runs joined with the journal's attempts.

Pure (no Airflow import, no I/O): Airflow knows each run (who triggered it, when, how it
ended), the journal knows what the run's attempt did (which partitions, how many rows, why it
failed). A run that failed before any attempt began (a refused request) has no attempt: its
outcome is the run's state alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_staged.materialized.workflow.scheduler import STATIC_PARTITIONS
from airflow_provider_staged.staging.attempts import is_quarantined
from airflow_provider_staged.staging.audits import audit_summary
from airflow_provider_staged.staging.journal import AttemptRecord
from airflow_provider_staged.staging.partition_paths import spec_text

# Airflow's run types, in the words the page uses for who asked for the refresh.
TRIGGERS = {
    "scheduled": "schedule",
    "manual": "manual",
    "asset_triggered": "asset event",
    "backfill": "backfill",
}


@dataclass(frozen=True)
class RunHistoryFacts:
    """One run of a refresh DAG, as the metadatabase has it."""

    run_id: str
    run_type: str
    state: str | None
    conf: Mapping[str, Any] | None
    start_date: datetime | None
    end_date: datetime | None


def first_line(message: str | None) -> str | None:
    """The first non-empty line of an error: what a row has room for."""
    for line in (message or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def _partition_text(run: RunHistoryFacts, attempt: AttemptRecord | None) -> str | None:
    if attempt is not None and attempt.partition_spec:
        return attempt.partitions_text
    requested = (run.conf or {}).get(STATIC_PARTITIONS) or {}
    if isinstance(requested, Mapping) and requested:
        return spec_text(requested)
    return "whole table" if attempt is not None else None


def history_rows(
    dag_id: str, runs: Iterable[RunHistoryFacts], records: Iterable[AttemptRecord]
) -> list[dict[str, Any]]:
    """One row per run, newest first as ``runs`` come, with its newest attempt's facts."""
    attempts: dict[str, AttemptRecord] = {}
    for record in sorted(records, key=lambda r: r.created_at):
        if record.task is not None and record.task.dag_id == dag_id:
            attempts[record.task.run_id] = record  # the newest try's attempt wins
    rows = []
    for run in runs:
        attempt = attempts.get(run.run_id)
        ended = run.end_date is not None and run.start_date is not None
        manifest = (attempt.manifest or {}) if attempt is not None else {}
        rows.append({
            "run_id": run.run_id,
            "trigger": TRIGGERS.get(run.run_type, run.run_type),
            "partition": _partition_text(run, attempt),
            "started": run.start_date.isoformat() if run.start_date else None,
            "duration_seconds": round((run.end_date - run.start_date).total_seconds(), 1) if ended else None,
            "state": run.state,
            "rows": manifest.get("rows"),
            "attempt": attempt.attempt_id if attempt is not None else None,
            # A version that failed its audits stays WRITTEN, unpublished: say so, not "written".
            "outcome": None if attempt is None else "QUARANTINED" if is_quarantined(attempt)
            else attempt.state.value,
            "error": first_line(attempt.error) if attempt is not None else None,
            "audits": audit_summary((attempt.audits or {}).get("results")) if attempt is not None else None,
        })
    return rows
