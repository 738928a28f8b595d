"""The Hive sink's commit of one streaming micro-batch, without Spark: what the replay checks cost.

Each rep commits one micro-batch (one staged 1,000-row Parquet file, as Spark's writer leaves it
in ``ready/``) through ``runtime.commit_write`` in each of two arms, in alternating order
(``_common.arm_order``), appending to one table of a Derby-backed metastore:

- ``skip``: the commit path as it is: a batch whose run journaled the batch before it skips the
  replay checks (``sink.recovery.ran_previous_batch``);
- ``checks``: the replay checks on every batch (a ``get_table``, the journal's records of the
  batch, a listing of ``_staging``), as before eb72b64.

Each arm is its own streaming query (its own batch ids and marker). Printed per arm: commit p50
and p90, the metastore calls per commit (and their p50 ms); and the paired ratio skip/checks.
Starts a Derby metastore in a temp home; stops it. Run:
``/work/heavy .venv/bin/python benchmarks/probes/profile_sink_commit.py --reps 60``.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import _benchmarks_path  # noqa: F401 (benchmarks/ on sys.path)
import pyarrow as pa
import pyarrow.parquet as pq
from _common import ThriftCalls, arm_order, load, metastore_only, paired_ratios, percentile_ms

from airflow_provider_staged.sink import recovery as recovery_module
from airflow_provider_staged.sink import runtime
from airflow_provider_staged.sink.api import WriterContext
from airflow_provider_staged.sink.hive import HiveFilesCommittable, HiveSink
from airflow_provider_staged.staging.kinds.hive_sink import READY_DIR, staging_dir
from airflow_provider_staged.staging.manifest import DataFile
from airflow_provider_staged.staging.settings import StagedSettings

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=60)
    args = parser.parse_args()
    with metastore_only("profile-sink-commit", "profile") as metastore:
        home = Path(metastore.home)
        settings = StagedSettings(metastore.uri, metastore.warehouse, str(home / "journal"))
        sample = home / "sample.parquet"
        pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64())}), sample)
        sink = HiveSink("profile.appended", settings)
        calls = ThriftCalls()
        calls.record_calls_of(runtime, "commit_write")
        every_check = recovery_module.ran_previous_batch
        arms = {"skip": every_check, "checks": lambda *_: False}
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        counts: dict[str, dict[str, int]] = {arm: {} for arm in arms}

        def commit(arm: str, batch: int) -> float:
            query = f"q{arm}"
            context = WriterContext(f"{query}-b{batch}-r1", query, batch, "append", SCHEMA, streaming=True)
            staging = staging_dir(sink.root(), context.write_id)
            ready = Path(staging.removeprefix("file:")) / READY_DIR
            ready.mkdir(parents=True)
            shutil.copy(sample, ready / "part-0.parquet")
            files = (DataFile("part-0.parquet", 1000, sample.stat().st_size),)
            committable = HiveFilesCommittable(
                context.write_id, query, batch, True, "append", SCHEMA, staging, None, files
            )
            before = {name: len(values) for name, values in calls.times.items()}
            recovery_module.ran_previous_batch = arms[arm]
            start = time.perf_counter()
            try:
                runtime.commit_write(sink, context, [committable])
            finally:
                recovery_module.ran_previous_batch = every_check
            seconds = time.perf_counter() - start
            for name, values in calls.times.items():
                counts[arm][name] = counts[arm].get(name, 0) + len(values) - before[name]
            return seconds

        print(f"{args.reps} reps, 2 arms; load {load()}", flush=True)
        for batch in range(3):  # warm-up: connections, the table's creation, the metastore's caches
            for arm in arms:
                commit(arm, batch)
        for arm in arms:
            counts[arm].clear()
        for rep in range(args.reps):
            for arm in arm_order(list(arms), rep):
                times[arm].append(commit(arm, rep + 3))
        for arm, values in times.items():
            made = " / ".join(f"{name} {n / args.reps:.0f}x" for name, n in counts[arm].items() if n)
            print(f"  {arm:7s} commit p50 {percentile_ms(values, 0.5):.1f} ms, "
                  f"p90 {percentile_ms(values, 0.9):.1f} ms; metastore calls per commit: {made}")
        print(f"  metastore call p50 ms (both arms): {calls.describe()}")
        print(f"  skip / checks (commit seconds): {paired_ratios(times['skip'], times['checks']).describe()}")
        print(f"load {load()}")


if __name__ == "__main__":
    main()
