"""Auto-suspend on the session's running Airflow: real scheduled runs, real failures.

A table whose source is missing fails every refresh. Its definition catches up daily slots
from five days ago, so the scheduler makes scheduled runs back to back. After the fifth failed
one the refresh task suspends the table through the workflow scheduler; RESUME lets it run
again; a manual failure is not counted and a success resets the count.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from airflow_provider_staged.discovery.embedded import AirflowInfo
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.materialized.catalog_status import CatalogStatus
from airflow_provider_staged.materialized.failure_streak import SUSPENDED_DUE_TO_ERRORS, FailureStreak
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
from airflow_provider_staged.materialized.workflow.auto_suspend import SCHEDULER_CONN_ID
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger
from airflow_provider_staged.staging.identifiers import TableIdentifier

pytestmark = pytest.mark.slow

TIMEOUT = 600
HTTP_TIMEOUT = 180


def wait_for(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


@pytest.fixture
def api(airflow_server: AirflowInfo) -> Iterator[httpx.Client]:
    """REST API v2 as the admin. The refresh tasks log in with the connection that
    ``start_airflow`` registered (checked here: auto-suspend depends on it)."""
    client = httpx.Client(base_url=airflow_server.endpoint + "/api/v2", timeout=HTTP_TIMEOUT,
                          headers={"Authorization": f"Bearer {api_token(airflow_server)}"})
    connection = client.get(f"/connections/{SCHEDULER_CONN_ID}").raise_for_status().json()
    assert (connection["host"], connection["login"]) == (airflow_server.endpoint, "admin")
    yield client
    client.close()


def test_five_failed_scheduled_refreshes_suspend_the_table(
    airflow_server: AirflowInfo, definitions_dir: Path, metastore, spark, api: httpx.Client
) -> None:
    name = f"suspends_{uuid.uuid4().hex[:6]}"
    source = f"e2e.{name}_src"
    # Six daily slots to catch up: from five days ago to today's.
    start = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=5)).strftime("%Y-%m-%d")
    definition = f"""CREATE MATERIALIZED TABLE e2e.{name}
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'catchup' = 'true', 'start-date' = '{start}')
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, count(*) AS n FROM {source} GROUP BY ds;
"""
    spark.sql("CREATE DATABASE IF NOT EXISTS e2e")
    identifier, dag_id = TableIdentifier("e2e", name), f"mt__e2e__{name}"
    user, password = airflow_server.credentials("admin")
    scheduler = AirflowWorkflowScheduler(airflow_server.endpoint, definitions_dir, user, password,
                                         parse_timeout=90)

    def runs(**params: Any) -> list[dict[str, Any]]:
        found = api.get(f"/dags/{dag_id}/dagRuns", params={"limit": 100, **params})
        return found.raise_for_status().json()["dag_runs"]

    def ended(run_type: str) -> list[str]:
        return [r["state"] for r in sorted(runs(run_type=run_type), key=lambda r: r["run_after"])
                if r["state"] in ("success", "failed")]

    def task_states(run_type: str) -> list[str]:
        return [api.get(f"/dags/{dag_id}/dagRuns/{r['dag_run_id']}/taskInstances/refresh").json()["state"]
                for r in sorted(runs(run_type=run_type), key=lambda r: r["run_after"])]

    def status() -> CatalogStatus:
        return tables.store.load(identifier, scheduler.definition_file(dag_id))

    with scheduler:
        tables = MaterializedTables(scheduler, metastore.uri)
        tables.create(definition)
        try:
            # Five scheduled runs fail; the fifth's failure callback pauses the DAG before
            # the scheduler can make a sixth.
            wait_for("the DAG paused", lambda: api.get(f"/dags/{dag_id}").json()["is_paused"])
            # The scheduler ends a paused DAG's last run only in a periodic check: its task
            # says how it went, once its process has exited.
            wait_for("five failed refresh tasks", lambda: task_states("scheduled") == ["failed"] * 5, 300)
            suspended = status()
            assert suspended.status_text() == f"SUSPENDED ({SUSPENDED_DUE_TO_ERRORS})"
            assert suspended.failures.count == 5
            # Found missing before Spark started (refresh.check_sources).
            assert f"[TABLE_OR_VIEW_NOT_FOUND] table {source}, read by" in suspended.failures.last_failure
            description = wait_for(  # the next parse of the factory file shows it
                "the reason in the DAG description",
                lambda: (d := api.get(f"/dags/{dag_id}").json()["description"] or "")
                and SUSPENDED_DUE_TO_ERRORS in d and d,
            )
            assert "after 5 consecutive failed scheduled refreshes" in description
            cli = mt_cli(airflow_server, definitions_dir, metastore.uri)
            assert f"SUSPENDED ({SUSPENDED_DUE_TO_ERRORS})" in cli("describe", identifier.name)
            assert "5 in a row; last: scheduled__" in cli("describe", identifier.name)
            assert f"SUSPENDED ({SUSPENDED_DUE_TO_ERRORS})" in cli("list")

            # RESUME clears the reason and the count, and the schedule runs again: the slot
            # left (today's, due before the pause) runs, fails and counts from zero.
            tables.resume(identifier)
            assert (status().status_text(), status().failures) == ("ACTIVATED", FailureStreak())
            wait_for("the last slot's run", lambda: len(ended("scheduled")) == 6 and not runs(
                state=["queued", "running"]) and _no_slot_due(api.get(f"/dags/{dag_id}").json()))
            assert ended("scheduled") == task_states("scheduled") == ["failed"] * 6
            assert (status().failures.count, status().refresh_status.value) == (1, "ACTIVATED")
            # A manual refresh that fails is not counted.
            trigger = RefreshTrigger(static_partitions={"ds": start})
            run_id = tables.refresh(identifier, trigger)
            assert tables.wait_for_refresh(identifier, run_id, TIMEOUT) == "failed"
            assert status().failures.count == 1

            # Any success ends the streak, a manual one too.
            spark.createDataFrame([(start, 1)], "ds string, x int").write.saveAsTable(source)
            run_id = tables.refresh(identifier, trigger)
            assert tables.wait_for_refresh(identifier, run_id, TIMEOUT) == "success"
            after = status()
            assert (after.failures, after.status_text(), after.stored_in) == (
                FailureStreak(), "ACTIVATED", "table")
        finally:
            tables.drop(identifier)
            spark.sql(f"DROP TABLE IF EXISTS {source}")


def _no_slot_due(dag: dict[str, Any]) -> bool:
    """No catch-up slot left: the next run is due in the future."""
    due = dag.get("next_dagrun_run_after")
    return due is not None and dt.datetime.fromisoformat(due) > dt.datetime.now(dt.timezone.utc)


def mt_cli(airflow_server: AirflowInfo, definitions_dir: Path, metastore_uri: str) -> Callable[..., str]:
    from airflow_provider_staged.cli.main import app

    user, password = airflow_server.credentials("admin")
    base = ["mt", "--endpoint", airflow_server.endpoint, "--definitions-dir", str(definitions_dir),
            "--metastore-uri", metastore_uri, "--username", user, "--password", password]

    def run(*args: str) -> str:
        result = CliRunner().invoke(app, [*base, *args], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        return result.output

    return run
