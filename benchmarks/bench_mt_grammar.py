"""The definition parser on the DAG-parsing hot path: the grammar now against a baseline revision.

Arms, alternating in one process (``_common.alternating_rounds``), each timing ``--batch``
parses of the same definition (options, partitions, a column list with a key when the baseline
reads one): ``now`` is ``materialized/definition.py`` of the working tree, ``baseline`` the same
file at ``--baseline`` (default: the revision before the Flink grammar), loaded from git.
Also prints the per-statement cost of the SQL client's ``ALTER ... REFRESH PARTITION``.

    python benchmarks/bench_mt_grammar.py --reps 30 --batch 300
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from _common import REPO_ROOT, alternating_rounds, load, paired_ratios, percentile_ms

BASELINE = "e1de956"  # definition.py before the Flink grammar (the old fixed-order parser)
DEFINITION = """-- Daily order counts and revenue per day.
CREATE MATERIALIZED TABLE analytics.orders_daily
COMMENT 'orders per day'
PARTITIONED BY (ds)
WITH (
  'partition.fields.ds.date-formatter' = 'yyyy-MM-dd',
  'owner' = 'data-eng', 'tags' = 'sales, daily', 'retries' = '2'
)
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM raw.orders GROUP BY ds;
"""
STATEMENT = "ALTER MATERIALIZED TABLE analytics.orders_daily REFRESH PARTITION (ds = '2024-01-03')"


def baseline_module(revision: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{revision}:airflow_provider_staged/materialized/definition.py"],
        cwd=REPO_ROOT, check=True, capture_output=True, text=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="bench-grammar-")) / "baseline_definition.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_definition", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=300, help="parses per timed run")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the baseline parser")
    args = parser.parse_args()

    from airflow_provider_staged.materialized.definition import parse_definition
    from airflow_provider_staged.sql.materialized_statements import parse_materialized_statement

    old = baseline_module(args.baseline).parse_definition
    assert parse_definition(DEFINITION).schedule == old(DEFINITION).schedule == "0 0 * * *"

    def arm(parse):  # type: ignore[no-untyped-def]
        def run() -> float:
            start = time.perf_counter()
            for _ in range(args.batch):
                parse(DEFINITION)
            return (time.perf_counter() - start) / args.batch

        return run

    print(f"load before: {load()}")
    times = alternating_rounds({"now": arm(parse_definition), "baseline": arm(old)}, args.reps, warmups=2)
    print(f"load after:  {load()}")
    for name, values in times.items():
        print(f"{name:9s} parse_definition p50 {percentile_ms(values, 0.5) * 1000:7.1f} us  "
              f"p90 {percentile_ms(values, 0.9) * 1000:7.1f} us")
    print("now / baseline:", paired_ratios(times["now"], times["baseline"]).describe())

    start = time.perf_counter()
    for _ in range(args.batch * 10):
        parse_materialized_statement(STATEMENT)
    per_statement = (time.perf_counter() - start) / (args.batch * 10)
    print(f"parse_materialized_statement (ALTER ... REFRESH PARTITION): {per_statement * 1e6:.1f} us")


if __name__ == "__main__":
    main()
