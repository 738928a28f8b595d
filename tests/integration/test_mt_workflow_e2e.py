"""FLIP-448 workflow scheduler against a real Airflow (api-server + scheduler + dag-processor).

Run alone: ``pytest tests/integration/test_mt_workflow_e2e.py -x``. Airflow starts once per
session (``db migrate`` + three processes: ~20 s on an idle machine, 2-3 min on a busy one).
Every check of Airflow's state goes through REST API v2 with plain httpx, independently of the
apache-airflow-client calls the scheduler itself makes.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from airflow_provider_staged.airflow.assets import table_asset_uri
from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.cli.main import app
from airflow_provider_staged.discovery.embedded import AirflowInfo
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.materialized.catalog_status import (
    REFRESH_HANDLER_KEY,
    REFRESH_STATUS_KEY,
    CatalogStatusStore,
    workflow_options,
)
from airflow_provider_staged.materialized.definition import load_definition
from airflow_provider_staged.materialized.propagation import partition_key
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreatePeriodicRefreshWorkflow,
    DeleteRefreshWorkflow,
    ModifyRefreshWorkflowCronExpr,
    RefreshStatus,
    RefreshTrigger,
    ResumeRefreshWorkflow,
    SuspendRefreshWorkflow,
    WorkflowException,
    create_workflow_scheduler,
)
from airflow_provider_staged.staging.attempts import is_quarantined
from airflow_provider_staged.staging.identifiers import TableIdentifier
from tests.fixtures.browser import log_in, trigger_in_form

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 300
# On a loaded machine Airflow on SQLite can stall every request for tens of seconds while one
# process holds the database lock: generous timeouts, the test is about behaviour not speed.
HTTP_TIMEOUT = 180


def definition_text(table: str) -> str:
    return f"""-- daily revenue
CREATE MATERIALIZED TABLE e2e.{table}
COMMENT 'orders per day'
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM e2e.orders GROUP BY ds;
"""


class Rest:
    """Minimal REST API v2 client for assertions."""

    def __init__(self, server: AirflowInfo) -> None:
        self.http = httpx.Client(
            base_url=server.endpoint + "/api/v2",
            headers={"Authorization": f"Bearer {api_token(server)}"},
            timeout=HTTP_TIMEOUT,
        )

    def dag(self, dag_id: str) -> httpx.Response:
        return self.http.get(f"/dags/{dag_id}")

    def wait_for_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            run = self.http.get(f"/dags/{dag_id}/dagRuns/{run_id}").raise_for_status().json()
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(1)
        raise AssertionError(f"run {run_id} of {dag_id} not finished after {RUN_TIMEOUT}s")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        tis = self.http.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances").raise_for_status().json()
        return {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}


@pytest.fixture(scope="module")
def rest(airflow_server: AirflowInfo) -> Iterator[Rest]:
    client = Rest(airflow_server)
    yield client
    client.http.close()


@pytest.fixture
def scheduler(airflow_server: AirflowInfo, definitions_dir: Path) -> Iterator[AirflowWorkflowScheduler]:
    config = {
        "workflow-scheduler.type": "airflow",
        "workflow-scheduler.airflow.endpoint": airflow_server.endpoint,
        "workflow-scheduler.airflow.definitions-dir": str(definitions_dir),
        "workflow-scheduler.airflow.parse-timeout": "90",
    }
    user, password = airflow_server.credentials("admin")
    config |= {"workflow-scheduler.airflow.username": user, "workflow-scheduler.airflow.password": password}
    with create_workflow_scheduler(config) as opened:
        assert isinstance(opened, AirflowWorkflowScheduler)
        yield opened


def test_workflow_lifecycle(scheduler: AirflowWorkflowScheduler, rest: Rest, definitions_dir: Path) -> None:
    identifier = TableIdentifier("e2e", "orders_daily")
    handler = scheduler.create_refresh_workflow(
        CreatePeriodicRefreshWorkflow(
            identifier, definition_text("orders_daily"), dynamic_options={"compression": "zstd"}
        )
    )
    assert handler.dag_id == "mt__e2e__orders_daily"
    definition_file = definitions_dir / "e2e__orders_daily.sql"
    assert definition_file.read_text() == definition_text("orders_daily")
    dag = rest.dag(handler.dag_id).json()
    assert dag["is_paused"] is False  # created ACTIVATED
    assert dag["timetable_summary"] == "0 0 * * *"  # from FRESHNESS = INTERVAL '1' DAY

    serializer = scheduler.get_refresh_handler_serializer()
    assert serializer.deserialize(serializer.serialize(handler)) == handler

    with pytest.raises(WorkflowException, match="already exists"):
        scheduler.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(identifier, definition_text("orders_daily"))
        )

    trigger = RefreshTrigger(is_periodic=False, static_partitions={"ds": "2024-01-01"},
                             execution_config={"spark.sql.shuffle.partitions": "2"})
    run_id = scheduler.trigger_refresh(handler, trigger)
    run = rest.wait_for_run(handler.dag_id, run_id)
    assert run["conf"] == {
        "isPeriodic": False,
        "scheduleTime": None,
        "dynamicOptions": {},
        "staticPartitions": {"ds": "2024-01-01"},
        "executionConfig": {"spark.sql.shuffle.partitions": "2"},
    }
    assert run["logical_date"] is None
    assert set(rest.task_states(handler.dag_id, run_id)) == {"refresh"}

    scheduler.modify_refresh_workflow(SuspendRefreshWorkflow(handler))
    assert rest.dag(handler.dag_id).json()["is_paused"] is True

    scheduler.modify_refresh_workflow(
        ResumeRefreshWorkflow(handler, execution_config={"spark.sql.shuffle.partitions": "4"})
    )
    assert rest.dag(handler.dag_id).json()["is_paused"] is False
    # Only the given map is replaced: the dynamic options set on create stay.
    assert workflow_options(definition_file) == (
        {"compression": "zstd"}, {"spark.sql.shuffle.partitions": "4"}
    )

    scheduler.modify_refresh_workflow(ModifyRefreshWorkflowCronExpr(handler, "30 2 * * *"))
    assert rest.dag(handler.dag_id).json()["timetable_summary"] == "30 2 * * *"
    assert "'schedule.cron' = '30 2 * * *'" in definition_file.read_text()

    with pytest.raises(WorkflowException, match="invalid cron"):
        scheduler.modify_refresh_workflow(ModifyRefreshWorkflowCronExpr(handler, "every day"))
    assert rest.dag(handler.dag_id).json()["timetable_summary"] == "30 2 * * *"  # unchanged

    scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))
    assert not definition_file.exists()
    assert rest.dag(handler.dag_id).status_code == 404
    time.sleep(11)  # two more parse cycles of the dag-processor: it must not come back
    assert rest.dag(handler.dag_id).status_code == 404
    scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))  # idempotent


def test_bad_definition_changes_nothing(scheduler: AirflowWorkflowScheduler, definitions_dir: Path) -> None:
    before = sorted(p.name for p in definitions_dir.iterdir())
    bad = definition_text("bad_minutes").replace("INTERVAL '1' DAY", "INTERVAL '7' MINUTE")
    with pytest.raises(WorkflowException, match=r"e2e__bad_minutes\.sql:6: FRESHNESS"):
        scheduler.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(TableIdentifier("e2e", "bad_minutes"), bad)
        )
    with pytest.raises(WorkflowException, match=r"creates e2e\.orders_daily, not e2e\.other"):
        scheduler.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(TableIdentifier("e2e", "other"), definition_text("orders_daily"))
        )
    assert sorted(p.name for p in definitions_dir.iterdir()) == before

    # Airflow does not show the DAG in time: the error says so and the definition is taken back.
    impatient = AirflowWorkflowScheduler(scheduler.endpoint, definitions_dir, scheduler.username,
                                         scheduler.password, parse_timeout=0.1)
    with impatient, pytest.raises(WorkflowException, match="did not show the new DAG mt__e2e__too_slow"):
        impatient.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(TableIdentifier("e2e", "too_slow"), definition_text("too_slow"))
        )
    assert sorted(p.name for p in definitions_dir.iterdir()) == before


def test_status_kept_beside_definition_until_table_exists(
    scheduler: AirflowWorkflowScheduler, metastore, definitions_dir: Path
) -> None:
    """Before the first refresh there is no table: the status lives in the state file."""
    identifier = TableIdentifier("e2e", "not_yet_refreshed")
    store = CatalogStatusStore(metastore.uri)
    handler = scheduler.create_refresh_workflow(
        CreatePeriodicRefreshWorkflow(identifier, definition_text("not_yet_refreshed"))
    )
    path = scheduler.definition_file(handler.dag_id)
    try:
        serialized = scheduler.get_refresh_handler_serializer().serialize(handler).decode()
        assert store.save(identifier, path, RefreshStatus.ACTIVATED, serialized) == "file"
        status = store.load(identifier, path)
        assert (status.refresh_status, status.stored_in) == (RefreshStatus.ACTIVATED, "file")
        assert json.loads(status.refresh_handler)["dag_id"] == handler.dag_id
    finally:
        scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))
    assert not path.exists()


@pytest.mark.skipif(
    importlib.util.find_spec("airflow_provider_staged.materialized.refresh") is None,
    reason="needs the refresh execution (materialized/refresh.py, written by the lead)",
)
def test_triggered_refresh_commits_partition(
    scheduler: AirflowWorkflowScheduler, rest: Rest, metastore, spark
) -> None:
    """The refresh call through Airflow commits exactly the requested partition.

    Source data is written with the session's Spark into the metastore the Airflow tasks reach
    through ``STAGED_HOME`` (set by the ``airflow_server`` fixture).
    """
    spark.sql("CREATE DATABASE IF NOT EXISTS e2e")
    spark.createDataFrame(
        [("2024-01-01", 10.0), ("2024-01-01", 5.0), ("2024-01-02", 7.0)], "ds string, amount double"
    ).write.mode("overwrite").saveAsTable("e2e.orders")
    identifier = TableIdentifier("e2e", "orders_refreshed")
    handler = scheduler.create_refresh_workflow(
        CreatePeriodicRefreshWorkflow(identifier, definition_text("orders_refreshed"))
    )
    path = scheduler.definition_file(handler.dag_id)
    store = CatalogStatusStore(metastore.uri)
    serialized = scheduler.get_refresh_handler_serializer().serialize(handler).decode()
    store.save(identifier, path, RefreshStatus.ACTIVATED, serialized)
    try:
        run_id = scheduler.trigger_refresh(
            handler, RefreshTrigger(is_periodic=False, static_partitions={"ds": "2024-01-01"})
        )
        run = rest.wait_for_run(handler.dag_id, run_id)
        assert run["state"] == "success", rest.task_states(handler.dag_id, run_id)
        spark.catalog.refreshTable(identifier.name)
        rows = spark.table(identifier.name).collect()
        assert [(r.ds, r.orders, r.revenue) for r in rows] == [("2024-01-01", 2, 15.0)]
        # The table now exists: the status moves from the state file into its parameters.
        status = store.load(identifier, path)
        assert (status.refresh_status, status.stored_in) == (RefreshStatus.ACTIVATED, "table")
        with MetastoreClient(metastore.uri) as client:
            params = client.get_table("e2e", "orders_refreshed").parameters
        assert params[REFRESH_STATUS_KEY] == "ACTIVATED"
        assert json.loads(params[REFRESH_HANDLER_KEY])["dag_id"] == handler.dag_id
    finally:
        scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))


def test_cli_commands(
    airflow_server: AirflowInfo, definitions_dir: Path, metastore, rest: Rest, tmp_path: Path
) -> None:
    """``staged mt`` create -> describe -> refresh (bad, then good) -> suspend -> list -> drop."""
    from typer.testing import CliRunner

    from airflow_provider_staged.cli.main import app

    runner = CliRunner()
    user, password = airflow_server.credentials("admin")
    base = ["mt", "--endpoint", airflow_server.endpoint, "--definitions-dir", str(definitions_dir),
            "--metastore-uri", metastore.uri, "--username", user, "--password", password]

    def mt(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, [*base, *args], env={"COLUMNS": "200"})
        assert result.exit_code == code, result.output
        return result.output

    source = tmp_path / "orders_cli.sql"
    source.write_text(definition_text("orders_cli"))
    # --no-check: this test drives Airflow (test_mt_create_check tests the check, in a process of
    # its own: the check's Spark session would otherwise start in this one).
    created = mt("create", str(source), "--cron", "5 1 * * *", "--no-check",
                 "--execution-config", "spark.sql.shuffle.partitions=1")
    assert "created Airflow DAG mt__e2e__orders_cli" in created
    described = mt("describe", "e2e.orders_cli")
    assert "5 1 * * *" in described and "ACTIVATED (stored in file)" in described
    assert '{"spark.sql.shuffle.partitions": "1"}' in described

    # A bad refresh call is refused before anything is triggered.
    assert "not triggered" in mt("refresh", "e2e.orders_cli", "--partition", "ds=x' OR 1=1", code=1)
    assert "unknown partition column" in mt("refresh", "e2e.orders_cli", "--partition", "dt=2024-01-01",
                                            code=1)
    # The scheduler may already have started the run of the latest past slot (Airflow 3's
    # run_immediately): only a manual run would come from a refresh call.
    runs = rest.http.get("/dags/mt__e2e__orders_cli/dagRuns").json()["dag_runs"]
    assert [run["run_id"] for run in runs if run["run_type"] == "manual"] == []
    output = mt("refresh", "e2e.orders_cli", "--schedule-time", "2024-01-02 00:00:00")
    run_id = output.split("run ", 1)[1].split()[0]
    run = rest.wait_for_run("mt__e2e__orders_cli", run_id)
    assert run["conf"]["isPeriodic"] is True and run["conf"]["scheduleTime"] == "2024-01-02 00:00:00"

    mt("suspend", "e2e.orders_cli")
    assert rest.dag("mt__e2e__orders_cli").json()["is_paused"] is True
    listed = mt("list")
    assert "e2e.orders_cli" in listed and "SUSPENDED" in listed
    mt("drop", "e2e.orders_cli")
    assert rest.dag("mt__e2e__orders_cli").status_code == 404
    assert "no materialized table e2e.orders_cli" in mt("describe", "e2e.orders_cli", code=1)


def expect_definition(table: str) -> str:
    """Two EXPECT constraints; the schedule's slot 12 hours ago, so Airflow starts no run of its own."""
    slot = datetime.now(timezone.utc) - timedelta(hours=12)
    return f"""CREATE MATERIALIZED TABLE e2e.{table} (
  CONSTRAINT positive EXPECT (amount >= 0) ON VIOLATION FAIL UPDATE,
  CONSTRAINT has_region EXPECT (region IS NOT NULL) ON VIOLATION DROP ROW
)
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd',
      'schedule.cron' = '{slot.minute} {slot.hour} * * *')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, region, amount FROM e2e.expect_src;
"""


def test_expect_constraints_keep_a_failing_partition_and_drop_rows_of_a_passing_one(
    scheduler: AirflowWorkflowScheduler, rest: Rest, spark, metastore, staged_home: Path,
    airflow_server: AirflowInfo, browser,
) -> None:
    """Refreshes triggered from the Trigger form in a browser, each partition typed, after ds=2024-01-01
    was refreshed (in this process, through the task's own code: one Spark start less) and its
    source gained a negative amount: its refresh fails FAIL UPDATE and the partition keeps its
    rows; ds=2024-01-02's refresh passes, DROP ROW leaving out exactly its row without a region,
    counted in the task log. Then the held version of ds=2024-01-01 is published anyway
    (``staged publish``), and Airflow gets the table's asset event for that partition."""
    from airflow_provider_staged.engine.runners import EmbeddedEngine
    from airflow_provider_staged.materialized.params import parse_refresh_request
    from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
    from airflow_provider_staged.staging.settings import StagedSettings

    source = "ds string, region string, amount double"
    spark.sql("CREATE DATABASE IF NOT EXISTS e2e")
    spark.createDataFrame([("2024-01-01", "eu", 10.0), ("2024-01-01", "us", 5.0)], source) \
        .write.mode("overwrite").saveAsTable("e2e.expect_src")
    identifier = TableIdentifier("e2e", "expect_orders")
    handler = scheduler.create_refresh_workflow(
        CreatePeriodicRefreshWorkflow(identifier, expect_definition(identifier.table)))
    dag_id = handler.dag_id

    class TestSpark(EmbeddedEngine):  # the task's engine on this test's session
        def session(self) -> Any:
            return spark

    definition = load_definition(scheduler.definition_file(dag_id))
    settings = StagedSettings.from_fields(metastore.host, metastore.port, {"warehouse": metastore.warehouse},
                                          staged_home)
    request = parse_refresh_request({"ds": "2024-01-01"}, definition, datetime.now(timezone.utc))
    run_refresh(definition, request, settings, staged_refresh(definition, request, settings, None),
                TestSpark(settings))

    def refresh(ds: str) -> str:
        """The run the Trigger form makes for ``ds``."""
        runs = f"/dags/{dag_id}/dagRuns"
        before = {run["dag_run_id"] for run in rest.http.get(runs).raise_for_status().json()["dag_runs"]}
        trigger_in_form(browser, airflow_server.endpoint, dag_id, {"ds": ds})
        (made,) = [run for run in rest.http.get(runs).raise_for_status().json()["dag_runs"]
                   if run["dag_run_id"] not in before]
        assert made["conf"]["ds"] == ds, made["conf"]
        return made["dag_run_id"]

    def log(run_id: str) -> list[str]:
        response = rest.http.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/refresh/logs/1",
                                 params={"full_content": "true"}, headers={"Accept": "application/json"})
        records = response.raise_for_status().json()["content"]
        return [str(r.get("event")) for r in records if isinstance(r, dict)]

    def table() -> dict[str, list[tuple[str, float]]]:
        spark.catalog.refreshTable("e2e.expect_orders")
        found: dict[str, list[tuple[str, float]]] = {}
        for row in spark.table("e2e.expect_orders").collect():
            found.setdefault(row.ds, []).append((row.region, row.amount))
        return {ds: sorted(rows) for ds, rows in found.items()}

    log_in(browser, airflow_server.endpoint, *airflow_server.credentials("admin"))
    try:
        before = {"2024-01-01": [("eu", 10.0), ("us", 5.0)]}
        assert table() == before
        spark.createDataFrame([
            ("2024-01-01", "eu", 10.0), ("2024-01-01", "us", 5.0), ("2024-01-01", "eu", -3.0),
            ("2024-01-02", "eu", 7.0), ("2024-01-02", None, 2.0), ("2024-01-02", "us", 1.0),
        ], source).write.mode("overwrite").saveAsTable("e2e.expect_src")
        failing, passing = refresh("2024-01-01"), refresh("2024-01-02")  # one at a time (max_active_runs)

        assert rest.wait_for_run(dag_id, failing)["state"] == "failed"
        lines = log(failing)
        assert "audit positive [row, fail]: FAILED, 1 failing" in lines, lines
        assert any("audit(s) failed on e2e.expect_orders: positive (1 failing row(s)" in line
                   for line in lines), lines
        assert not any(line.startswith("Refresh committed") for line in lines)
        assert rest.wait_for_run(dag_id, passing)["state"] == "success", rest.task_states(dag_id, passing)
        lines = log(passing)
        assert "audit has_region [row, drop]: dropped 1 row(s)" in lines, lines
        assert "audit positive [row, fail]: passed, 0 failing" in lines, lines
        (committed,) = [line for line in lines if line.startswith("Refresh committed")]
        assert committed.endswith("2 rows (1 row dropped by DROP ROW constraints)"), committed
        # The failed partition keeps its rows; the passing one lacks exactly the dropped row.
        assert table() == {**before, "2024-01-02": [("eu", 7.0), ("us", 1.0)]}
        assert rest.task_states(dag_id, failing) == {"refresh": "failed"}  # no retry of the same data

        # A person looks at the held version and publishes it anyway (`staged publish`): readers get
        # its rows, and Airflow the table's asset event for that partition, as after a task's commit.
        (held,) = [record for record in settings.journal.records()
                   if record.target == identifier.name and is_quarantined(record)]
        user, password = airflow_server.credentials("admin")
        published = CliRunner().invoke(
            app, ["publish", held.attempt_id, "--endpoint", airflow_server.endpoint, "--username", user,
                  "--password", password], env={"STAGED_HOME": str(staged_home), "COLUMNS": "400"})
        assert published.exit_code == 0, published.output
        assert password not in published.output
        assert table()["2024-01-01"] == [("eu", -3.0), ("eu", 10.0), ("us", 5.0)]
        uri = table_asset_uri(metastore.uri, identifier)
        (asset,) = [a for a in rest.http.get("/assets", params={"uri_pattern": uri}).json()["assets"]
                    if a["uri"] == uri]
        events = rest.http.get("/assets/events", params={"asset_id": asset["id"]}).json()["asset_events"]
        (event,) = [e for e in events if e["extra"].get("attempt_id") == held.attempt_id]
        assert event["extra"]["published_anyway"] is True
        assert event["partition_key"] == partition_key(["ds"], {"ds": "2024-01-01"})
        assert f"asset event {event['id']} of {uri} (partition key" in published.output
    finally:
        scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))
