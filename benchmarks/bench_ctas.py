"""Atomic CTAS/RTAS on a Hive Metastore against plain Spark and a catalog-free write, and commit latency.

1. Three arms on the same query, metastore and ``local[2]`` session, at each size and purpose:

   - ``atomic``: the operator's path, ``execution.execute_staged`` with an ``EmbeddedEngine`` on
     this session: begin (metastore read, journal) -> Spark write into a version directory
     (+ manifest footers) -> written -> commit (under the table's metastore lock: one
     ``create_table``, or ``get_table`` + ``alter_table`` for a replace) -> housekeep (the
     retention sweep: a metastore read, a listing, deletes). All of it is timed; the phases
     and the commit's Thrift calls (``_common.ThriftCalls``) are printed too.
   - ``plain``: what a Spark user runs, on a Spark-managed Parquet table:
     ``create``: ``CREATE TABLE t USING parquet AS <q>``;
     ``replace``: ``INSERT OVERWRITE TABLE t <q>`` (the table exists and keeps its schema);
     ``create_or_replace``: ``CREATE OR REPLACE TABLE t USING parquet AS <q>`` if the catalog
     takes it; Spark's built-in (v1) session catalog refuses it for its tables
     (``UNSUPPORTED_FEATURE.TABLE_OPERATION``), so the plain arm then runs what Spark users run
     instead, ``DROP TABLE IF EXISTS t`` + ``CREATE TABLE t USING parquet AS <q>`` (both timed;
     not atomic). The script prints which statement it used.
   - ``write_only``: ``spark.sql(q).write.parquet(<fresh dir>)``, no catalog work at all: the
     control, i.e. the cost of the Spark write alone.

   ``create`` makes a new table every rep; ``replace`` and ``create_or_replace`` replace one
   existing table per arm every rep (set up untimed before the block), so the metastore read,
   the ``alter_table`` and the retention sweep are all measured. Each rep runs every arm once,
   back to back, in an order that rotates every rep (``_common.arm_order``: all 6 orders of the
   3 arms in every 6 reps, so ``--reps 18`` balances them exactly), after one
   uncounted warm-up round per size and purpose. Every rep's seconds and paired ratios are
   printed, then per pair the median/mean of the paired ratios, their IQR and min-max, a
   bootstrap 90% interval of the median, and the ratio of the medians.
   Target: atomic/plain <= 1.05 at 1M and 10M rows; "met" when the 90% interval lies below.
2. Commit latency at 1K and 10M rows (``--latency-sizes``, ``''`` skips it): a table is built
   once per size; each sample is a create_or_replace attempt whose version directory holds a
   copy of the same files (no Spark run per sample), then ``commit()`` is timed (``publish``:
   read the table, then the one ``alter_table`` that switches it; plus the journal write). The
   retention sweep runs after the commit (``housekeep``), timed apart as ``after_commit``.
   Targets: p50 < 100 ms at both sizes, ratio <= 1.5.

Starts its own metastore (Derby, temp home) and one SparkSession; stops both, removes the home.
Run: ``.venv/bin/python benchmarks/bench_ctas.py`` (smoke run: ``--smoke``).
"""

from __future__ import annotations

import argparse
import statistics

from _common import (
    HiveServices,
    PairedRatios,
    ThriftCalls,
    alternating_rounds,
    embedded_engine,
    hive_services,
    load,
    paired_ratios,
    runs_text,
    stopwatch,
    timed,
    timed_method,
)

from airflow_provider_staged.engine.execution import execute_staged
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage import files

DATABASE = "bench"
SQL = "SELECT id, id % 1000 AS k, rand(42) AS v, CAST(id AS STRING) AS s FROM range({rows})"
PURPOSES = ("create", "create_or_replace", "replace")
ARMS = ("atomic", "plain", "write_only")
PAIRS = (("atomic", "plain"), ("atomic", "write_only"), ("plain", "write_only"))
PHASES = ("begin", "write", "written", "commit", "housekeep")
TARGET = 1.05
TTL_SECONDS = 3600.0  # the operator's default attempt TTL (sets the heartbeat interval)
RETENTION = RetentionPolicy()  # the connection's defaults: keep 2 superseded versions, 7 days


class CtasBlock:
    """The three arms for one purpose and size; replace purposes own one table per arm."""

    def __init__(
        self, services: HiveServices, calls: ThriftCalls, purpose: StagingPurpose, rows: int, block: str
    ) -> None:
        self.services = services
        self.calls = calls
        self.spark = services.spark
        self.purpose = purpose
        self.sql = SQL.format(rows=rows)
        self.block = block
        # One journal per block: later blocks do not pay for earlier blocks' records.
        journal_dir = services.home / "journals" / block
        self.journal = FileJournal(journal_dir)
        self.engine = embedded_engine(services, journal_dir)
        self.phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
        timed_method(self.engine, "run", self.phases["write"])
        self.count = 0
        self.tables: list[str] = []
        self.plain_sql: list[str] = []  # what the plain arm runs to replace its table
        self.plain_note = ""
        if purpose.replaces:  # the tables each rep replaces, built untimed
            self.atomic_table = self.table("atomic")
            self.plain_table = self.table("plain")
            self.build_atomic(self.atomic_table, StagingPurpose.CREATE_TABLE_AS)
            self.spark.sql(f"CREATE TABLE {DATABASE}.{self.plain_table} USING parquet AS {self.sql}")
            self.plain_sql = self.replace_statements(f"{DATABASE}.{self.plain_table}")

    def table(self, arm: str) -> str:
        self.count += 1
        name = f"{arm}_{self.block}_{self.count}"
        self.tables.append(name)
        return name

    def replace_statements(self, name: str) -> list[str]:
        """What a Spark user runs to replace ``name`` for this purpose (probed untimed)."""
        if self.purpose is StagingPurpose.REPLACE_TABLE_AS:
            return [f"INSERT OVERWRITE TABLE {name} {self.sql}"]
        from pyspark.errors import AnalysisException

        rtas = f"CREATE OR REPLACE TABLE {name} USING parquet AS {self.sql}"
        try:
            self.spark.sql(rtas)
            return [rtas]
        except AnalysisException as error:
            # Spark's v1 session catalog: its tables do not support REPLACE TABLE AS SELECT.
            condition = error.getCondition() if hasattr(error, "getCondition") else error.getErrorClass()
            self.plain_note = f"  (Spark refused CREATE OR REPLACE TABLE ... AS: {condition})"
            return [f"DROP TABLE IF EXISTS {name}", f"CREATE TABLE {name} USING parquet AS {self.sql}"]

    def plain_text(self) -> str:
        if not self.purpose.replaces:
            return "CREATE TABLE t USING parquet AS <q>"
        name = f"{DATABASE}.{self.plain_table}"
        statements = "; ".join(s.replace(self.sql, "<q>").replace(name, "t") for s in self.plain_sql)
        return statements + self.plain_note

    def build_atomic(self, table: str, purpose: StagingPurpose) -> None:
        identifier = TableIdentifier(DATABASE, table)
        staged = HiveStagedTable(identifier, purpose, self.journal, self.services.metastore_uri, RETENTION)
        self.calls.record_calls_of(staged, "commit")
        for phase in ("begin", "written", "commit", "housekeep"):
            timed_method(staged, phase, self.phases[phase])
        execute_staged(staged, self.engine, self.sql, {}, TTL_SECONDS)

    def atomic(self) -> float:
        if self.purpose.replaces:
            return stopwatch(lambda: self.build_atomic(self.atomic_table, self.purpose))
        table = self.table("atomic")
        seconds = stopwatch(lambda: self.build_atomic(table, self.purpose))
        self.drop(table)
        return seconds

    def plain(self) -> float:
        if self.purpose.replaces:
            return stopwatch(lambda: [self.spark.sql(statement) for statement in self.plain_sql])
        table = self.table("plain")
        statement = f"CREATE TABLE {DATABASE}.{table} USING parquet AS {self.sql}"
        seconds = stopwatch(lambda: self.spark.sql(statement))
        self.drop(table)
        return seconds

    def write_only(self) -> float:
        self.count += 1
        path = f"{self.services.location}/write_only/{self.block}_{self.count}"
        seconds = stopwatch(lambda: self.spark.sql(self.sql).write.parquet(path))
        files.delete_dir(path)
        return seconds

    def drop(self, table: str) -> None:
        """Drop a table and its files (an atomic table is EXTERNAL: DROP keeps its data)."""
        self.spark.sql(f"DROP TABLE IF EXISTS {DATABASE}.{table}")
        files.delete_dir(f"{self.services.location}/{DATABASE}.db/{table}")

    def close(self) -> None:
        for table in self.tables:
            self.drop(table)


def print_rep(rep: int, order: list[str], seconds: dict[str, float]) -> None:
    times = "  ".join(f"{arm} {seconds[arm]:7.3f}" for arm in ARMS)
    ratios = "  ".join(f"{a}/{b} {seconds[a] / seconds[b]:.3f}" for a, b in PAIRS)
    print(f"  rep {rep + 1:>2} [{'>'.join(order):<26}] s: {times} | {ratios}", flush=True)


Summary = dict[tuple[str, int], tuple[PairedRatios, float]]


def run_block(
    services: HiveServices, calls: ThriftCalls, purpose: StagingPurpose, rows: int, reps: int
) -> tuple[PairedRatios, float]:
    """One purpose at one size; return atomic/plain and the commit p50 (ms)."""
    print(f"\n{purpose.value}, {rows:,} rows, {reps} reps after 1 warm-up round; load average {load()}")
    block = CtasBlock(services, calls, purpose, rows, f"{purpose.value}_{rows}")
    try:
        arms = {"atomic": block.atomic, "plain": block.plain, "write_only": block.write_only}
        times = alternating_rounds(arms, reps, warmups=1, on_rep=print_rep, after_warmup=calls.clear)
    finally:
        block.close()
    # The warm-up's (and, for replace purposes, the set-up build's) phases are not counted.
    phases = {phase: values[-reps:] for phase, values in block.phases.items()}
    print(f"  plain = {block.plain_text()}")
    for arm in ARMS:
        print(f"  {arm:<10} median {statistics.median(times[arm]):7.3f} s  runs {runs_text(times[arm])}")
    results = {pair: paired_ratios(times[pair[0]], times[pair[1]]) for pair in PAIRS}
    for (numerator, denominator), ratios in results.items():
        print(f"  {numerator + '/' + denominator:<19} {ratios.describe()}")
        print(f"  {'':<19} per rep {runs_text(ratios.ratios, 3)}")
    print(f"  atomic/plain target <= {TARGET}: {results['atomic', 'plain'].verdict(TARGET)}")
    phase_text = " / ".join(f"{phase} {statistics.median(phases[phase]) * 1000:.0f}" for phase in PHASES)
    print(f"  atomic phases p50 ms: {phase_text}")
    print(f"  commit's metastore calls (per commit, p50 ms of one call): {calls.describe()}")
    print(f"  load average at the end {load()}", flush=True)
    return results["atomic", "plain"], statistics.median(phases["commit"]) * 1000


def commit_latency(services: HiveServices, rows: int, samples: int) -> dict[str, list[float]]:
    """Time ``commit()`` of ``samples`` replace attempts of one table holding ``rows`` rows."""
    journal = FileJournal(services.home / "journals" / f"latency_{rows}")
    identifier = TableIdentifier(DATABASE, f"latency_{rows}")

    def staged(purpose: StagingPurpose) -> HiveStagedTable:
        return HiveStagedTable(identifier, purpose, journal, services.metastore_uri, RETENTION)

    first = staged(StagingPurpose.CREATE_TABLE_AS)
    first.begin()
    manifest = run_staged_write(services.spark, SQL.format(rows=rows), first.write_spec())
    first.written(manifest)
    first.commit()
    source = first.location
    times: dict[str, list[float]] = {"publish": [], "after_commit": [], "commit": []}
    for _ in range(samples):
        attempt = staged(StagingPurpose.CREATE_OR_REPLACE_TABLE_AS)
        attempt.begin()
        # Same files, new version directory: what a Spark write would leave, without the run.
        for entry in files.list_files(source):
            files.copy_file(entry.location, files.join(attempt.location, entry.path))
        attempt.written({**manifest, "location": attempt.location})
        timed_method(attempt, "publish", times["publish"])
        timed_method(attempt, "after_commit", times["after_commit"])
        with timed(times["commit"]):
            attempt.commit()
        attempt.housekeep()  # retention, after the commit (timed as after_commit)
        source = attempt.location  # the current version: retention never deletes it
    services.spark.sql(f"DROP TABLE {identifier.name}")
    files.delete_dir(f"{services.location}/{DATABASE}.db/{identifier.table}")
    return times


def report_latency(results: dict[int, dict[str, list[float]]]) -> None:
    print("\nCommit latency (commit() = publish + journal; sweep = retention, run after the commit)")
    print(f"{'rows':>12}  samples  publish p50 ms  sweep p50 ms  commit() p50 ms")
    for rows, times in results.items():
        p50 = {key: statistics.median(values) * 1000 for key, values in times.items()}
        print(
            f"{rows:>12,}  {len(times['commit']):>7}  {p50['publish']:>14.1f}  "
            f"{p50['after_commit']:>12.1f}  {p50['commit']:>15.1f}"
        )
    small, large = min(results), max(results)
    for key, label in (("publish", "publish"), ("commit", "commit()")):
        ratio = statistics.median(results[large][key]) / statistics.median(results[small][key])
        print(f"p50 ratio {large:,} / {small:,} rows, {label}: {ratio:.2f} (target <= 1.5)")


def print_summary(summary: Summary) -> None:
    print(f"\nSummary: atomic/plain (target <= {TARGET}; decided by the 90% interval of the median)")
    print(
        f"{'purpose':<18} {'rows':>12}  {'median':>6}  {'90% CI':>11}  {'mean':>6}  "
        f"{'commit p50 ms':>13}  verdict"
    )
    for (purpose, rows), (ratios, commit_ms) in summary.items():
        interval = f"{ratios.ci_low:.3f}-{ratios.ci_high:.3f}"
        print(
            f"{purpose:<18} {rows:>12,}  {ratios.median:6.3f}  {interval:>11}  {ratios.mean:6.3f}  "
            f"{commit_ms:13.1f}  {ratios.verdict(TARGET)}"
        )


def sizes_arg(text: str) -> list[int]:
    return [int(value) for value in text.split(",") if value.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=sizes_arg, default=[1_000_000, 10_000_000], help="row counts")
    parser.add_argument("--purposes", default=",".join(PURPOSES), help=f"comma-separated, of {PURPOSES}")
    parser.add_argument("--reps", type=int, default=15, help="measured rounds per size and purpose")
    parser.add_argument(
        "--latency-sizes",
        type=sizes_arg,
        default=[1000, 10_000_000],
        help="commit latency row counts ('' skips it)",
    )
    parser.add_argument("--samples", type=int, default=15, help="commits timed per latency size")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 reps: proves the script runs")
    parser.add_argument(
        "--store", choices=("local", "s3"), default="local",
        help="where the tables live: the local disk, or a local S3 server (S3Proxy) through s3a://",
    )
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.reps, args.latency_sizes, args.samples = [10_000, 50_000], 2, [1000, 50_000], 3
    purposes = [StagingPurpose.parse(value) for value in args.purposes.split(",")]

    with hive_services("bench-ctas", DATABASE, s3=args.store == "s3") as services:
        print(f"SQL: {SQL.format(rows='N')}; tables at {services.location}")
        calls = ThriftCalls()
        summary: Summary = {}
        for rows in args.sizes:
            print(f"\n=== {rows:,} rows; load average {load()}")
            for purpose in purposes:
                summary[purpose.value, rows] = run_block(services, calls, purpose, rows, args.reps)
            print(f"=== {rows:,} rows done; load average {load()}")
        print_summary(summary)
        if args.latency_sizes:
            latency = {rows: commit_latency(services, rows, args.samples) for rows in args.latency_sizes}
            report_latency(latency)


if __name__ == "__main__":
    main()
