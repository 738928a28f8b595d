"""Atomic JDBC CTAS (staged table + rename) vs a plain ``df.write.jdbc(mode="overwrite")``.

Starts its own throwaway PostgreSQL (fsync on: commit latency includes a real WAL flush) and a
local Spark session, then runs both paths on the same query, alternating which goes first, at
each size. Prints the median ratio atomic / plain (target <= 1.10) of wall time and of the CPU
time of the whole process tree (Python, the Spark JVM, PostgreSQL: steadier than wall time on a
shared machine), and the commit latency p50 (target < 50 ms). Both the ratio of the medians and
the median of the per-rep ratios (each rep runs both paths back to back) are printed.
Run: ``.venv/bin/python benchmarks/bench_jdbc_ctas.py [--sizes 100000 1000000] [--reps 15] [--count-rows]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import paired_ratios, runs_text  # also puts the repository root on sys.path (tests)

from airflow_provider_staged.catalogs.postgres_connections import POSTGRES_CONNECTIONS, PostgresConnection
from airflow_provider_staged.engine.session import jars_conf
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.jdbc_table import (
    POSTGRES_DRIVER,
    JdbcStagingSink,
    JdbcTarget,
    JdbcWriteOptions,
)
from tests.fixtures.postgres_server import PostgresServer, start_postgres, stop_postgres

QUERY = (
    "SELECT id, id * 3 AS v, concat('row-', id) AS s, CAST(id / 100 AS DECIMAL(12, 2)) AS amount"
    " FROM range({n})"
)
BATCH_SIZE = 10_000


def spark_session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("bench-jdbc")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        **jars_conf(on_this_host=True),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def atomic_run(spark: Any, sink: JdbcStagingSink, n: int, steps: dict[str, list[float]]) -> None:
    """The operator's path: begin, job, written, commit, then housekeeping (drops the old table)."""
    staged = sink.apply_staging(StagingContext(StagingPurpose.CREATE_OR_REPLACE_TABLE_AS))
    staged.begin()
    os.environ.update(staged.job_env())
    staged.written(run_staged_write(spark, QUERY.format(n=n), staged.write_spec()))
    for step in (staged.commit, staged.housekeep):
        started = time.perf_counter()
        step()
        steps[step.__name__].append(time.perf_counter() - started)
    # Each Airflow task runs in a new process: no build may reuse the previous one's connection.
    POSTGRES_CONNECTIONS.close_all()


def plain_run(spark: Any, connection: PostgresConnection, n: int) -> None:
    properties = {
        "user": connection.user,
        "password": connection.password,
        "driver": POSTGRES_DRIVER,
        "batchsize": str(BATCH_SIZE),
    }
    spark.sql(QUERY.format(n=n)).write.jdbc(connection.jdbc_url(), "public.plain", "overwrite", properties)


def tree_cpu_seconds(roots: list[int]) -> float:
    """CPU used by ``roots`` and their descendants (this process, its Spark JVM, the PostgreSQL
    server and its backends, whose CPU the postmaster collects when they exit).

    Unlike wall time, it barely moves when other jobs share the machine's 2 cores.
    """
    parents, ticks = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    tree, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def measured(run: Callable[[], None], roots: list[int]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one run."""
    cpu, started = tree_cpu_seconds(roots), time.perf_counter()
    run()
    return time.perf_counter() - started, tree_cpu_seconds(roots) - cpu


def bench(server: PostgresServer, sizes: list[int], reps: int, count_rows: bool) -> None:
    connection = PostgresConnection(server.host, server.port, server.database, server.user, server.password)
    roots = [os.getpid(), server.pid] if server.pid else [os.getpid()]
    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="bench-jdbc-journal-") as journal_dir:
        sink = JdbcStagingSink(
            JdbcTarget("bench", "public", "atomic"),
            FileJournal(journal_dir),
            options=JdbcWriteOptions(batch_size=BATCH_SIZE, count_rows=count_rows),
            connection=connection,
        )
        for n in sizes:
            steps: dict[str, list[float]] = {"commit": [], "housekeep": []}
            runs = {
                "atomic": lambda n=n, steps=steps: atomic_run(spark, sink, n, steps),
                "plain": lambda n=n: plain_run(spark, connection, n),
            }
            for run in runs.values():  # warm-up: JIT, first creation of both tables
                run()
            for times in steps.values():
                times.clear()
            wall: dict[str, list[float]] = {"atomic": [], "plain": []}
            cpu: dict[str, list[float]] = {"atomic": [], "plain": []}
            for rep in range(reps):
                order = ["atomic", "plain"] if rep % 2 == 0 else ["plain", "atomic"]
                for name in order:
                    seconds, cpu_seconds = measured(runs[name], roots)
                    wall[name].append(seconds)
                    cpu[name].append(cpu_seconds)
            print(f"rows={n:,} reps={reps} count_rows={count_rows}")
            for label, values in (("wall", wall), ("cpu", cpu)):
                atomic, plain = statistics.median(values["atomic"]), statistics.median(values["plain"])
                # Each rep runs both back to back: the median of its ratios cancels slow load drift.
                ratios = paired_ratios(values["atomic"], values["plain"])
                print(
                    f"    {label:4} s  atomic median {atomic:7.3f}  plain median {plain:7.3f}  "
                    f"ratio {atomic / plain:5.3f}  paired ratio {ratios.median:5.3f} (target <= 1.10)  "
                    f"atomic runs {runs_text(values['atomic'])}  plain runs {runs_text(values['plain'])}"
                )
                print(f"           {ratios.describe()}  target <= 1.10: {ratios.verdict(1.10)}")
            for step, times in steps.items():
                p50, worst = statistics.median(times) * 1000, max(times) * 1000
                target = " (target p50 < 50 ms)" if step == "commit" else " (after the commit, in the ratio)"
                print(f"    {step:9} p50 {p50:6.1f} ms  max {worst:6.1f} ms{target}")
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--count-rows", action="store_true", help="atomic builds also count their rows")
    args = parser.parse_args()
    server = start_postgres(durable=True)
    try:
        bench(server, args.sizes, args.reps, args.count_rows)
    finally:
        stop_postgres(server)


if __name__ == "__main__":
    main()
