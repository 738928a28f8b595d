"""The graph against a real Airflow: SUSPEND/DROP ... CASCADE reach every DAG of a chain, and
refreshes run down a pipeline of FRESHNESS = DOWNSTREAM tables partition by partition (a chain
with a diamond, real Spark in the tasks).

Run alone: ``pytest tests/integration/test_mt_graph_e2e.py -x`` (Airflow starts once per session,
as for test_mt_workflow_e2e.py, whose fixtures this uses).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli.main import app
from airflow_provider_staged.discovery.embedded import AirflowInfo
from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger, WorkflowException
from airflow_provider_staged.staging.identifiers import TableIdentifier
from tests.integration.test_mt_workflow_e2e import Rest, rest, scheduler  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

UP, DOWN = TableIdentifier("e2e", "graph_up"), TableIdentifier("e2e", "graph_down")


def definition(table: TableIdentifier, query: str) -> str:
    return f"CREATE MATERIALIZED TABLE {table}\nFRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = FULL\nAS {query}"


def test_suspend_and_drop_cascade_reach_the_downstream_dag(
    scheduler: AirflowWorkflowScheduler, rest: Rest, definitions_dir: Path  # noqa: F811
) -> None:
    # No metastore: the status stays beside the definitions; the DAGs are what this is about.
    tables = MaterializedTables(scheduler, None)
    # Put in the folder by hand, the downstream DAG comes with the upstream one's parse (a second
    # CREATE waited for a parse of its own).
    (definitions_dir / "e2e__graph_down.sql").write_text(definition(DOWN, f"SELECT n FROM {UP}"))
    try:
        tables.create(definition(UP, "SELECT 1 AS n"))
        with pytest.raises(WorkflowException, match=r"graph_up not dropped: .* read it: e2e\.graph_down"):
            tables.drop(UP)
        # Suspended alone, the upstream shows on its dependent's describe.
        tables.suspend(UP)
        (note,) = tables.describe(DOWN, runs=0).suspended_inputs
        assert note.startswith(f"{UP}: SUSPENDED"), note
        tables.resume(UP)
        assert tables.describe(DOWN, runs=0).suspended_inputs == ()
        assert tables.suspend(UP, cascade=True) == [DOWN, UP]
        assert [rest.dag(dag_id_for(t)).json()["is_paused"] for t in (UP, DOWN)] == [True, True]
        assert tables.drop(UP, cascade=True) == [DOWN, UP]
        assert [rest.dag(dag_id_for(t)).status_code for t in (UP, DOWN)] == [404, 404]
    finally:
        for path in definitions_dir.glob("e2e__graph_*.sql"):
            path.unlink()


SOURCE = "e2e.chain_src"
# On the gateway: a task then starts no Spark of its own (~20 s each on a loaded machine).
DAY = ("PARTITIONED BY (ds) WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', "
       "'engine' = 'connect')")
PIPELINE = {  # source -> a -> (b, c) -> d: a three-layer chain whose last layer is a diamond
    "a": f"CREATE MATERIALIZED TABLE e2e.chain_a {DAY}\nFRESHNESS = INTERVAL '1' DAY\n"
         f"AS SELECT ds, n FROM {SOURCE}",
    "b": f"CREATE MATERIALIZED TABLE e2e.chain_b {DAY}\nFRESHNESS = DOWNSTREAM\n"
         "AS SELECT ds, n * 10 AS n FROM e2e.chain_a",
    "c": f"CREATE MATERIALIZED TABLE e2e.chain_c {DAY}\nFRESHNESS = DOWNSTREAM\n"
         "AS SELECT ds, n + 1 AS n FROM e2e.chain_a",
    "d": f"CREATE MATERIALIZED TABLE e2e.chain_d {DAY}\nFRESHNESS = DOWNSTREAM\n"
         "AS SELECT b.ds, b.n + c.n AS n FROM e2e.chain_b AS b JOIN e2e.chain_c AS c ON b.ds = c.ds",
}
# Keeps a schedule of its own: a periodic refresh of a day that chain_a has not committed waits
# 3 s for it, then skips the period.
OWN = (f"CREATE MATERIALIZED TABLE e2e.chain_own {DAY[:-1]}, 'upstream.wait-timeout' = '3 s', "
       "'upstream.missing-partition' = 'skip')\nFRESHNESS = INTERVAL '1' DAY\n"
       "AS SELECT ds, n FROM e2e.chain_a")


def runs(client: Rest, table: str) -> list[dict[str, Any]]:
    found = client.http.get(f"/dags/mt__e2e__chain_{table}/dagRuns", params={"order_by": "run_after"})
    return found.raise_for_status().json()["dag_runs"]


def task(client: Rest, table: str, run: dict[str, Any]) -> dict[str, Any]:
    """The refresh task instance of ``run``: its start and end (a run ends after its task's
    asset event has already started the runs downstream)."""
    path = f"/dags/mt__e2e__chain_{table}/dagRuns/{run['dag_run_id']}/taskInstances/refresh"
    return client.http.get(path).raise_for_status().json()


def wait_until(check: Any, what: str, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def test_refreshes_run_down_the_pipeline_partition_by_partition(
    airflow_server: AirflowInfo, scheduler: AirflowWorkflowScheduler, rest: Rest,  # noqa: F811
    definitions_dir: Path, metastore, spark, spark_gateway,
) -> None:
    """A failed refresh of a for a day starts nothing below it; once it succeeds (asked to
    propagate: staged mt refresh --downstream) b and c refresh that day once each, then d once,
    after both; a one-time refresh without --downstream stays in a; no other partition is
    touched anywhere. A day a commits while b is suspended is refreshed when b resumes."""
    started = time.monotonic()
    for name, text in {**PIPELINE, "own": OWN}.items():
        (definitions_dir / f"e2e__chain_{name}.sql").write_text(text)
    # While Airflow parses them: the source, under another name until a's first refresh failed
    # (a view: no Spark job here, only the metastore).
    spark.sql("CREATE DATABASE IF NOT EXISTS e2e")
    for view in (SOURCE, f"{SOURCE}_later"):
        spark.sql(f"DROP VIEW IF EXISTS {view}")
    spark.sql(f"CREATE VIEW {SOURCE}_later AS SELECT * FROM VALUES ('2024-01-01', 1), ('2024-01-02', 2), "
              "('2024-01-03', 3) AS source(ds, n)")
    tables = MaterializedTables(scheduler, None)
    try:
        wait_until(lambda: all(rest.dag(f"mt__e2e__chain_{t}").status_code == 200
                               for t in [*PIPELINE, "own"]), "the five DAGs")
        a, a_dag = TableIdentifier("e2e", "chain_a"), "mt__e2e__chain_a"
        # 1. The scheduled refresh of 2024-01-02 fails (its source is missing): no event. Beside
        # it, the scheduled refresh of a table with its own schedule, of a day chain_a has not
        # committed: it waits 3 s, then skips that day.
        failed = tables.refresh(a, RefreshTrigger(is_periodic=True, schedule_time="2024-01-03 00:00:00"))
        own = tables.refresh(TableIdentifier("e2e", "chain_own"),
                             RefreshTrigger(is_periodic=True, schedule_time="2024-01-04 00:00:00"))
        assert rest.wait_for_run(a_dag, failed)["state"] == "failed"
        spark.sql(f"ALTER VIEW {SOURCE}_later RENAME TO {SOURCE}")
        # 2. 2024-01-02 again, asked to propagate (staged mt refresh --downstream): the catch-up.
        user, password = airflow_server.credentials("admin")
        result = CliRunner().invoke(app, [
            "mt", "--endpoint", airflow_server.endpoint, "--definitions-dir", str(definitions_dir),
            "--metastore-uri", metastore.uri, "--username", user, "--password", password,
            "refresh", "e2e.chain_a", "--partition", "ds=2024-01-02", "--downstream", "--wait", "240"])
        assert result.exit_code == 0, result.output
        # 3. Beside d (Airflow here runs two tasks at a time): a one-time refresh without
        # --downstream, which stays in a.
        wait_until(lambda: all([r["state"] for r in runs(rest, t)] in (["success"], ["failed"])
                               for t in "bc"), "b's and c's runs")
        alone = tables.refresh(a, RefreshTrigger(static_partitions={"ds": "2024-01-01"}))
        wait_until(lambda: [r["state"] for r in runs(rest, "d")] in (["success"], ["failed"]), "d's run")
        assert rest.wait_for_run(a_dag, alone)["state"] == "success"
        rest.wait_for_run("mt__e2e__chain_own", own)
        assert rest.task_states("mt__e2e__chain_own", own) == {"refresh": "skipped"}
        # It waited its 3 s (in its process: a wait that short is never deferred), then skipped.
        log = rest.http.get(f"/dags/mt__e2e__chain_own/dagRuns/{own}/taskInstances/refresh/logs/1",
                            params={"full_content": "true"}, headers={"Accept": "application/json"})
        records = log.raise_for_status().json()["content"]
        events = [str(r.get("event")) for r in records if isinstance(r, dict)]
        assert any("(e2e.chain_a): waiting up to 3s" in e for e in events), events
        below = {t: runs(rest, t) for t in "bcd"}
        for table, found in below.items():  # exactly one run each, of that day, started by its inputs
            assert [(r["partition_key"], r["run_type"], r["state"]) for r in found] == [
                ("ds=2024-01-02", "asset_triggered", "success")], table
        a_task = task(rest, "a", runs(rest, "a")[1])
        b, c, d = (task(rest, t, below[t][0]) for t in "bcd")
        assert a_task["end_date"] <= min(b["start_date"], c["start_date"])
        assert max(b["end_date"], c["end_date"]) <= d["start_date"]  # d after both
        spark.catalog.clearCache()
        partitions = {t: sorted(r.ds for r in spark.sql(f"SELECT DISTINCT ds FROM e2e.chain_{t}").collect())
                      for t in PIPELINE}
        assert partitions == {"a": ["2024-01-01", "2024-01-02"], "b": ["2024-01-02"], "c": ["2024-01-02"],
                              "d": ["2024-01-02"]}
        assert [tuple(r) for r in spark.table("e2e.chain_d").collect()] == [(23, "2024-01-02")]

        # 4. b suspended, a commits 2024-01-03 asked to propagate: c follows, b (paused) gets no run
        # from Airflow and d waits for b. RESUME of b refreshes the day it missed, and d follows;
        # the one-time refresh of 2024-01-01 (not propagated) stays missed, as it was meant to.
        chain_b = TableIdentifier("e2e", "chain_b")
        tables.suspend(chain_b)
        third = tables.refresh(a, RefreshTrigger(static_partitions={"ds": "2024-01-03"},
                                                 refresh_downstream=True))
        assert rest.wait_for_run(a_dag, third)["state"] == "success"
        wait_until(lambda: [r["state"] for r in runs(rest, "c")] == ["success", "success"], "c's 2024-01-03")
        assert (len(runs(rest, "b")), len(runs(rest, "d"))) == (1, 1)
        tables.resume(chain_b)
        ended = ("success", "failed")
        wait_until(lambda: len(found := runs(rest, "b")) == 2 and found[1]["state"] in ended, "b's catch-up")
        wait_until(lambda: len(found := runs(rest, "d")) == 2 and found[1]["state"] in ended, "d after b")
        caught_up = runs(rest, "b")[1]
        assert caught_up["state"] == "success"
        assert caught_up["conf"]["staticPartitions"] == {"ds": "2024-01-03"}
        assert [(r["partition_key"], r["run_type"], r["state"]) for r in runs(rest, "d")][1] == (
            "ds=2024-01-03", "asset_triggered", "success")
        spark.catalog.clearCache()
        assert sorted(tuple(r) for r in spark.table("e2e.chain_d").collect()) == [
            (23, "2024-01-02"), (34, "2024-01-03")]
        assert sorted(r.ds for r in spark.sql("SELECT DISTINCT ds FROM e2e.chain_b").collect()) == [
            "2024-01-02", "2024-01-03"]
    finally:
        for path in definitions_dir.glob("e2e__chain_*.sql"):
            path.unlink()
        print(f"pipeline test: {time.monotonic() - started:.1f}s")
