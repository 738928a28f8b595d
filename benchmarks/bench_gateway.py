"""Engine ``connect`` on a warm gateway against ``embedded``: atomic CTAS, and a refresh on Airflow.

1. ``ctas``: a 1M-row atomic CTAS (``execution.execute_staged``: begin, the Spark write, the
   manifest, commit, housekeep; all timed), a new table per run, on the same metastore:
   ``embedded`` on this process's warm ``local[2]`` session, ``connect`` on a warm gateway
   (``local[2]``) through one kept remote session. Arms alternate (``_common.arm_order``)
   after one uncounted warm-up round; paired ratios connect/embedded. Target: <= 1.1.
2. ``refresh``: Trigger (REST ``POST .../dagRuns`` with ``{"ds": ...}`` and the run fields the
   workflow scheduler's ``trigger_refresh`` sends: ``naming.manual_run_fields``) -> committed (the
   attempt's COMMITTED time in the journal) of a one-partition refresh of a small
   materialized table on a running local Airflow (``staged up``'s stack plus the gateway, one
   home): two definitions alike but for ``'engine'`` (``connect``, ``embedded``); runs alternate, one
   uncounted warm-up run each. Every embedded refresh starts its own Spark in its task
   process; a connect refresh uses the warm gateway. Target: connect p50 <= 3 s.
   Each run is broken down by phase from real timestamps: the DAG run's and task instance's
   fields in the REST API, the task log's lines (the task process's first line, the DAG file
   parsed, connecting to the gateway), the attempt's journal history (BEGUN, WRITTEN, COMMITTED);
   then the scheduler's CPU while idle and the memory of its process tree.

Starts everything it uses under temp homes and stops it by pid.
Run: ``.venv/bin/python benchmarks/bench_gateway.py`` (``--only ctas|refresh``, ``--reps``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import psutil
from _common import (
    REPO_ROOT,
    alternating_rounds,
    embedded_engine,
    hive_services,
    load,
    paired_ratios,
    runs_text,
    stopwatch,
)

from airflow_provider_staged.engine.base import Engine
from airflow_provider_staged.engine.connect import ConnectEngine
from airflow_provider_staged.engine.execution import execute_staged
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.local.gateway import start_gateway, stop_gateway
from airflow_provider_staged.local.stack import definitions_dir, stack_down, stack_up
from airflow_provider_staged.materialized.naming import dag_id_for, manual_run_fields
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable

DATABASE = "bench_gw"
CTAS_SQL = "SELECT id, id % 1000 AS k, rand(42) AS v, CAST(id AS STRING) AS s FROM range(1000000)"
CTAS_TARGET = 1.1
REFRESH_TARGET_SECONDS = 3.0
DEFINITION = """CREATE MATERIALIZED TABLE {database}.{table}
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd'{engine})
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM {database}.orders GROUP BY ds;
"""


# The milestones of one refresh, in the order they happen: (label, where the time comes from).
MILESTONES = (
    ("REST call returned", "bench"),
    ("run created (queued_at)", "dag run"),
    ("run started by the scheduler", "dag run"),
    ("TI scheduled", "task instance"),
    ("TI queued to the executor", "task instance"),
    ("worker's supervisor up (first log line)", "task log"),
    ("task process forked (Pre Execute)", "task log"),
    ("TI running (start_date)", "task instance"),
    ("DAG file parsed", "task log"),
    ("attempt BEGUN", "journal"),
    ("Connect client imported, connecting", "task log"),
    ("remote write + manifest (WRITTEN)", "journal"),
    ("COMMITTED", "journal"),
    ("TI ended (end_date)", "task instance"),
)
# Task-log lines that mark a milestone: how their event text starts.
LOG_MARKS = {
    "::group::Pre Execute": "task process forked (Pre Execute)",
    "Worker startup parse complete": "DAG file parsed",
    "connecting to Spark Connect server": "Connect client imported, connecting",
}


def epoch(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def task_log_marks(path: Path) -> dict[str, float]:
    """Milestones from a task's log (JSON lines with ``timestamp`` and ``event``)."""
    marks: dict[str, float] = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        at = epoch(entry.get("timestamp"))
        if at is None:
            continue
        marks.setdefault("worker's supervisor up (first log line)", at)
        event = str(entry.get("event", ""))
        for start, label in LOG_MARKS.items():
            if event.startswith(start):
                marks.setdefault(label, at)
    return marks


def timeline(run: dict[str, Any], ti: dict[str, Any], log: dict[str, float], record: AttemptRecord,
             returned: float) -> dict[str, float]:
    """Epoch seconds of each milestone this run has (a missing log line: left out)."""
    journal = {state: at for state, at in record.history}
    found = {
        "REST call returned": returned,
        "run created (queued_at)": epoch(run["queued_at"]),
        "run started by the scheduler": epoch(run["start_date"]),
        "TI scheduled": epoch(ti["scheduled_when"]),
        "TI queued to the executor": epoch(ti["queued_when"]),
        "TI running (start_date)": epoch(ti["start_date"]),
        "attempt BEGUN": journal.get(AttemptState.BEGUN.value),
        "remote write + manifest (WRITTEN)": journal.get(AttemptState.WRITTEN.value),
        "COMMITTED": journal.get(AttemptState.COMMITTED.value),
        "TI ended (end_date)": epoch(ti["end_date"]),
        **log,
    }
    return {label: at for label, at in found.items() if at is not None}


def print_breakdown(name: str, runs: list[tuple[float, dict[str, float]]]) -> None:
    """Median seconds after the trigger of each milestone, and of each step from the one before."""
    print(f"  {name}: phase breakdown, p50 over {len(runs)} runs (s after the trigger | step)")
    previous: dict[int, float] = {}
    for label, source in MILESTONES:
        offsets, steps = [], []
        for index, (triggered, marks) in enumerate(runs):
            if label in marks:
                offsets.append(marks[label] - triggered)
                steps.append(marks[label] - previous.get(index, triggered))
                previous[index] = marks[label]
        if offsets:
            print(f"    {label:40s} {statistics.median(offsets):6.2f} | +{statistics.median(steps):.2f}"
                  f"   ({source})")
        else:
            print(f"    {label:40s}      - |  -      ({source}: not found)")


def ctas(reps: int) -> None:
    with hive_services("bench-gateway", DATABASE) as services:
        started = time.perf_counter()
        gateway = start_gateway(services.metastore_uri, str(services.warehouse), services.home,
                                master="local[2]")
        print(f"gateway warm in {time.perf_counter() - started:.0f}s", flush=True)
        journal = FileJournal(services.home / "journal")
        embedded = embedded_engine(services, services.home / "journal")
        connect = ConnectEngine(embedded.settings, url=gateway.url)
        tables = itertools.count()

        def arm(engine: Engine) -> Callable[[], float]:
            def run() -> float:
                target = TableIdentifier(DATABASE, f"t{next(tables)}")
                staged = HiveStagedTable(target, StagingPurpose.CREATE_TABLE_AS, journal,
                                         services.metastore_uri)
                return stopwatch(lambda: execute_staged(staged, engine, CTAS_SQL, {}, 3600.0))
            return run

        try:
            times = alternating_rounds({"connect": arm(connect), "embedded": arm(embedded)}, reps)
        finally:
            connect.close()
            stop_gateway(services.home)
    ratios = paired_ratios(times["connect"], times["embedded"])
    print(f"1M-row atomic CTAS, {reps} reps; load average {load()}")
    for name, values in times.items():
        print(f"  {name:9s} p50 {statistics.median(values):.2f}s  runs {runs_text(values)}")
    print(f"  connect/embedded: {ratios.describe()}")
    print(f"  target <= {CTAS_TARGET}: {ratios.verdict(CTAS_TARGET)}", flush=True)


class Stack:
    """``staged up``'s metastore + Airflow and a gateway, all under one temp home."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="bench-gateway-stack-"))
        dags = self.home / "dags"
        dags.mkdir()
        shutil.copy(REPO_ROOT / "dags" / "materialized_tables.py", dags)
        started = time.perf_counter()
        status = stack_up(self.home, dags)
        assert status.metastore is not None and status.airflow is not None
        self.airflow = status.airflow
        self.gateway = start_gateway(status.metastore.uri, status.metastore.warehouse, self.home,
                                     master="local[2]")
        print(f"stack + gateway up in {time.perf_counter() - started:.0f}s", flush=True)
        self.http = httpx.Client(base_url=f"{self.airflow.endpoint}/api/v2", timeout=120,
                                 headers={"Authorization": f"Bearer {api_token(self.airflow)}"})
        self.journal = FileJournal(self.home / "journal")
        self.timelines: dict[str, list[tuple[float, dict[str, float]]]] = {}

    def close(self) -> None:
        self.http.close()
        stop_gateway(self.home)
        stack_down(self.home)
        shutil.rmtree(self.home, ignore_errors=True)

    def seed(self) -> None:
        """The source table, written through the gateway (no Spark in this process)."""
        from pyspark.sql.connect.session import SparkSession

        spark = SparkSession.builder.remote(self.gateway.url).create()
        try:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            spark.sql(f"CREATE TABLE {DATABASE}.orders USING parquet AS SELECT "
                      "date_format(date_add(DATE'2024-01-01', CAST(id % 3 AS INT)), 'yyyy-MM-dd') AS ds, "
                      "CAST(id AS DOUBLE) AS amount FROM range(300)")
        finally:
            spark.stop()

    def define(self, table: str, engine: str | None) -> str:
        option = f", 'engine' = '{engine}'" if engine else ""
        (definitions_dir(self.home) / f"{table}.sql").write_text(
            DEFINITION.format(database=DATABASE, table=table, engine=option))
        dag_id = dag_id_for(TableIdentifier(DATABASE, table))
        deadline = time.monotonic() + 300
        while self.http.get(f"/dags/{dag_id}").status_code != 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"DAG {dag_id} not parsed within 300 s")
            time.sleep(1)
        return dag_id

    def trigger_to_committed(self, dag_id: str, target: str) -> float:
        """Seconds from the trigger request to the COMMITTED state of the run's attempt."""
        before = {r.attempt_id for r in self.journal.records() if r.target == target}
        triggered = time.time()
        # The body the workflow scheduler's trigger_refresh sends (run_after due at once on SQLite).
        fields = manual_run_fields(datetime.fromtimestamp(triggered, timezone.utc), False, None)
        body = {"logical_date": None, "conf": {"ds": "2024-01-02"}, "dag_run_id": fields["dag_run_id"],
                "run_after": fields["run_after"].isoformat()}
        run = self.http.post(f"/dags/{dag_id}/dagRuns", json=body)
        if run.is_error:
            raise SystemExit(f"trigger of {dag_id}: HTTP {run.status_code} {run.text[:500]}")
        returned = time.time()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            for record in self.journal.records():
                if record.target != target or record.attempt_id in before:
                    continue
                if record.state is AttemptState.COMMITTED:
                    committed = next(at for state, at in record.history if state == record.state.value)
                    self.wait_idle(dag_id)
                    marks = self.run_timeline(dag_id, run.json()["dag_run_id"], record, returned)
                    self.timelines.setdefault(dag_id, []).append((triggered, marks))
                    return committed - triggered
                if record.state.ended:
                    raise SystemExit(f"refresh of {target} ended {record.state}: {record.error}")
            time.sleep(0.05)
        raise SystemExit(f"refresh of {target} not committed within 600 s")

    def run_timeline(self, dag_id: str, run_id: str, record: AttemptRecord, returned: float
                     ) -> dict[str, float]:
        run = self.http.get(f"/dags/{dag_id}/dagRuns/{run_id}").raise_for_status().json()
        ti = self.http.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/refresh").raise_for_status().json()
        log = (Path(self.airflow.home) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=refresh"
               / f"attempt={ti['try_number']}.log")
        return timeline(run, ti, task_log_marks(log), record, returned)

    def scheduler_report(self, idle_seconds: float = 10.0) -> str:
        """The scheduler's CPU while idle (no run) and the resident memory of its process tree
        (the forkserver and the executor's workers, no task running)."""
        scheduler = psutil.Process(self.airflow.pids["scheduler"])
        before = sum(scheduler.cpu_times()[:2])
        time.sleep(idle_seconds)
        busy = sum(scheduler.cpu_times()[:2]) - before
        tree = [scheduler, *scheduler.children(recursive=True)]
        memory = ", ".join(f"{p.pid} {' '.join(p.cmdline()[1:4])[:48]!r} {p.memory_info().rss >> 20} MB"
                           for p in tree)
        share = 100 * busy / idle_seconds
        return (f"idle scheduler: {busy:.2f} s CPU in {idle_seconds:.0f} s ({share:.0f}%); "
                f"RSS of its process tree: {memory}")

    def wait_idle(self, dag_id: str) -> None:
        """The run's end (task success, DAG run state) before the next trigger: max_active_runs=1."""
        while True:
            runs = self.http.get(f"/dags/{dag_id}/dagRuns", params={"state": ["queued", "running"]})
            if not runs.raise_for_status().json()["dag_runs"]:
                return
            time.sleep(0.2)


def refresh(reps: int) -> None:
    stack = Stack()
    try:
        stack.seed()
        arms = {}
        for engine in ("connect", "embedded"):
            table = f"daily_{engine}"
            # Both explicit: the stack's own default is connect (`staged up --engine`).
            dag_id = stack.define(table, engine)
            arms[engine] = (lambda d=dag_id, t=f"{DATABASE}.{table}": stack.trigger_to_committed(d, t))
        times = alternating_rounds(arms, reps, after_warmup=stack.timelines.clear)
        scheduler = stack.scheduler_report()
    finally:
        stack.close()
    print(f"Trigger (REST) -> committed, one-partition refresh on a running Airflow, {reps} reps; "
          f"load average {load()}")
    for name, values in times.items():
        print(f"  {name:9s} p50 {statistics.median(values):.2f}s  runs {runs_text(values)}")
    for name, runs in stack.timelines.items():
        print_breakdown(name, runs)
    print(f"  {scheduler}")
    p50 = statistics.median(times["connect"])
    verdict = "met" if p50 <= REFRESH_TARGET_SECONDS else "NOT met"
    print(f"  connect p50 {p50:.2f}s, target <= {REFRESH_TARGET_SECONDS:.0f} s: {verdict}; "
          f"embedded/connect {statistics.median(times['embedded']) / p50:.1f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("ctas", "refresh"))
    parser.add_argument("--reps", type=int, default=8, help="counted reps of the CTAS part")
    parser.add_argument("--refresh-reps", type=int, default=6, help="counted reps of the refresh part")
    args = parser.parse_args()
    print(f"load average {load()}", flush=True)
    if args.only in (None, "ctas"):
        ctas(args.reps)
    if args.only in (None, "refresh"):
        refresh(args.refresh_reps)


if __name__ == "__main__":
    main()
