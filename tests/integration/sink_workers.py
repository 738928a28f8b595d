"""The streaming driver of the sink crash tests: a child process the test SIGKILLs.

``python -m tests.integration.sink_workers SPEC.json`` runs a streaming query over a JSON file
source (one file per micro-batch) into the Hive or the PostgreSQL sink until every file is
processed, then exits 0. ``STAGED_SINK_FAULT`` (set by the test) kills the whole process group
at that point of the sink's commit path; the test restarts it from the same checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from airflow_provider_staged.engine.session import build_session
from airflow_provider_staged.settings import StagedSettings
from airflow_provider_staged.sink.api import FAULT_PGID_ENV
from airflow_provider_staged.sink.runtime import write_stream


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    # The fault hook may run in a Spark Python worker: it kills this driver's whole group.
    os.environ[FAULT_PGID_ENV] = str(os.getpgid(0))
    spark = build_session(spec["metastore_uri"], spec["warehouse"], master="local[2]", app_name="sink-crash")
    spark.sparkContext.setLogLevel("ERROR")
    settings = StagedSettings(spec["metastore_uri"], spec["warehouse"], spec["journal_dir"])
    if spec["sink"] == "hive":
        from airflow_provider_staged.sink.hive import HiveSink

        sink = HiveSink(spec["table"], settings)
    else:
        from airflow_provider_staged.sink.postgres import PostgresSink

        sink = PostgresSink(spec["table"], settings)
    rows = (
        spark.readStream.schema("id BIGINT, v STRING").option("maxFilesPerTrigger", 1).json(spec["input"])
        # Slows the write (per row) so that the test can kill the driver while it writes.
        .where(f"reflect('java.lang.Thread', 'sleep', CAST({int(spec.get('row_sleep_ms', 0))} AS BIGINT))"
               " IS NULL")
    )
    query = write_stream(rows, sink, checkpoint_location=spec["checkpoint"], trigger_interval="1 second")
    query.processAllAvailable()
    query.stop()
    spark.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
