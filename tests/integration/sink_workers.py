"""Spark drivers of the sink tests that need a process of their own.

``python -m tests.integration.sink_workers SPEC.json`` runs, by ``spec["mode"]``:

- ``stream`` (the crash tests): a streaming query over a JSON file source (one file per
  micro-batch) into the Hive or the PostgreSQL sink until every file is processed, then exits 0.
  ``STAGED_SINK_FAULT`` (set by the test) kills the whole process group at that point of the
  sink's commit path; the test restarts it from the same checkpoint;
- ``batch_retry``: a batch write on ``local[2,2]`` (a task may fail once) whose task of
  partition 1 fails on its first attempt after writing its files; Spark retries it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from airflow_provider_staged.engine.session import build_session
from airflow_provider_staged.sink.api import SinkWriter, WriterContext
from airflow_provider_staged.sink.hive import HiveFilesCommittable, HiveSink
from airflow_provider_staged.sink.runtime import write_batch, write_stream
from airflow_provider_staged.staging.faults import FAULT_ENV, FAULT_PGID_ENV
from airflow_provider_staged.staging.settings import StagedSettings

REPO = Path(__file__).resolve().parents[2]


def run_driver(
    spec: dict, directory: Path, fault: str | None = None, kill_when: Callable[[], bool] | None = None,
    timeout: float = 240,
) -> tuple[int, str]:
    """Run this module's driver once on ``spec`` (written into ``directory``); SIGKILL its process
    group as soon as ``kill_when()`` is true. Returns its exit code (negative: the signal) and output."""
    path = directory / f"spec-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(spec))
    env = {key: value for key, value in os.environ.items() if key != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.sink_workers", str(path)],
        cwd=REPO, env=env, start_new_session=True, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while kill_when is not None and proc.poll() is None and time.monotonic() < deadline:
            if kill_when():
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, output


class FirstAttemptFails(HiveSink):
    """The Hive sink (Arrow writers) whose task of partition 1 fails once, after staging its files."""

    def create_writer(self, context: WriterContext) -> SinkWriter[HiveFilesCommittable]:
        writer = super().create_writer(context)
        if context.partition_id == 1 and context.attempt_number == 0:
            prepare = writer.prepare_commit

            def fail(flush: bool) -> list[HiveFilesCommittable]:
                prepare(flush)  # the files are written...
                raise RuntimeError("injected failure of the first attempt")  # ...and the task fails

            writer.prepare_commit = fail  # type: ignore[method-assign]
        return writer


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    # The fault hook may run in a Spark Python worker: it kills this driver's whole group.
    os.environ[FAULT_PGID_ENV] = str(os.getpgid(0))
    master = "local[2,2]" if spec["mode"] == "batch_retry" else "local[2]"
    spark = build_session(spec["metastore_uri"], spec["warehouse"], master=master, app_name="sink-worker")
    spark.sparkContext.setLogLevel("ERROR")
    settings = StagedSettings(spec["metastore_uri"], spec["warehouse"], spec["journal_dir"])
    if spec["mode"] == "batch_retry":
        sink = FirstAttemptFails(spec["table"], settings, native=False)
        write_batch(spark.sql("SELECT id FROM range(100)").repartition(4), sink)
        print("done", flush=True)
        return 0
    if spec["sink"] == "hive":
        sink = HiveSink(spec["table"], settings, partition_by=spec.get("partition_by", []),
                        track_partitions=spec.get("track_partitions", False))
    else:
        from airflow_provider_staged.sink.postgres import PostgresSink

        sink = PostgresSink(spec["table"], settings)
    rows = (
        spark.readStream.schema("id BIGINT, v STRING").option("maxFilesPerTrigger", 1).json(spec["input"])
        # Slows the write (per row) so that the test can kill the driver while it writes; always true
        # (``reflect`` of a void method is null), in a form the optimizer does not fold away.
        .where(f"length(coalesce(reflect('java.lang.Thread', 'sleep', CAST({int(spec.get('row_sleep_ms', 0))}"
               " AS BIGINT)), '')) >= 0")
    )
    if spec.get("partition_by"):  # two partitions, each micro-batch appends to both
        rows = rows.selectExpr("id", "v", "CAST(id % 2 AS STRING) AS p")
    query = write_stream(rows, sink, checkpoint_location=spec["checkpoint"], trigger_interval="1 second")
    query.processAllAvailable()
    query.stop()
    spark.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
