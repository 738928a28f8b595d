"""``staged sql`` streaming queries (``-e``/``-f``: availableNow) against the same query in batch mode.

One in-process SQL session (embedded mode, ``local[2]``, a throwaway metastore) over a Parquet
table of ``--files`` files of ``--rows`` rows each. Per rep, alternating (``_common.arm_order``):

- ``batch_select`` / ``stream_select``: ``SELECT k, v FROM t`` collected, or run as a stream that
  reads every file now there and prints nothing (its changes are consumed);
- ``batch_agg`` / ``stream_agg``: ``SELECT k, sum(v), count(*) FROM t GROUP BY k`` (the stream in
  Spark's update mode, the client's -U/+U bookkeeping).

Printed: every rep's seconds, then the paired ratios stream/batch (what a streaming query costs
over the batch one: the query's start, its temporary checkpoint, the state store of an
aggregation). Both arms return every row (``max-table-result.rows`` above the table's size).

``.venv/bin/python benchmarks/bench_sql_streaming.py --reps 6`` (run through /work/heavy here).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import alternating_rounds, hive_services, load, paired_ratios, runs_text

DATABASE = "bench_stream"
TABLE = f"{DATABASE}.events"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6, help="timed reps per arm (even: ABBA balanced)")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows", type=int, default=1000, help="rows per file")
    parser.add_argument("--keys", type=int, default=100, help="distinct keys of the aggregation")
    args = parser.parse_args()

    from airflow_provider_staged.cli.sql import catalog_settings, make_session
    from airflow_provider_staged.sql.properties import SessionProperties
    from airflow_provider_staged.sql.splitting import split_statements

    with hive_services("bench-sql-streaming", DATABASE) as services:
        spark = services.spark
        spark.sql(f"CREATE TABLE {TABLE} (k STRING, v BIGINT) USING parquet")
        for number in range(args.files):
            spark.sql(f"INSERT INTO {TABLE} SELECT /*+ COALESCE(1) */ CAST(id % {args.keys} AS STRING), id "
                      f"FROM range({number * args.rows}, {(number + 1) * args.rows})")
        total = args.files * args.rows
        settings = catalog_settings(services.metastore_uri, str(services.warehouse))
        sessions = {}
        for mode in ("batch", "streaming"):
            properties = SessionProperties({"execution.runtime-mode": mode,
                                            "sql-client.execution.max-table-result.rows": str(total + 1)})
            sessions[mode] = make_session(spark, properties, lambda: settings)
        queries = {"select": f"SELECT k, v FROM {TABLE}",
                   "agg": f"SELECT k, sum(v) AS total, count(*) AS n FROM {TABLE} GROUP BY k"}
        expected = {"select": total, "agg": args.keys}

        def run(mode: str, kind: str) -> float:
            (statement,) = split_statements(queries[kind])
            started = time.perf_counter()
            result = sessions[mode].execute(statement)
            count = (len(result.rows) if result.changes is None
                     else sum(len(batch.rows) for batch in result.changes if batch.kinds))
            seconds = time.perf_counter() - started
            if count != expected[kind]:
                raise SystemExit(f"{mode} {kind}: {count} rows, expected {expected[kind]}")
            return seconds

        arms = {f"{'batch' if mode == 'batch' else 'stream'}_{kind}": (lambda m=mode, k=kind: run(m, k))
                for mode in ("batch", "streaming") for kind in ("select", "agg")}

        def on_rep(rep: int, order: list[str], seconds: dict[str, float]) -> None:
            print(f"rep {rep + 1}: " + "  ".join(f"{name} {seconds[name]:.2f}s" for name in order)
                  + f"  (load {load()})", flush=True)

        times = alternating_rounds(arms, args.reps, on_rep=on_rep)
        print(f"\n{args.files} files x {args.rows} rows, {args.keys} keys; {args.reps} reps; load {load()}")
        for name, values in times.items():
            print(f"{name:14s} median {statistics.median(values):.2f}s  runs {runs_text(values)}")
        for kind in ("select", "agg"):
            ratios = paired_ratios(times[f"stream_{kind}"], times[f"batch_{kind}"])
            print(f"stream/batch {kind}: {ratios.describe()}")


if __name__ == "__main__":
    main()
