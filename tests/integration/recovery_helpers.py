"""The tables, queries and attempts of test_recovery_matrix.py, shared with the process it SIGKILLs.

``python -m tests.integration.recovery_helpers PLAN.json`` is that process: it drives each
planned attempt through the staging API (its own Spark session) up to an exact step, writes
the marker file naming the attempts, then blocks until it is killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import TaskRef
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds import from_record
from airflow_provider_staged.staging.kinds.continuous_partitions import ContinuousPartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy

# Superseded versions stay (within the grace period), abandoned attempts never do: exact expectations.
RETENTION = RetentionPolicy(keep_versions=1, max_age_seconds=None, grace_seconds=3600)
INJECTED = "injected mid-write failure"
# With the v2 output committer a finished Spark task moves its files into the attempt's directory
# at once, so a job that fails later leaves them there: what a driver killed mid-write leaves.
MID_WRITE_OPTIONS = {"mapreduce.fileoutputcommitter.algorithm.version": "2"}


def _failing(select: str, source: str) -> str:
    """``select`` over ``source`` in 4 Spark tasks, the last of which fails (the others finish first:
    local Spark runs at most 2 at a time, in order)."""
    return f"SELECT {select} FROM (SELECT /*+ REPARTITION(4) */ id FROM {source})"


def _fail(expression: str) -> str:
    return f"IF(spark_partition_id() = 3, raise_error('{INJECTED}'), {expression})"


TABLE_OLD_SQL = "SELECT id, concat('old-', id) AS label FROM range(600)"
TABLE_NEW_SQL = "SELECT id, concat('new-', id) AS label FROM range(900)"
TABLE_FAIL_SQL = _failing(f"{_fail('id')} AS id, concat('new-', id) AS label", "range(900)")

PARTITION_COLUMNS = ["region", "ds"]
# The refresh touches region=eu: it rewrites ds=2024-01-01 and 2024-01-02 and adds 2024-01-03;
# region=us/ds=2024-01-01 is the untouched neighbour.
PARTITION_SPEC = {"region": "eu"}
PART_OLD_SQL = (
    "SELECT id, concat('old-', id) AS label, IF(id % 3 = 2, 'us', 'eu') AS region, "
    "concat('2024-01-0', CAST(id % 3 % 2 + 1 AS STRING)) AS ds FROM range(600)"
)
PART_NEW_SQL = (
    "SELECT id, concat('new-', id) AS label, 'eu' AS region, "
    "concat('2024-01-0', CAST(id % 3 + 1 AS STRING)) AS ds FROM range(900)"
)
PART_FAIL_SQL = _failing(
    f"{_fail('id')} AS id, concat('new-', id) AS label, 'eu' AS region, "
    "concat('2024-01-0', CAST(id % 3 + 1 AS STRING)) AS ds",
    "range(900)",
)

# The one-time refresh of a CONTINUOUS table (hive_partitions_continuous) reads what its stream
# committed up to micro-batch STREAM_AFTER_BATCH; the stream's next micro-batch put LATER_SQL's
# rows into region=eu/ds=2024-01-01 meanwhile (a file named by the sink's write id), and the
# switch must carry them over: the table reads them before and after.
STREAM_QUERY_ID = "5d0c2f9e-7a41-4c6b-9a0e-2f1d3c4b5a69"
STREAM_AFTER_BATCH = 4
STREAM_LATER_FILE = f"{STREAM_QUERY_ID}-b{STREAM_AFTER_BATCH + 1}-part-00000.parquet"
LATER_SQL = (
    "SELECT id, concat('later-', id) AS label, 'eu' AS region, '2024-01-01' AS ds FROM range(2000, 2010)"
)

JDBC_OLD_ROWS = 500  # id 1..500, v = 2 * id (written with SQL into the staged table)
JDBC_NEW_ROWS = 800
JDBC_NEW_SQL = f"SELECT id, id * 3 AS v FROM range(1, {JDBC_NEW_ROWS + 1})"
JDBC_FAIL_SQL = _failing(f"id, {_fail('id * 3')} AS v", f"range(1, {JDBC_NEW_ROWS + 1})")

# The lifecycle kinds write no data: their NEW content is what the table reads once they landed.
EXPIRED_DAY = "2024-01-01"  # both partitions of this day expire (1-day TTL on ds, clock at 01-02 12:00)
EXPIRE_NEW_SQL = f"SELECT * FROM ({PART_OLD_SQL}) WHERE ds <> '{EXPIRED_DAY}'"
# The sink kinds write through the sink's own writers: what a sink append adds (the table reads OLD
# plus these), what a sink overwrite replaces it with.
HIVE_APPEND_SQL = "SELECT id, concat('app-', id) AS label FROM range(600, 700)"
JDBC_APPEND_ROWS = 300  # id 501..800, v = 2 * id: OLD plus these read as 800 rows of OLD's formula
_APPENDED = f"{JDBC_OLD_ROWS + 1}, {JDBC_OLD_ROWS + JDBC_APPEND_ROWS + 1}"
JDBC_APPEND_SQL = f"SELECT id, id * 2 AS v FROM range({_APPENDED})"
SINK_WRITES = {
    "hive_append": HIVE_APPEND_SQL, "hive_overwrite": TABLE_NEW_SQL, "jdbc_append": JDBC_APPEND_SQL,
    "sink": HIVE_APPEND_SQL,  # a staged build into the Hive sink (append)
}
NEW_SQL = {
    "hive_table": TABLE_NEW_SQL,
    "hive_partitions": PART_NEW_SQL,
    "hive_partitions_continuous": PART_NEW_SQL,
    "hive_partitions_discovered": PART_NEW_SQL,
    "jdbc_table": JDBC_NEW_SQL,
    "hive_expire": EXPIRE_NEW_SQL,
    "hive_rollback": TABLE_NEW_SQL,  # the kept version it restores
    "hive_rollback_partitions": PART_OLD_SQL,  # the kept version (NEW keeps a partition it lacks)
    **SINK_WRITES,
}
# A sink kind's failing write is its own writers with the second task failing (the harness injects it).
FAIL_SQL = {
    "hive_table": TABLE_FAIL_SQL, "hive_partitions": PART_FAIL_SQL,
    "hive_partitions_continuous": PART_FAIL_SQL, "hive_partitions_discovered": PART_FAIL_SQL,
    "jdbc_table": JDBC_FAIL_SQL, **SINK_WRITES,
}


def new_attempt(
    kind: str, target: str, journal: FileJournal, metastore_uri: str, task: TaskRef | None
) -> JournaledStagedTable:
    """The attempt that replaces (refreshes) ``target`` with the NEW content."""
    if kind == "hive_table":
        return HiveStagedTable(
            TableIdentifier.parse(target),
            StagingPurpose.REPLACE_TABLE_AS,
            journal,
            metastore_uri,
            RETENTION,
            task=task,
        )
    if kind.startswith("hive_partitions"):
        # The continuous kind is the same refresh, beside a stream whose later micro-batch it keeps;
        # the discovered one, of a table whose partitions Spark found from its directories.
        continuous = kind == "hive_partitions_continuous"
        kind_class = ContinuousPartitionStagedTable if continuous else HivePartitionStagedTable
        stream = {"query_id": STREAM_QUERY_ID, "after_batch": STREAM_AFTER_BATCH} if continuous else {}
        return kind_class(
            TableIdentifier.parse(target),
            PARTITION_COLUMNS,
            PARTITION_SPEC,
            journal,
            metastore_uri,
            RETENTION,
            task=task,
            **stream,
        )
    from airflow_provider_staged.staging.kinds.jdbc_table import JdbcStagedTable, JdbcTarget

    return JdbcStagedTable(JdbcTarget.parse(target), StagingPurpose.REPLACE_TABLE_AS, journal, task=task)


def write_spec(staged: JournaledStagedTable, mid_write: bool = False) -> dict[str, Any]:
    """The job's spec; its secrets go to the environment, as the engines pass them."""
    os.environ.update(staged.job_env())
    spec = staged.write_spec()
    return {**spec, "options": MID_WRITE_OPTIONS} if mid_write else spec


def child(plan_path: str) -> None:
    """Drive the planned attempts up to their steps, write the marker, block until killed."""
    from airflow_provider_staged.engine.session import build_session
    from airflow_provider_staged.engine.spark_job import run_staged_write

    plan = json.loads(Path(plan_path).read_text())
    spark = build_session(plan["metastore_uri"], plan["warehouse"], master="local[1]", app_name="killed")
    spark.sparkContext.setLogLevel("ERROR")
    reached = {}
    for item in plan["attempts"]:
        journal = FileJournal(item["journal"])
        task = TaskRef(**item["task"]) if item["task"] else None
        if "manifest" in item:
            # A lifecycle attempt (expiry, rollback) that the test planned and began: rebuilt from
            # the journal by its kind, as reconcile rebuilds it; its "write" is the given manifest.
            settings = StagedSettings(
                plan["metastore_uri"], plan["warehouse"], item["journal"], retention=RETENTION
            )
            staged = from_record(journal.require(item["attempt_id"]), settings)
            staged.written(item["manifest"])
        else:
            staged = new_attempt(item["kind"], item["target"], journal, plan["metastore_uri"], task)
            staged.begin()
            staged.written(run_staged_write(spark, NEW_SQL[item["kind"]], write_spec(staged)))
        if item["step"] == "after_catalog":
            staged.publish(journal.require(staged.attempt_id))  # the catalog call, not journaled
        reached[item["name"]] = staged.attempt_id
    marker = Path(plan["marker"])
    partial = marker.with_name(marker.name + ".tmp")
    partial.write_text(json.dumps(reached))
    os.replace(partial, marker)
    while True:  # "the process dies here": the test SIGKILLs it
        time.sleep(60)


if __name__ == "__main__":
    child(sys.argv[1])
