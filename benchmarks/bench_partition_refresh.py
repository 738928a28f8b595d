"""Atomic multi-partition refresh against Spark's dynamic ``INSERT OVERWRITE``, and its commit latency.

The refresh: 10 existing partitions replaced and 10 new ones added (``ds`` = '2024-01-01' ..
'2024-01-20'), 1M rows in total over those 20 partitions (50K each). Before every refresh both
tables hold exactly the 10 partitions '2024-01-01' .. '2024-01-10' (50K rows each); after it the
10 added partitions are dropped again, untimed, so every rep refreshes the same state.

Why the tables hold no other partitions: ``HivePartitionStagedTable`` replaces every existing
partition inside its ``partition_spec``, and a spec is an equality on partition values (one
``ds`` or, empty, all of them). Ten replaced and ten added partitions in one refresh need the
empty spec, and then every existing partition is replaced: one the query does not produce
would be replaced by an empty one. So untouched partitions next to the refreshed ones cannot
be expressed with a single ``ds`` column; this set-up is the one where the empty spec touches
exactly the 10 replaced + 10 added partitions.

Arms, alternating (ABBA) after one uncounted warm-up round, on one metastore and session:

- ``plain``: ``INSERT OVERWRITE TABLE t PARTITION (ds) <q>`` with
  ``spark.sql.sources.partitionOverwriteMode=dynamic`` on a Spark-managed partitioned Parquet
  table (Spark deletes the 10 replaced partitions' files, writes, adds the 10 new ones);
- ``atomic``: ``execution.execute_staged`` of ``HivePartitionStagedTable(spec={})`` with an
  ``EmbeddedEngine`` on this session: begin -> Spark write of the 20 partitions into a version
  directory -> written (which prepares the commit: under the table's lock, the reads and one
  ``add_partitions`` registering the 10 new partitions empty) -> commit (one lock-free
  ``alter_partitions`` of the 20, a compare-and-set of what was read) -> housekeep (retention
  sweep). All timed; ``written()`` and ``commit()`` also timed apart, with their metastore calls.

Targets: atomic/plain <= 1.10 (median paired ratio; "met" when its 90% interval lies below),
commit p50 < 100 ms. Timing only: correctness is tested in tests/.
Starts its own metastore (Derby, temp home) and one ``local[2]`` SparkSession; stops both.
Run: ``.venv/bin/python benchmarks/bench_partition_refresh.py`` (smoke run: ``--smoke``).
"""

from __future__ import annotations

import argparse
import statistics
from datetime import date, timedelta

from _common import (
    HiveServices,
    ThriftCalls,
    alternating_rounds,
    embedded_engine,
    hive_services,
    load,
    median_interval,
    paired_ratios,
    percentile_ms,
    runs_text,
    stopwatch,
    timed_method,
)

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.engine.execution import execute_staged
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy

DATABASE = "bench"
REPLACED, ADDED = 10, 10
FIRST_DAY = date(2024, 1, 1)
# ds last: INSERT OVERWRITE ... PARTITION (ds) SELECT takes the dynamic partition column last.
SQL = (
    "SELECT id, id % 1000 AS k, rand(42) AS v, CAST(id AS STRING) AS s,"
    " date_format(date_add(DATE'{first}', CAST(id % {days} AS INT)), 'yyyy-MM-dd') AS ds"
    " FROM range({rows})"
)
TARGET = 1.10
COMMIT_TARGET_MS = 100.0
TTL_SECONDS = 3600.0  # the operator's default attempt TTL (sets the heartbeat interval)
RETENTION = RetentionPolicy()  # the connection's defaults: keep 2 superseded versions, 7 days


def query(days: int, rows: int) -> str:
    return SQL.format(first=FIRST_DAY.isoformat(), days=days, rows=rows)


class RefreshBench:
    """Two tables in the same starting state; each arm refreshes its own and resets it."""

    def __init__(self, services: HiveServices, rows: int) -> None:
        self.services = services
        self.spark = services.spark
        self.refresh_sql = query(REPLACED + ADDED, rows)
        journal_dir = services.home / "journal"
        self.journal = FileJournal(journal_dir)
        self.engine = embedded_engine(services, journal_dir)
        self.commit_times: list[float] = []
        self.written_times: list[float] = []
        self.housekeep_times: list[float] = []
        self.calls = ThriftCalls()
        self.written_calls = ThriftCalls()
        added = [FIRST_DAY + timedelta(days=REPLACED + day) for day in range(ADDED)]
        self.drop_added = ", ".join(f"PARTITION (ds = '{day.isoformat()}')" for day in added)
        # Same rows per partition as the refresh writes, so the replaced data is alike too.
        initial_sql = query(REPLACED, rows * REPLACED // (REPLACED + ADDED))
        self.spark.sql(f"CREATE TABLE {DATABASE}.plain USING parquet PARTITIONED BY (ds) AS {initial_sql}")
        self.refresh_atomic(initial_sql)  # the first refresh creates the atomic table
        self.clear()

    def clear(self) -> None:
        """Forget the set-up's and the warm-up's commits."""
        self.commit_times.clear()
        self.written_times.clear()
        self.housekeep_times.clear()
        self.calls.clear()
        self.written_calls.clear()

    def refresh_atomic(self, sql: str) -> None:
        identifier = TableIdentifier(DATABASE, "atomic")
        uri = self.services.metastore_uri
        staged = HivePartitionStagedTable(identifier, ["ds"], {}, self.journal, uri, RETENTION)
        self.calls.record_calls_of(staged, "commit")
        self.written_calls.record_calls_of(staged, "written")
        timed_method(staged, "commit", self.commit_times)
        timed_method(staged, "written", self.written_times)
        timed_method(staged, "housekeep", self.housekeep_times)
        execute_staged(staged, self.engine, sql, {}, TTL_SECONDS)

    def atomic(self) -> float:
        seconds = stopwatch(lambda: self.refresh_atomic(self.refresh_sql))
        self.reset("atomic")
        return seconds

    def plain(self) -> float:
        statement = f"INSERT OVERWRITE TABLE {DATABASE}.plain PARTITION (ds) {self.refresh_sql}"
        seconds = stopwatch(lambda: self.spark.sql(statement))
        self.reset("plain")
        return seconds

    def reset(self, table: str) -> None:
        """Untimed: check the refresh made 20 partitions, then drop the 10 it added."""
        with MetastoreClient(self.services.metastore_uri) as client:
            count = len(client.partitions(DATABASE, table))
        if count != REPLACED + ADDED:
            raise RuntimeError(f"{table} has {count} partitions after the refresh, not {REPLACED + ADDED}")
        # EXTERNAL (atomic): the files stay in the version directory until retention deletes it.
        self.spark.sql(f"ALTER TABLE {DATABASE}.{table} DROP {self.drop_added}")


def print_rep(rep: int, order: list[str], seconds: dict[str, float], commit_ms: float) -> None:
    print(
        f"  rep {rep + 1:>2} [{'>'.join(order):<13}] s: atomic {seconds['atomic']:7.3f}  "
        f"plain {seconds['plain']:7.3f} | atomic/plain {seconds['atomic'] / seconds['plain']:.3f}  "
        f"commit {commit_ms:6.1f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows written by each refresh")
    parser.add_argument("--reps", type=int, default=16, help="measured rounds (ABBA: a multiple of 4)")
    parser.add_argument("--smoke", action="store_true", help="20K rows, 2 reps: proves the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.reps = 20_000, 2

    conf = {"spark.sql.sources.partitionOverwriteMode": "dynamic"}  # only INSERT OVERWRITE reads it
    with hive_services("bench-partitions", DATABASE, conf) as services:
        print(f"SQL: {query(REPLACED + ADDED, args.rows)}")
        print(
            f"\nrefresh of {REPLACED} existing + {ADDED} new partitions, {args.rows:,} rows, "
            f"{args.reps} reps after 1 warm-up round; load average {load()}"
        )
        bench = RefreshBench(services, args.rows)
        arms = {"atomic": bench.atomic, "plain": bench.plain}

        def on_rep(rep: int, order: list[str], seconds: dict[str, float]) -> None:
            print_rep(rep, order, seconds, bench.commit_times[rep] * 1000)

        times = alternating_rounds(arms, args.reps, warmups=1, on_rep=on_rep, after_warmup=bench.clear)
        commits, housekeeps = bench.commit_times, bench.housekeep_times
        ratios = paired_ratios(times["atomic"], times["plain"])
        for arm in arms:
            print(f"  {arm:<6} median {statistics.median(times[arm]):7.3f} s  runs {runs_text(times[arm])}")
        print(f"  atomic/plain {ratios.describe()}")
        print(f"  {'':<12} per rep {runs_text(ratios.ratios, 3)}")
        print(f"  atomic/plain target <= {TARGET}: {ratios.verdict(TARGET)}")
        low, high = (1000 * bound for bound in median_interval(commits))
        verdict = "met" if high < COMMIT_TARGET_MS else "NOT met" if low >= COMMIT_TARGET_MS else "unresolved"
        print(
            f"  commit    p50 {percentile_ms(commits, 0.5):6.1f} ms (90% CI {low:.1f}-{high:.1f})  "
            f"p90 {percentile_ms(commits, 0.9):6.1f} ms  max {max(commits) * 1000:6.1f} ms "
            f"(target p50 < {COMMIT_TARGET_MS:.0f} ms: {verdict})"
        )
        print(f"  commit's metastore calls (per commit, p50 ms of one call): {bench.calls.describe()}")
        written = bench.written_times
        print(
            f"  written   p50 {percentile_ms(written, 0.5):6.1f} ms  "
            f"p90 {percentile_ms(written, 0.9):6.1f} ms"
            " (the journal write and the prepared commit's reads and registration, before the commit)"
        )
        print(f"  written's metastore calls (p50 ms of one call): {bench.written_calls.describe()}")
        print(
            f"  housekeep p50 {percentile_ms(housekeeps, 0.5):6.1f} ms  "
            f"p90 {percentile_ms(housekeeps, 0.9):6.1f} ms (after the commit, inside the atomic time)"
        )
        print(f"  load average at the end {load()}")


if __name__ == "__main__":
    main()
