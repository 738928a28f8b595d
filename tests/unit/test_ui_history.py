"""The page's refresh history: a DAG's runs joined with the journal's attempts of each run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_provider_staged.airflow.ui.history import RunHistoryFacts, first_line, history_rows
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef

DAG = "mt__db__t"
START = datetime(2024, 1, 2, 3, 0, tzinfo=timezone.utc)


def run(run_id: str, run_type: str = "manual", state: str = "success", seconds: float | None = 42.0,
        conf: dict | None = None) -> RunHistoryFacts:
    end = START + timedelta(seconds=seconds) if seconds is not None else None
    return RunHistoryFacts(run_id, run_type, state, conf, START, end)


def attempt(
    attempt_id: str, run_id: str, state: AttemptState, created_at: float, dag_id: str = DAG,
    partitions: dict | None = None, rows: int | None = None, error: str | None = None,
) -> AttemptRecord:
    return AttemptRecord(
        attempt_id, "hive_table", "db.t", "create_or_replace", f"file:/wh/db.db/t/_v={attempt_id}",
        catalog={"partition_spec": partitions} if partitions else {}, state=state,
        task=TaskRef(dag_id, "refresh", run_id, 1), manifest={"rows": rows} if rows is not None else None,
        error=error, created_at=created_at,
    )


def test_each_run_shows_its_newest_attempt_and_what_it_did() -> None:
    runs = [
        run("manual__2", conf={"staticPartitions": {"ds": "2024-01-03"}}, state="failed"),
        run("scheduled__1", run_type="scheduled", seconds=None, state="running"),
        run("manual__0", conf={"staticPartitions": {"ds": "2024-01-01"}}, state="failed"),
    ]
    records = [
        # Try 1 of manual__2 failed, try 2 committed: the newest try's attempt is the run's.
        attempt("a-try1", "manual__2", AttemptState.ABORTED, 1.0, partitions={"ds": "2024-01-03"},
                error="job failed: boom\nTraceback ..."),
        attempt("a-try2", "manual__2", AttemptState.COMMITTED, 2.0, partitions={"ds": "2024-01-03"}, rows=7),
        attempt("b", "scheduled__1", AttemptState.BEGUN, 3.0),
        attempt("other-dag", "manual__0", AttemptState.COMMITTED, 4.0, dag_id="mt__db__other"),
    ]
    rows = history_rows(DAG, runs, records)
    assert [r["run_id"] for r in rows] == ["manual__2", "scheduled__1", "manual__0"]
    newest, running, refused = rows
    assert newest == {
        "run_id": "manual__2", "trigger": "manual", "partition": "ds=2024-01-03",
        "started": START.isoformat(), "duration_seconds": 42.0, "state": "failed", "rows": 7,
        "attempt": "a-try2", "outcome": "COMMITTED", "error": None, "audits": None,
    }
    assert (running["trigger"], running["partition"], running["duration_seconds"], running["outcome"]) == (
        "schedule", "whole table", None, "BEGUN"
    )
    # No attempt of this DAG for the run (refused before one began): the request's partition.
    assert (refused["partition"], refused["attempt"], refused["outcome"], refused["rows"]) == (
        "ds=2024-01-01", None, None, None
    )


def test_a_failed_attempt_shows_the_first_line_of_its_error() -> None:
    error = "\n  job failed: SourceTableNotFoundError: x\nmore"
    records = [attempt("a", "r", AttemptState.ABORTED, 1.0, error=error)]
    [row] = history_rows(DAG, [run("r", state="failed")], records)
    assert (row["outcome"], row["error"]) == ("ABORTED", "job failed: SourceTableNotFoundError: x")
    assert first_line(None) is None and first_line(" \n ") is None
