"""Click -> committed on the README's stack: a one-partition refresh triggered as the Trigger form
and as the Materialized tables page trigger it, until its attempt is COMMITTED.

The stack is README command 1's: ``staged up`` in the repository (its ``dags/``, the default
engine: the stack's gateway), ``staged create-database``, ``staged mt create`` of the demo's
``dags/materialized/orders_daily.sql`` over a seeded ``raw.orders``; all through the real CLI under a temp
``STAGED_HOME``. Two arms, alternating (``_common.arm_order``) after one uncounted warm-up round:

* ``form``: the request the Trigger form sends, ``POST /api/v2/dags/{dag}/dagRuns`` with
  ``{"logical_date": null, "conf": {"ds": ...}}`` (a plain REST call: on SQLite its run starts in
  the second after ``run_after``, see the README's "Trigger latency");
* ``page``: the page's refresh button, ``POST /materialized-tables/api/tables/{table}/refresh``
  with ``{"partitions": {"ds": ...}}`` (through the workflow scheduler, as ``staged mt refresh``).

A run's time: from just before the request to the COMMITTED time in the attempt's journal record
(the same clock); each run waits until the previous one ended. Target: p50 <= 5 s per arm. Also
prints each arm's phase breakdown (``bench_gateway.print_breakdown``: the DAG run's and task
instance's times, the task log, the journal).

Run it alone on the machine (it starts the stack):
``.venv/bin/python benchmarks/bench_click_to_commit.py`` (``--reps 3`` for a smoke run); ``staged down``
stops everything at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _common import alternating_rounds, latency_line, load
from bench_gateway import print_breakdown, timeline
from bench_gateway import task_log_marks as log_marks
from bench_local_stack import _staged as staged

from airflow_provider_staged.discovery.embedded import AirflowInfo, gateway_status
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.local.stack import stack_status
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal

TARGET_SECONDS = 5.0
TABLE = "analytics.orders_daily"
DAG_ID = "mt__analytics__orders_daily"
PARTITION = "2024-01-02"
# The demo's definition (scripts/demo.sh), over a small raw.orders seeded through the gateway.
DEFINITION = Path(__file__).resolve().parents[1] / "dags" / "materialized" / "orders_daily.sql"
SEED = ("CREATE TABLE raw.orders USING parquet AS SELECT date_format(date_add(DATE'2024-01-01', "
        "CAST(id % 3 AS INT)), 'yyyy-MM-dd') AS ds, CAST(id AS DOUBLE) AS amount FROM range(300)")
RUN_TIMEOUT = 600.0


class ReadmeStack:
    """``staged up`` + the demo's materialized table under a temp home; ``close`` stops it all."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="bench-click-"))
        try:
            self.set_up()
        except BaseException:  # a failed set-up leaves no stack running
            self.close()
            raise

    def set_up(self) -> None:
        started = time.perf_counter()
        staged(self.home, "up")
        status = stack_status(self.home)
        if status.airflow is None or status.gateway is None:
            raise SystemExit(f"staged up left no Airflow or gateway: {json.dumps(status.as_dict())}")
        self.airflow: AirflowInfo = status.airflow
        print(f"staged up in {time.perf_counter() - started:.0f}s (refresh engine {status.engine}); "
              f"load average {load()}", flush=True)
        staged(self.home, "create-database", "raw", "analytics")
        self.seed()
        staged(self.home, "mt", "create", str(DEFINITION))
        headers = {"Authorization": f"Bearer {api_token(self.airflow)}"}
        self.http = httpx.Client(base_url=self.airflow.endpoint, timeout=120, headers=headers)
        self.journal = FileJournal(self.home / "journal")
        self.timelines: dict[str, list[tuple[float, dict[str, float]]]] = {}

    def seed(self) -> None:
        """raw.orders, written through the stack's gateway (no Spark in this process)."""
        from pyspark.sql.connect.session import SparkSession

        gateway = gateway_status(self.home)
        assert gateway is not None
        spark = SparkSession.builder.remote(gateway.url).create()
        try:
            spark.sql(SEED)
        finally:
            spark.stop()

    def close(self) -> None:
        if hasattr(self, "http"):
            self.http.close()
        staged(self.home, "down")
        shutil.rmtree(self.home, ignore_errors=True)

    def form(self) -> str:
        """The Trigger form's request; the run's id."""
        response = self.http.post(f"/api/v2/dags/{DAG_ID}/dagRuns",
                                  json={"logical_date": None, "conf": {"ds": PARTITION}})
        return self._checked(response)["dag_run_id"]

    def page(self) -> str:
        """The page's refresh button's request; the run's id."""
        response = self.http.post(f"/materialized-tables/api/tables/{TABLE}/refresh",
                                  json={"partitions": {"ds": PARTITION}})
        return self._checked(response)["run_id"]

    @staticmethod
    def _checked(response: httpx.Response) -> dict[str, Any]:
        if response.is_error:
            raise SystemExit(f"trigger: HTTP {response.status_code} {response.text[:500]}")
        return response.json()

    def click_to_committed(self, name: str, click: Callable[[], str]) -> float:
        """Seconds from the request to its attempt's COMMITTED time; waits for the run's end."""
        self.wait_idle()
        before = {record.attempt_id for record in self.journal.records()}
        clicked = time.time()
        run_id = click()
        returned = time.time()
        record = self.committed_record(before)
        committed = next(at for state, at in record.history if state == AttemptState.COMMITTED.value)
        self.wait_idle()
        run = self.http.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").raise_for_status().json()
        ti = self.http.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/refresh"
                           ).raise_for_status().json()
        log = (Path(self.airflow.home) / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=refresh"
               / f"attempt={ti['try_number']}.log")
        marks = timeline(run, ti, log_marks(log), record, returned)
        self.timelines.setdefault(name, []).append((clicked, marks))
        return committed - clicked

    def committed_record(self, before: set[str]) -> AttemptRecord:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            for record in self.journal.records():
                if record.target != TABLE or record.attempt_id in before:
                    continue
                if record.state is AttemptState.COMMITTED:
                    return record
                if record.state.ended:
                    raise SystemExit(f"refresh of {TABLE} ended {record.state}: {record.error}")
            time.sleep(0.05)
        raise SystemExit(f"refresh of {TABLE} not committed within {RUN_TIMEOUT:.0f} s")

    def wait_idle(self, dag_id: str = DAG_ID) -> None:
        """No run of the DAG queued or running (a refresh DAG runs one at a time)."""
        while self.http.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"state": ["queued", "running"]}
                            ).raise_for_status().json()["dag_runs"]:
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="counted reps per arm (even: ABBA balanced)")
    args = parser.parse_args()
    print(f"load average {load()}", flush=True)
    stack = ReadmeStack()
    try:
        arms = {"form": lambda: stack.click_to_committed("form", stack.form),
                "page": lambda: stack.click_to_committed("page", stack.page)}
        times = alternating_rounds(arms, args.reps, after_warmup=stack.timelines.clear)
    finally:
        stack.close()
    print(f"click -> committed, one-partition refresh on the README's stack, {args.reps} reps; "
          f"load average {load()}")
    for name, values in times.items():
        print(latency_line(name, values, TARGET_SECONDS))
    for name, runs in stack.timelines.items():
        print_breakdown(name, runs)


if __name__ == "__main__":
    main()
