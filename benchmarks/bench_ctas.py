"""Atomic CTAS on a Hive Metastore against plain Spark CTAS, and commit latency by data size.

1. Atomic CTAS (``HiveStagedTable`` begin → ``spark_job.run_staged_write`` → written → commit)
   against ``CREATE TABLE ... USING parquet AS SELECT`` on the same metastore and session,
   alternating (the order flips every repetition), after one warm-up pair. Target: atomic /
   plain <= 1.05 (medians).
2. Commit latency at 1K and 10M rows: a table is built once per size; each sample is a
   CREATE_OR_REPLACE attempt whose version directory holds a copy of the same files (no
   Spark run per sample), then ``commit()`` is timed (``publish``: read the table, then the one
   ``alter_table`` that switches it, on one connection; plus the journal write). The retention
   sweep runs after the commit (``housekeep``) and is timed apart as ``after_commit``.
   Targets: p50 < 100 ms at both sizes, ratio <= 1.5.

Starts its own metastore (Derby, temp home) and one ``local[2]`` SparkSession; stops both.
Run: ``python benchmarks/bench_ctas.py`` (smoke run: ``--sizes 100000 --reps 1 --latency-sizes 1000,100000
--samples 3``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_provider_staged.engine.session import build_session
from airflow_provider_staged.engine.spark_job import data_files, local_path, run_staged_write
from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.services.metastore import start_metastore, stop_metastore
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.hive import HiveStagedTable
from airflow_provider_staged.staging.journal import AttemptJournal

DATABASE = "bench"
SQL = "SELECT id, id % 1000 AS k, rand(42) AS v, CAST(id AS STRING) AS s FROM range({rows})"
ATOMIC_PHASES = ("begin", "write", "written", "commit", "footers")


def load() -> str:
    """The machine's 1/5/15-minute load averages (2 cores shared with other runs)."""
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


@contextmanager
def timed(into: list[float]) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        into.append(time.perf_counter() - start)


def timed_method(obj: Any, name: str, into: list[float]) -> None:
    """Wrap ``obj.name`` so every call's duration lands in ``into`` (instrumentation only)."""
    method: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with timed(into):
            return method(*args, **kwargs)

    setattr(obj, name, wrapper)


class Bench:
    def __init__(self, spark: Any, metastore_uri: str, warehouse: Path, journal: AttemptJournal) -> None:
        self.spark = spark
        self.uri = metastore_uri
        self.warehouse = warehouse
        self.journal = journal
        self.count = 0

    def new_name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def staged(self, table: str, purpose: StagingPurpose) -> HiveStagedTable:
        return HiveStagedTable(TableIdentifier(DATABASE, table), purpose, self.journal, self.uri)

    def atomic(self, rows: int, phases: dict[str, list[float]]) -> float:
        table = self.new_name("atomic")
        staged = self.staged(table, StagingPurpose.CREATE_TABLE_AS)
        start = time.perf_counter()
        with timed(phases["begin"]):
            staged.begin()
        with timed(phases["write"]):
            manifest = run_staged_write(self.spark, SQL.format(rows=rows), staged.write_spec())
        with timed(phases["written"]):
            staged.written(manifest)
        with timed(phases["commit"]):
            staged.commit()
        elapsed = time.perf_counter() - start
        # The manifest's footer reads happen inside "write"; timed again here to show their share.
        with timed(phases["footers"]):
            data_files(local_path(manifest["location"]))
        self.drop(table)
        return elapsed

    def plain(self, rows: int) -> float:
        table = self.new_name("plain")
        start = time.perf_counter()
        self.spark.sql(f"CREATE TABLE {DATABASE}.{table} USING parquet AS {SQL.format(rows=rows)}")
        elapsed = time.perf_counter() - start
        self.drop(table)
        return elapsed

    def drop(self, table: str) -> None:
        """Drop a table and its files (an atomic table is EXTERNAL: DROP keeps its data)."""
        self.spark.sql(f"DROP TABLE {DATABASE}.{table}")
        shutil.rmtree(self.warehouse / f"{DATABASE}.db" / table, ignore_errors=True)


def compare_ctas(bench: Bench, sizes: list[int], reps: int) -> None:
    bench.atomic(sizes[0], {phase: [] for phase in ATOMIC_PHASES})  # warm-up: JIT, metastore, caches
    bench.plain(sizes[0])
    print(
        f"{'rows':>12}  {'atomic p50 s':>12}  {'plain p50 s':>11}  {'atomic/plain':>12}  "
        "atomic phases p50 ms: begin / write (incl. footer reads) / written / commit / footer reads"
    )
    for rows in sizes:
        atomic: list[float] = []
        plain: list[float] = []
        phases: dict[str, list[float]] = {phase: [] for phase in ATOMIC_PHASES}
        for rep in range(reps):
            # Flip the order every repetition so neither path always runs on a warmer machine.
            for path in ("atomic", "plain") if rep % 2 == 0 else ("plain", "atomic"):
                if path == "atomic":
                    atomic.append(bench.atomic(rows, phases))
                else:
                    plain.append(bench.plain(rows))
        ratio = statistics.median(atomic) / statistics.median(plain)
        phase_text = " / ".join(f"{median_ms(phases[p]):.0f}" for p in ATOMIC_PHASES)
        print(
            f"{rows:>12,}  {statistics.median(atomic):>12.2f}  {statistics.median(plain):>11.2f}  "
            f"{ratio:>12.3f}  {phase_text}",
            flush=True,
        )


def commit_latency(bench: Bench, rows: int, samples: int) -> dict[str, list[float]]:
    """Time ``commit()`` of ``samples`` replace attempts of one table holding ``rows`` rows."""
    table = bench.new_name(f"latency_{rows}")
    first = bench.staged(table, StagingPurpose.CREATE_TABLE_AS)
    first.begin()
    manifest = run_staged_write(bench.spark, SQL.format(rows=rows), first.write_spec())
    first.written(manifest)
    first.commit()
    source = local_path(first.location)
    times: dict[str, list[float]] = {"publish": [], "after_commit": [], "commit": []}
    for _ in range(samples):
        staged = bench.staged(table, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS)
        staged.begin()
        # Same files, new version directory: what a Spark write would leave, without the run.
        shutil.copytree(source, local_path(staged.location))
        staged.written({**manifest, "location": staged.location})
        timed_method(staged, "publish", times["publish"])
        timed_method(staged, "after_commit", times["after_commit"])
        with timed(times["commit"]):
            staged.commit()
        staged.housekeep()  # retention, after the commit (timed as after_commit)
        source = local_path(staged.location)  # the current version: retention never deletes it
    bench.drop(table)
    return times


def report_latency(results: dict[int, dict[str, list[float]]]) -> list[str]:
    lines = [f"{'rows':>12}  samples  publish p50 ms  sweep p50 ms  commit() p50 ms"]
    for rows, times in results.items():
        lines.append(
            f"{rows:>12,}  {len(times['commit']):>7}  {median_ms(times['publish']):>14.1f}  "
            f"{median_ms(times['after_commit']):>12.1f}  {median_ms(times['commit']):>15.1f}"
        )
    small, large = min(results), max(results)
    for key, label in (("publish", "publish"), ("commit", "commit()")):
        ratio = statistics.median(results[large][key]) / statistics.median(results[small][key])
        lines.append(f"p50 ratio {large:,} / {small:,} rows, {label}: {ratio:.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="CTAS row counts")
    parser.add_argument("--reps", type=int, default=5, help="measured runs per size and path")
    parser.add_argument("--latency-sizes", default="1000,10000000", help="commit latency row counts")
    parser.add_argument("--samples", type=int, default=15, help="commits timed per latency size")
    args = parser.parse_args()
    sizes = [int(value) for value in args.sizes.split(",")]
    latency_sizes = [int(value) for value in args.latency_sizes.split(",")]

    home = Path(tempfile.mkdtemp(prefix="bench-ctas-"))
    started = time.perf_counter()
    metastore = start_metastore(home)
    spark = None
    try:
        quiet = {"spark.ui.showConsoleProgress": "false"}
        spark = build_session(metastore.uri, metastore.warehouse, "local[2]", "bench-ctas", quiet)
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql(f"CREATE DATABASE {DATABASE}")
        bench = Bench(spark, metastore.uri, Path(metastore.warehouse), AttemptJournal(home / "journal"))
        print(f"services up in {time.perf_counter() - started:.0f}s; load average {load()}", flush=True)
        print(f"SQL: {SQL.format(rows='N')}")
        print(f"\nAtomic vs plain CTAS ({args.reps} runs each, alternating, after a warm-up pair)")
        compare_ctas(bench, sizes, args.reps)
        results = {rows: commit_latency(bench, rows, args.samples) for rows in latency_sizes}
        print("\nCommit latency (commit() = publish + journal; sweep = retention, run after the commit)")
        for line in report_latency(results):
            print(line)
    finally:
        if spark is not None:
            spark.stop()
        stop_metastore(home)
        shutil.rmtree(home, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - started:.0f}s; load average {load()}")


if __name__ == "__main__":
    main()
