"""What a materialized-table refresh's write does on a warm gateway: round trips and Spark jobs.

The refresh of ``bench_gateway.py`` (one partition of a small aggregate), run in this process
with engine ``connect`` on a gateway (``local[2]``) that writes Spark's event log. Arms
alternate after one uncounted warm-up round: ``now`` (``spark_job.query_frame``: a SELECT goes
to the server as the write's relation) and ``spark_sql`` (the query built with ``spark.sql``,
a round trip of its own, as before). Prints each build's Spark Connect calls with their
durations, the p50 of ``engine.run`` per arm with paired ratios, and, from the event log, the
last builds' SQL executions with their jobs, stages and tasks.

Run: ``.venv/bin/python benchmarks/probes/profile_gateway_write.py --reps 10``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import _benchmarks_path  # noqa: F401 (benchmarks/ on sys.path)
from _common import alternating_rounds, load, metastore_only, paired_ratios, runs_text, timed_method
from bench_gateway import DATABASE, DEFINITION

from airflow_provider_staged.engine import spark_job
from airflow_provider_staged.engine.connect import ConnectEngine
from airflow_provider_staged.local.gateway import start_gateway, stop_gateway
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
from airflow_provider_staged.staging.settings import StagedSettings

# The client's calls that reach the server, and what to show of each.
CALLS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], str]] = {
    "_analyze": lambda args, kwargs: kwargs.get("method", ""),
    "execute_command": lambda args, kwargs: str(args[0]).split("{", 1)[0].strip(),
    "config": lambda args, kwargs: "config",
    "release_session": lambda args, kwargs: "",
}


def record_calls(into: list[tuple[str, float]]) -> None:
    """Wrap the Connect client's server calls so each lands in ``into`` as (what, seconds)."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    for name, describe in CALLS.items():
        original = getattr(SparkConnectClient, name)

        def wrapper(client: Any, *args: Any, _original: Any = original, _name: str = name,
                    _describe: Any = describe, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _original(client, *args, **kwargs)
            finally:
                into.append((f"{_name} {_describe(args, kwargs)}".strip(), time.perf_counter() - started))

        setattr(SparkConnectClient, name, wrapper)


def event_log_summary(events: Path, last: int) -> list[str]:
    """The last ``last`` SQL executions of the event log: duration, and per job its start
    after the execution's, its duration and each stage's (tasks, their run times in ms)."""
    lines: list[str] = []
    for path in sorted(p for p in events.rglob("*") if p.is_file()):
        data = subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True).stdout \
            if path.suffix == ".zstd" else path.read_bytes()
        lines += data.decode(errors="replace").splitlines()
    executions: dict[int, list[Any]] = {}
    jobs: dict[int, list[Any]] = {}
    task_times: dict[int, list[int]] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("Event", "")
        if kind.endswith("SQLExecutionStart"):
            executions[event["executionId"]] = [event["time"], None]
        elif kind.endswith("SQLExecutionEnd"):
            executions[event["executionId"]][1] = event["time"]
        elif kind == "SparkListenerJobStart":
            stages = [(s["Stage ID"], s["Number of Tasks"]) for s in event["Stage Infos"]]
            jobs[event["Job ID"]] = [event["Submission Time"], None, stages,
                                     event.get("Properties", {}).get("spark.sql.execution.id")]
        elif kind == "SparkListenerJobEnd":
            jobs[event["Job ID"]][1] = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            task_times.setdefault(event["Stage ID"], []).append(event["Task Metrics"]["Executor Run Time"])
    report = []
    for execution in sorted(executions)[-last:]:
        start, end = executions[execution]
        report.append(f"  execution {execution}: {end - start} ms")
        for job, (submitted, completed, stages, owner) in sorted(jobs.items()):
            if str(owner) == str(execution):
                shown = ", ".join(f"stage {s}: {n} tasks, run {task_times.get(s, 'skipped')} ms"
                                  for s, n in stages)
                report.append(f"    job {job}: +{submitted - start} ms, {completed - submitted} ms ({shown})")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    calls: list[tuple[str, float]] = []
    record_calls(calls)
    definition = parse_definition(DEFINITION.format(database=DATABASE, table="daily", engine=""))
    with metastore_only("profile-gateway-write", DATABASE) as metastore:
        home = Path(metastore.home)
        events = home / "events"
        events.mkdir()
        event_log = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events)}
        gateway = start_gateway(metastore.uri, metastore.warehouse, home, master="local[2]",
                                spark_conf=event_log)
        try:
            from pyspark.sql.connect.session import SparkSession

            seed = SparkSession.builder.remote(gateway.url).create()
            seed.sql(f"CREATE TABLE {DATABASE}.orders USING parquet AS SELECT "
                     "date_format(date_add(DATE'2024-01-01', CAST(id % 3 AS INT)), 'yyyy-MM-dd') AS ds, "
                     "CAST(id AS DOUBLE) AS amount FROM range(300)")
            seed.stop()
            settings = StagedSettings(metastore.uri, metastore.warehouse, str(home / "journal"))
            frames = {"now": spark_job.query_frame, "spark_sql": lambda spark, sql: spark.sql(sql)}

            def arm(name: str) -> Callable[[], float]:
                def build() -> float:
                    spark_job.query_frame = frames[name]
                    now = datetime.now(timezone.utc)
                    request = parse_refresh_request({"ds": "2024-01-02"}, definition, now)
                    engine = ConnectEngine(settings, url=gateway.url)
                    runs: list[float] = []
                    timed_method(engine, "run", runs)
                    calls.clear()
                    result = run_refresh(definition, request, settings,
                                         staged_refresh(definition, request, settings, None), engine)
                    engine.close()
                    shown = ", ".join(f"{what} {seconds * 1000:.0f}" for what, seconds in calls)
                    print(f"  {name:9s} engine.run {runs[0]:.3f}s, {result['rows']} row(s) {result['bytes']} "
                          f"bytes; calls (ms): {shown}", flush=True)
                    return runs[0]
                return build

            times = alternating_rounds({name: arm(name) for name in frames}, args.reps)
        finally:
            stop_gateway(home)
        report = event_log_summary(events, 2 * args.reps)
    print(f"engine.run of a one-partition refresh on a warm gateway, {args.reps} reps; load average {load()}")
    for name, values in times.items():
        print(f"  {name:9s} p50 {statistics.median(values):.3f}s  runs {runs_text(values, 3)}")
    print(f"  now/spark_sql: {paired_ratios(times['now'], times['spark_sql']).describe()}")
    print("the gateway's SQL executions (event log), last builds:")
    print("\n".join(report))


if __name__ == "__main__":
    main()
