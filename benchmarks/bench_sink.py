"""The unified sink against Spark's native Parquet writer: batch writes, streaming, commit overhead.

1. Batch (``--rows``, default 1M; the issue's size is 10M), three arms per rep in rotating order
   (``_common.alternating_rounds``) on one ``local[2]`` session and metastore:

   - ``native``: ``df.write.parquet(<fresh dir>)``, no catalog work (the bar);
   - ``hive_sink``: ``write_batch(df, HiveSink(...))``, the built-in Hive sink (Spark's writer
     behind the sink API, plus the journaled commit: one metastore call) appending to a table;
   - ``python_sink``: the same sink with ``native=False``: the Python Data Source's Arrow
     writers (what a custom Python sink costs).

   Printed: paired throughput ratios native_seconds / arm_seconds (targets: hive_sink >= 0.95,
   python_sink >= 0.6).
2. Streaming: the same rows as ``--batches`` Parquet files, read one file per micro-batch with
   the same trigger (``0 seconds``: as fast as they go) by ``native`` (Spark's file sink) and
   ``hive_sink`` (``write_stream`` into the Hive sink, foreachBatch). Printed: paired ratios
   of sustained rows/s (target >= 0.9) and the sink's commit time per micro-batch (p50 < 100 ms).

Starts its own metastore and Spark; stops both. Run:
``/work/heavy .venv/bin/python benchmarks/bench_sink.py --rows 1000000 --reps 3``.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import uuid

from _common import (
    alternating_rounds,
    hive_services,
    load,
    paired_ratios,
    percentile_ms,
    runs_text,
    stopwatch,
    timed_method,
)

from airflow_provider_staged.settings import StagedSettings
from airflow_provider_staged.sink import runtime
from airflow_provider_staged.sink.hive import HiveSink

DATABASE = "bench_sink"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10, help="micro-batches of the streaming part")
    args = parser.parse_args()
    with hive_services("bench-sink", DATABASE) as services:
        spark = services.spark
        journal = str(services.home / "journal")
        settings = StagedSettings(services.metastore_uri, str(services.warehouse), journal)
        query = f"SELECT id, id % 100 AS k, concat('v', CAST(id AS STRING)) AS s FROM range({args.rows})"
        counter = itertools.count()

        def native() -> float:
            path = str(services.home / f"native-{next(counter)}")
            seconds = stopwatch(lambda: spark.sql(query).write.parquet(path))
            shutil.rmtree(path, ignore_errors=True)
            return seconds

        def sink_arm(native_writer: bool) -> float:
            sink = HiveSink(f"{DATABASE}.t_{uuid.uuid4().hex[:8]}", settings, native=native_writer)
            return stopwatch(lambda: runtime.write_batch(spark.sql(query), sink))

        print(f"batch: {args.rows:,} rows, {args.reps} reps; load {load()}", flush=True)
        times = alternating_rounds(
            {"native": native, "hive_sink": lambda: sink_arm(True), "python_sink": lambda: sink_arm(False)},
            args.reps,
        )
        for name, values in times.items():
            print(f"  {name:12s} s: {runs_text(values)}")
        for name, target in (("hive_sink", 0.95), ("python_sink", 0.6)):
            ratios = paired_ratios(times["native"], times[name])
            print(f"  {name} throughput / native: {ratios.describe()} (target >= {target})", flush=True)
        stream_part(spark, settings, services.home, args)


def stream_part(spark, settings: StagedSettings, home, args) -> None:
    source = str(home / "stream-input")
    data = spark.sql(f"SELECT id, id % 100 AS k FROM range({args.rows})")
    data.repartition(args.batches).write.parquet(source)
    schema = spark.read.parquet(source).schema
    commits: list[float] = []
    timed_method(runtime, "commit_write", commits)
    counter = itertools.count()

    def stream(arm: str) -> float:
        run = next(counter)
        rows = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)
        checkpoint = str(home / f"checkpoint-{run}")
        if arm == "native":
            query = (rows.writeStream.format("parquet").option("path", str(home / f"out-{run}"))
                     .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
        else:
            sink = HiveSink(f"{DATABASE}.s_{uuid.uuid4().hex[:8]}", settings)
            query = runtime.write_stream(
                rows, sink, checkpoint_location=checkpoint, trigger_interval="0 seconds"
            )
        seconds = stopwatch(query.processAllAvailable)
        query.stop()
        return args.rows / seconds  # rows/s

    print(f"streaming: {args.rows:,} rows in {args.batches} micro-batches, {args.reps} reps; load {load()}",
          flush=True)
    rates = alternating_rounds({"native": lambda: stream("native"), "hive_sink": lambda: stream("sink")},
                               args.reps)
    for name, values in rates.items():
        print(f"  {name:12s} rows/s: {runs_text(values, 0)}")
    # Rates, not seconds: the sink's rate over native's is the throughput ratio.
    ratios = paired_ratios(rates["hive_sink"], rates["native"])
    print(f"  hive_sink rows/s / native: {ratios.describe()} (target >= 0.9)")
    print(f"  sink commit per micro-batch: p50 {percentile_ms(commits, 0.5):.0f} ms, "
          f"p90 {percentile_ms(commits, 0.9):.0f} ms over {len(commits)} (target p50 < 100 ms)", flush=True)


if __name__ == "__main__":
    main()
