"""The unified sink against Spark's native Parquet writer: batch writes, streaming, commit overhead.

1. Batch (``--rows``, default 1M; the issue's size is 10M), three arms per rep in rotating order
   (``_common.alternating_rounds``) on one ``local[2]`` session and metastore:

   - ``native``: ``df.write.parquet(<fresh dir>)``, no catalog work (the bar);
   - ``hive_sink``: ``write_batch(df, HiveSink(...))``, the built-in Hive sink (Spark's writer
     behind the sink API, plus the journaled commit: one metastore call) appending to a table;
   - ``python_sink``: the same sink with ``native=False``: the Python Data Source's Arrow
     writers (what a custom Python sink costs);
   - ``arrow_discard`` (control): a Python data source whose Arrow writer discards every batch,
     at the sink's batch size: what Spark's Python write path costs before a sink does anything.

   Printed: paired throughput ratios native_seconds / arm_seconds (targets: hive_sink >= 0.95,
   python_sink >= 0.6), and python_sink against the control. ``--batch-arms hive_sink,python_sink``
   leaves the control out (more reps of the two targets in the same time).
2. Streaming: the same rows as ``--batches`` Parquet files, read one file per micro-batch with
   the same trigger (``0 seconds``: as fast as they go) by ``native`` (Spark's file sink),
   ``foreach_batch`` (control: Spark's Parquet writer in ``foreachBatch`` into a fresh directory
   per micro-batch, no commit: what the previous way of writing cost before its commit),
   ``hive_sink`` (``write_stream`` into the Hive sink: Spark's file sink, each logged micro-batch
   published by the driver while the next one is written; timed until the last one is
   published), and ``hive_sink_foreach``, the same sink on its previous path (``foreachBatch``:
   write, then commit, per micro-batch), and ``logged_no_commit`` (control: the new path with the
   commit replaced by nothing: what the file sink and the publisher cost before the commit).
   Printed: paired ratios of sustained rows/s (target
   >= 0.9), per sink arm the commit time per micro-batch (p50 < 100 ms) and the milliseconds per
   micro-batch against native's. ``--stream-arms hive_sink`` runs only that arm beside native
   (more reps in the same time). ``--stream-only`` skips part 1,
   ``--batch-only`` part 2 (to run the batch part alone at the issue's 10M rows).

``--store s3`` puts the batch part's tables and native's output on a local S3 server (S3Proxy
over a temp directory, through ``s3a://``), where the sink has no rename: each write's files are
moved one by one (a server-side copy and a delete) into the version its commit switches to.

Starts its own metastore and Spark; stops both. Run:
``/work/heavy .venv/bin/python benchmarks/bench_sink.py --rows 1000000 --reps 3``.
"""

from __future__ import annotations

import argparse
import itertools
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
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from airflow_provider_staged.sink import runtime
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage import files

DATABASE = "bench_sink"
STREAM_ARMS = ("foreach_batch", "hive_sink", "hive_sink_foreach", "logged_no_commit")
BATCH_ARMS = ("hive_sink", "python_sink", "arrow_discard")


class _DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()


class DiscardDataSource(DataSource):
    """The control arm: Spark's Python (Arrow) write path with a writer that keeps nothing."""

    @classmethod
    def name(cls) -> str:
        return "bench_discard"

    def writer(self, schema, overwrite) -> _DiscardWriter:
        return _DiscardWriter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10, help="micro-batches of the streaming part")
    parser.add_argument("--warmups", type=int, default=1, help="uncounted rounds first (JIT, Python workers)")
    parts = parser.add_mutually_exclusive_group()
    parts.add_argument("--stream-only", action="store_true", help="skip the batch part")
    parts.add_argument("--batch-only", action="store_true", help="skip the streaming part")
    parser.add_argument("--stream-arms", type=lambda text: [arm for arm in text.split(",") if arm],
                        default=list(STREAM_ARMS), help=f"streaming arms beside native, of {STREAM_ARMS}")
    parser.add_argument("--batch-arms", type=lambda text: [arm for arm in text.split(",") if arm],
                        default=list(BATCH_ARMS), help=f"batch arms beside native, of {BATCH_ARMS}")
    parser.add_argument("--store", choices=("local", "s3"), default="local",
                        help="where the batch part writes: the local disk, or a local S3 server (s3a://)")
    args = parser.parse_args()
    if args.store == "s3" and not args.batch_only:
        parser.error("--store s3 measures the batch part: add --batch-only")
    with hive_services("bench-sink", DATABASE, s3=args.store == "s3") as services:
        spark = services.spark
        spark.dataSource.register(DiscardDataSource)
        journal = str(services.home / "journal")
        settings = StagedSettings(services.metastore_uri, str(services.warehouse), journal)
        query = f"SELECT id, id % 100 AS k, concat('v', CAST(id AS STRING)) AS s FROM range({args.rows})"
        counter = itertools.count()

        def native() -> float:
            path = f"{services.location}/native-{next(counter)}"
            seconds = stopwatch(lambda: spark.sql(query).write.parquet(path))
            files.delete_dir(path)
            return seconds

        def discard() -> float:
            with runtime.arrow_batch_rows(spark, HiveSink.arrow_batch_rows):
                return stopwatch(lambda: spark.sql(query).write.format("bench_discard").mode("append").save())

        def sink_arm(native_writer: bool) -> float:
            sink = HiveSink(f"{DATABASE}.t_{uuid.uuid4().hex[:8]}", settings, native=native_writer)
            return stopwatch(lambda: runtime.write_batch(spark.sql(query), sink))

        if not args.stream_only:
            print(f"batch: {args.rows:,} rows on {args.store}, {args.reps} reps; load {load()}", flush=True)
            arms = {"hive_sink": lambda: sink_arm(True), "python_sink": lambda: sink_arm(False),
                    "arrow_discard": discard}
            unknown = set(args.batch_arms) - set(arms)
            if unknown:
                parser.error(f"--batch-arms: unknown arm(s) {sorted(unknown)}, not of {BATCH_ARMS}")
            times = alternating_rounds(
                {"native": native, **{name: arms[name] for name in args.batch_arms}},
                args.reps,
                args.warmups,
            )
            for name, values in times.items():
                print(f"  {name:12s} s: {runs_text(values)}")
            for name, target in (("hive_sink", 0.95), ("python_sink", 0.6), ("arrow_discard", None)):
                if name in times:
                    ratios = paired_ratios(times["native"], times[name])
                    wanted = f" (target >= {target})" if target else " (control)"
                    print(f"  {name} throughput / native: {ratios.describe()}{wanted}", flush=True)
            if {"arrow_discard", "python_sink"} <= set(times):
                print(f"  python_sink throughput / arrow_discard: "
                      f"{paired_ratios(times['arrow_discard'], times['python_sink']).describe()}", flush=True)
        if not args.batch_only:
            stream_part(spark, settings, services.home, args)


def stream_part(spark, settings: StagedSettings, home, args) -> None:
    source = str(home / "stream-input")
    data = spark.sql(f"SELECT id, id % 100 AS k FROM range({args.rows})")
    data.repartition(args.batches).write.parquet(source)
    schema = spark.read.parquet(source).schema
    commits: list[float] = []
    timed_method(runtime, "commit_write", commits)
    per_arm: dict[str, list[float]] = {}  # counted reps: commits
    counter = itertools.count()
    logs_files, commit_write = runtime._logs_files, runtime.commit_write

    def stream(arm: str) -> float:
        run = next(counter)
        rows = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)
        checkpoint = str(home / f"checkpoint-{run}")
        if arm == "native":
            query = (rows.writeStream.format("parquet").option("path", str(home / f"out-{run}"))
                     .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
        elif arm == "foreach_batch":
            out = home / f"out-{run}"
            query = (rows.writeStream.foreachBatch(lambda df, batch: df.write.parquet(str(out / f"b{batch}")))
                     .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
        else:
            sink = HiveSink(f"{DATABASE}.s_{uuid.uuid4().hex[:8]}", settings)
            if arm == "hive_sink_foreach":
                runtime._logs_files = lambda *_: False
            elif arm == "logged_no_commit":
                runtime.commit_write = lambda *_: True
            query = runtime.write_stream(
                rows, sink, checkpoint_location=checkpoint, trigger_interval="0 seconds"
            )
        first_commit = len(commits)
        try:
            seconds = stopwatch(query.processAllAvailable)  # the sink's: until published
        finally:
            runtime._logs_files, runtime.commit_write = logs_files, commit_write
        query.stop()
        per_arm.setdefault(arm, []).extend(commits[first_commit:])
        return args.rows / seconds  # rows/s

    print(f"streaming: {args.rows:,} rows in {args.batches} micro-batches, {args.reps} reps; load {load()}",
          flush=True)
    arms = ("native", *args.stream_arms)
    sink_arms = [arm for arm in arms if arm.startswith("hive_sink")]
    rates = alternating_rounds({arm: lambda arm=arm: stream(arm) for arm in arms}, args.reps,
                               args.warmups, after_warmup=per_arm.clear)
    for name, values in rates.items():
        print(f"  {name:16s} rows/s: {runs_text(values, 0)}")
    # Rates, not seconds: the sink's rate over native's is the throughput ratio.
    for arm in arms[1:]:
        ratios = paired_ratios(rates[arm], rates["native"])
        print(f"  {arm} rows/s / native: {ratios.describe()} (target >= 0.9)")
    if {"hive_sink", "hive_sink_foreach"} <= set(arms):
        print(f"  hive_sink rows/s / hive_sink_foreach (the logged path against the previous one): "
              f"{paired_ratios(rates['hive_sink'], rates['hive_sink_foreach']).describe()}")
    native_ms = percentile_ms([args.rows / args.batches / rate for rate in rates["native"]], 0.5)
    for arm in sink_arms:
        arm_commits = per_arm[arm]
        arm_ms = percentile_ms([args.rows / args.batches / rate for rate in rates[arm]], 0.5)
        print(f"  {arm}: commit per micro-batch p50 {percentile_ms(arm_commits, 0.5):.0f} ms, "
              f"p90 {percentile_ms(arm_commits, 0.9):.0f} ms over {len(arm_commits)} (target p50 < 100 ms); "
              f"ms per micro-batch p50 {arm_ms:.0f} (native {native_ms:.0f})", flush=True)

if __name__ == "__main__":
    main()
