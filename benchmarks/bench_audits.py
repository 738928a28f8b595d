"""What audits cost: an audited atomic replace against the unaudited one, paired and alternating.

Three arms replace one table each (built untimed first), on the same query, metastore and
``local[2]`` session, through the operator's path (``execution.execute_staged`` with an
``EmbeddedEngine`` on this session: begin, Spark write, written, audit, commit, housekeep):

- ``unaudited``: the atomic replace without audits;
- ``audited``: three row expectations (observed during the write), a key uniqueness (one
  aggregation over the staged files) and a row-count change check (the replaced version's
  recorded rows, from the journal);
- ``row_only``: the three row expectations alone.

Each rep runs every arm once, in an order that rotates every rep (``_common.arm_order``: all 6
orders in every 6 reps), after one uncounted warm-up round per size. Per pair: the paired
ratios' median with its bootstrap 90% interval (``_common.paired_ratios``).
Targets (issue 34): audited/unaudited <= 1.10 and row_only/unaudited <= 1.03 at 10M rows.

Starts its own metastore (Derby, temp home) and one SparkSession; stops both, removes the home.
Run: ``.venv/bin/python benchmarks/bench_audits.py`` (smoke run: ``--smoke``).
"""

from __future__ import annotations

import argparse
import statistics

from _common import (
    HiveServices,
    alternating_rounds,
    embedded_engine,
    hive_services,
    load,
    paired_ratios,
    runs_text,
    stopwatch,
)

from airflow_provider_staged.engine.execution import execute_staged
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.audits import AuditSuite, RowCountChange, RowExpectation, unique
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy

DATABASE = "bench"
SQL = "SELECT id, id % 1000 AS k, rand(42) AS v, CAST(id AS STRING) AS s FROM range({rows})"
ROW_AUDITS = (
    RowExpectation("k_non_negative", "k >= 0"),
    RowExpectation("v_in_unit", "v BETWEEN 0 AND 1"),
    RowExpectation("s_present", "s IS NOT NULL"),
)
ARMS = {
    "unaudited": AuditSuite(),
    "audited": AuditSuite((*ROW_AUDITS, unique("id"), RowCountChange("no_shrink", 0.5))),
    "row_only": AuditSuite(ROW_AUDITS),
}
TARGETS = {("audited", "unaudited"): 1.10, ("row_only", "unaudited"): 1.03}
TTL_SECONDS = 3600.0  # the operator's default attempt TTL (sets the heartbeat interval)
RETENTION = RetentionPolicy()


class AuditBlock:
    """One table per arm at one size, replaced every rep."""

    def __init__(self, services: HiveServices, rows: int) -> None:
        self.services = services
        self.sql = SQL.format(rows=rows)
        journal_dir = services.home / "journals" / str(rows)
        self.journal = FileJournal(journal_dir)
        self.engine = embedded_engine(services, journal_dir)
        self.tables = {arm: f"{arm}_{rows}" for arm in ARMS}
        for arm in ARMS:
            self.build(arm, StagingPurpose.CREATE_TABLE_AS)

    def build(self, arm: str, purpose: StagingPurpose = StagingPurpose.REPLACE_TABLE_AS) -> float:
        identifier = TableIdentifier(DATABASE, self.tables[arm])
        staged = HiveStagedTable(identifier, purpose, self.journal, self.services.metastore_uri, RETENTION)
        staged.audits = ARMS[arm]
        return stopwatch(lambda: execute_staged(staged, self.engine, self.sql, {}, TTL_SECONDS))

    def close(self) -> None:
        for table in self.tables.values():
            self.services.spark.sql(f"DROP TABLE IF EXISTS {DATABASE}.{table}")


def print_rep(rep: int, order: list[str], seconds: dict[str, float]) -> None:
    times = "  ".join(f"{arm} {seconds[arm]:7.3f}" for arm in ARMS)
    ratios = "  ".join(f"{a}/{b} {seconds[a] / seconds[b]:.3f}" for a, b in TARGETS)
    print(f"  rep {rep + 1:>2} [{'>'.join(order):<28}] s: {times} | {ratios}", flush=True)


def run_size(services: HiveServices, rows: int, reps: int) -> None:
    print(f"\n=== {rows:,} rows, {reps} reps after 1 warm-up round; load average {load()}", flush=True)
    block = AuditBlock(services, rows)
    try:
        arms = {arm: (lambda arm=arm: block.build(arm)) for arm in ARMS}
        times = alternating_rounds(arms, reps, warmups=1, on_rep=print_rep)
    finally:
        block.close()
    for arm in ARMS:
        print(f"  {arm:<10} median {statistics.median(times[arm]):7.3f} s  runs {runs_text(times[arm])}")
    for (numerator, denominator), target in TARGETS.items():
        ratios = paired_ratios(times[numerator], times[denominator])
        print(f"  {numerator + '/' + denominator:<20} {ratios.describe()}")
        print(f"  {'':<20} target <= {target}: {ratios.verdict(target)}")
    print(f"  load average at the end {load()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="comma-separated row counts")
    parser.add_argument("--reps", type=int, default=12, help="measured rounds per size")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 reps: proves the script runs")
    args = parser.parse_args()
    sizes = [int(value) for value in args.sizes.split(",") if value.strip()]
    if args.smoke:
        sizes, args.reps = [20_000], 2
    with hive_services("bench-audits", DATABASE) as services:
        print(f"SQL: {SQL.format(rows='N')}; audits: {[e.name for e in ARMS['audited'].expectations]}")
        for rows in sizes:
            run_size(services, rows, args.reps)


if __name__ == "__main__":
    main()
