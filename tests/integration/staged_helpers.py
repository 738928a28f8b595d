"""Helpers shared by the integration tests: build through the staging API, read like a reader."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.metastore.tables import current_location
from airflow_provider_staged.services.metastore import MetastoreInfo
from airflow_provider_staged.staging.api import StagingJobStatusHook, StagingPurpose
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy


def staged_table(
    metastore: MetastoreInfo,
    journal: AttemptJournal,
    target: str,
    purpose: str,
    retention: RetentionPolicy | None = None,
) -> HiveStagedTable:
    return HiveStagedTable(
        TableIdentifier.parse(target), StagingPurpose.parse(purpose), journal, metastore.uri, retention
    )


def build(spark: Any, staged: HiveStagedTable, sql: str) -> HiveStagedTable:
    """begin → write → commit, aborting on failure (what the operator does)."""
    hook = StagingJobStatusHook(staged)
    hook.on_created(staged.attempt_id)
    if staged.skipped:
        return staged
    try:
        staged.written(run_staged_write(spark, sql, staged.write_spec()))
        hook.on_finished(staged.attempt_id)
    except BaseException as error:
        hook.on_failed(staged.attempt_id, error)
        raise
    staged.housekeep()
    return staged


def begin_and_write(spark: Any, staged: HiveStagedTable, sql: str) -> HiveStagedTable:
    """An attempt that wrote its data but has not committed (a task that died before commit)."""
    staged.begin()
    staged.written(run_staged_write(spark, sql, staged.write_spec()))
    return staged


def snapshot(spark: Any, target: str) -> tuple[int, int] | None:
    """(rows, checksum) as a new reader sees the table, or None when it does not exist."""
    database, table = target.split(".")
    if not spark.catalog.tableExists(table, database):
        return None
    spark.catalog.refreshTable(target)
    row = spark.sql(f"SELECT count(*) AS n, coalesce(sum(hash(*)), 0) AS h FROM {target}").first()
    return int(row.n), int(row.h)


def expected_snapshot(spark: Any, sql: str) -> tuple[int, int]:
    row = spark.sql(f"SELECT count(*) AS n, coalesce(sum(hash(*)), 0) AS h FROM ({sql})").first()
    return int(row.n), int(row.h)


def version_dirs(metastore: MetastoreInfo, target: str) -> list[str]:
    """Names of the version directories under the table's root."""
    database, table = target.split(".")
    root = Path(metastore.warehouse) / f"{database}.db" / table
    return sorted(p.name for p in root.glob("_v=*")) if root.exists() else []


def table_location(metastore: MetastoreInfo, target: str) -> str | None:
    database, table = target.split(".")
    with MetastoreClient(metastore.uri) as client:
        found = client.get_table(database, table)
    return current_location(found) if found is not None else None


def wait_for_open_attempt(
    journal: AttemptJournal, target: str, process: subprocess.Popen, timeout: float = 240.0
) -> AttemptRecord:
    """The first attempt on ``target`` that is still open, a few seconds into its Spark job."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_records = [r for r in journal.records() if r.target == target and not r.state.ended]
        if open_records:
            time.sleep(8)  # let the Spark job start writing
            return open_records[0]
        assert process.poll() is None, "the task ended before its attempt began"
        time.sleep(0.5)
    raise AssertionError(f"no attempt on {target} began within {timeout} s")
