"""Helpers shared by the integration tests: build through the staging API, read like a reader."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import current_location
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.api import StagingJobStatusHook, StagingPurpose
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy


def staged_table(
    metastore: MetastoreInfo,
    journal: FileJournal,
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
    root = table_root(metastore, target)
    return sorted(p.name for p in root.glob("_v=*")) if root.exists() else []


def table_location(metastore: MetastoreInfo, target: str) -> str | None:
    database, table = target.split(".")
    with MetastoreClient(metastore.uri) as client:
        found = client.get_table(database, table)
    return current_location(found) if found is not None else None


# -- waiting for real states (never a sleep) ------------------------------------------------------

POLL_SECONDS = 0.2


def attempt_path(record: AttemptRecord) -> Path:
    """The local directory of a Hive attempt (its ``_v=<attempt id>`` version directory)."""
    return Path(urlparse(record.location).path)


def part_files(directory: Path) -> list[str]:
    """Spark's data files under ``directory`` (in ``_temporary`` while the job runs), relative."""
    # os.walk, not rglob: Spark deletes _temporary while this lists it, and walk skips what vanished.
    return sorted(
        str((Path(parent) / name).relative_to(directory))
        for parent, _, names in os.walk(directory)
        for name in names
        if name.startswith("part-") and not name.endswith(".crc")
    )


def wait_for_open_attempt(
    journal: FileJournal, target: str, process: subprocess.Popen, timeout: float = 240.0
) -> AttemptRecord:
    """The first attempt on ``target`` that the journal shows open (BEGUN or WRITTEN)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_records = [r for r in journal.records() if r.target == target and not r.state.ended]
        if open_records:
            return open_records[0]
        assert process.poll() is None, "the task ended before its attempt began"
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"no attempt on {target} began within {timeout} s")


@dataclass(frozen=True)
class KillPoint:
    """What was observed right before a task was killed: its open attempt and the part files
    the Spark job had already written into the attempt's version directory."""

    record: AttemptRecord
    directory: Path
    files: list[str]


def wait_for_part_files(
    journal: FileJournal, target: str, process: subprocess.Popen, timeout: float = 300.0
) -> KillPoint:
    """Wait until the Spark job of the open attempt on ``target`` is writing: part files exist
    under its version directory while the task process runs and the attempt is still BEGUN."""
    deadline = time.monotonic() + timeout
    record = wait_for_open_attempt(journal, target, process, timeout)
    directory = attempt_path(record)
    while time.monotonic() < deadline:
        files = part_files(directory)
        current = journal.require(record.attempt_id)
        assert current.state is AttemptState.BEGUN, f"attempt became {current.state} before writing"
        if files:
            assert process.poll() is None, "the task ended while its job was writing"
            return KillPoint(current, directory, files)
        assert process.poll() is None, f"the task ended before writing into {directory}"
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"attempt {record.attempt_id} wrote no part file within {timeout} s")


class PartFileWatcher:
    """Records every part file that appears under new version directories of a table root
    while a build runs in this process (a failing job deletes them again before it returns)."""

    def __init__(self, root: Path, interval: float = 0.02) -> None:
        self.root = root
        self.interval = interval
        self.existing = {p.name for p in root.glob("_v=*")} if root.exists() else set()
        self.seen: dict[str, set[str]] = {}  # version directory name -> part files seen in it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="part-file-watcher", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for directory in self.root.glob("_v=*") if self.root.exists() else []:
                if directory.name not in self.existing:
                    files = part_files(directory)
                    if files:
                        self.seen.setdefault(directory.name, set()).update(files)
            self._stop.wait(self.interval)

    def __enter__(self) -> PartFileWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def table_root(metastore: MetastoreInfo, target: str) -> Path:
    database, table = target.split(".")
    return Path(metastore.warehouse) / f"{database}.db" / table


def process_group_members(pgid: int) -> list[psutil.Process]:
    """Live processes (not zombies) of the process group ``pgid`` (a task started in its own session)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return members


def wait_until_group_gone(pgid: int, timeout: float = 60.0) -> list[psutil.Process]:
    """Wait for every process of group ``pgid`` to exit; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while (left := process_group_members(pgid)) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=POLL_SECONDS)
    return left


def stop_group(process: subprocess.Popen) -> None:
    """Cleanup of a task process started in its own session: SIGKILL whatever of it is left."""
    if process.poll() is None or process_group_members(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)


def assert_aborted_unwritten(record: AttemptRecord) -> None:
    """``record`` began, was never WRITTEN nor COMMITTED, and ended ABORTED (via ABORTING or not)."""
    states = [state for state, _ in record.history]
    assert record.state is AttemptState.ABORTED, record
    assert states[0] == AttemptState.BEGUN.value and states[-1] == AttemptState.ABORTED.value, states
    assert {AttemptState.WRITTEN.value, AttemptState.COMMITTED.value}.isdisjoint(states), states


def stream_all_files(spark: Any, schema: str, source: Path, sink: Any, checkpoint: str) -> None:
    """Stream the Parquet files under ``source`` through ``sink`` (one file per micro-batch, as
    fast as they go) from ``checkpoint`` until every file is processed; then stop the query."""
    from airflow_provider_staged.sink.runtime import write_stream

    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = write_stream(df, sink, checkpoint_location=checkpoint, trigger_interval="0 seconds")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
