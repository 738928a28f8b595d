"""Exactly once in streaming: the driver is SIGKILLed at each point of the sink's commit path.

One streaming query (a child process, ``sink_workers``) reads four JSON files, one per
micro-batch, into the sink. It is killed, restarted from its checkpoint, killed at the next
point, and so on: during the write, after the writers, after the sink's commit but before the
checkpoint (Spark replays that micro-batch), and during the global commit; the last run finishes.
Every row must be in the target exactly once, and nothing staged may be left. The Hive table
tracks its two partitions in the catalog (a CONTINUOUS materialized table's layout), so every
micro-batch publishes new partition versions; its kill after the writers (what it leaves is
what the kill during the write leaves: staged files, swept by the replay) is replaced by one
between the partition switch and the table recording the batch (rolled forward), to keep the
number of driver runs (the suite's time). The PostgreSQL chain runs in a thread beside the Hive
chain (each driver is its own process): on 2 cores that takes less time than one after the other.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import PARTITION_PROVIDER_KEY, current_location
from airflow_provider_staged.sink.file_stream import LOG_DIR
from airflow_provider_staged.sink.runtime import stream_query_id
from airflow_provider_staged.staging.faults import FAULT_ENV, FAULT_PGID_ENV
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_sink import STREAM_SUFFIX
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage import files
from airflow_provider_staged.storage.files import normalize_location
from tests.integration.sink_workers import REPO, run_driver

FILES, ROWS_PER_FILE = 4, 25


def _write_input(directory: Path) -> None:
    directory.mkdir()
    for index in range(FILES):
        first = index * ROWS_PER_FILE
        lines = [json.dumps({"id": first + i, "v": f"r{index}"}) for i in range(ROWS_PER_FILE)]
        (directory / f"part-{index}.json").write_text("\n".join(lines) + "\n")


FAULTS = ("after_writers", "after_commit", "global_commit")


def _crash_and_recover(
    spec: dict, tmp_path: Path, write_started, faults: tuple[str, ...] = FAULTS, after_kill=None
) -> None:
    """Kill at each point in turn (each restart first recovers the previous crash; ``after_kill(fault)``
    runs before it), then finish."""
    code, output = run_driver({**spec, "row_sleep_ms": 40}, tmp_path, fault=spec.get("write_fault"),
                        kill_when=write_started)
    assert code == -signal.SIGKILL, output[-3000:]
    for fault in faults:
        code, output = run_driver(spec, tmp_path, fault=fault)
        assert code == -signal.SIGKILL, f"{fault}: exit {code}\n{output[-3000:]}"
        if after_kill is not None:
            after_kill(fault)
    code, output = run_driver(spec, tmp_path)
    assert code == 0 and "done" in output, output[-3000:]


def _spec(metastore, tmp_path: Path, sink: str, table: str) -> dict:
    _write_input(tmp_path / "input")
    return {
        "mode": "stream",
        "metastore_uri": metastore.uri,
        "warehouse": metastore.warehouse,
        "journal_dir": str(tmp_path / "journal"),
        "sink": sink,
        "table": table,
        "input": str(tmp_path / "input"),
        "checkpoint": str(tmp_path / "checkpoint"),
    }


def _reconcile_in_a_process(settings: StagedSettings, fault: str) -> int:
    """Exit code of ``reconcile(settings)`` run in a process of its own that dies at ``fault``."""
    env = {key: value for key, value in os.environ.items() if key != FAULT_PGID_ENV}
    script = ("import sys; from airflow_provider_staged.staging.settings import StagedSettings; "
              "from airflow_provider_staged.staging.reconcile import reconcile; "
              "reconcile(StagedSettings(*sys.argv[1:4]))")
    return subprocess.run(
        [sys.executable, "-c", script, settings.metastore_uri, settings.warehouse, settings.journal_dir],
        cwd=REPO, env={**env, FAULT_ENV: fault}, start_new_session=True, timeout=120, check=False,
    ).returncode


def _assert_journal_settled(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "journal")
    assert [r.attempt_id for r in journal.open_attempts()] == []
    assert any(r.state.value == "COMMITTED" for r in journal.records())


@pytest.fixture(scope="module")
def postgres_chain(
    metastore, postgres, postgres_conn_id, tmp_path_factory
) -> Iterator[tuple[Future, str, Path]]:
    """The PostgreSQL sink's kill chain, started in a thread when first asked for."""
    directory = tmp_path_factory.mktemp("pg-exactly-once")
    name = "events_" + uuid.uuid4().hex[:6]
    spec = {**_spec(metastore, directory, "postgres", f"jdbc://{postgres_conn_id}/public.{name}"),
            "write_fault": "write"}
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(_crash_and_recover, spec, directory, None), name, directory


def test_hive_sink_exactly_once_across_driver_kills(metastore, spark, tmp_path, postgres_chain, s3_chain):
    database = "sinkeo_" + uuid.uuid4().hex[:6]
    spark.sql(f"CREATE DATABASE {database}")
    table = f"{database}.events"
    spec = {**_spec(metastore, tmp_path, "hive", table), "partition_by": ["p"], "track_partitions": True}
    root = Path(metastore.warehouse) / f"{database}.db" / "events"

    def spark_is_writing() -> bool:  # Spark's file sink writes the first micro-batch, not logged yet
        stream = root / "_staging" / f"{stream_query_id(spec['checkpoint'])}{STREAM_SUFFIX}"
        return bool(glob.glob(str(stream / "p=*" / "*"))) and not (stream / LOG_DIR / "0").exists()

    def reconcile_the_dead_drivers_commit(fault: str) -> None:
        """``staged reconcile`` aborts the commit the kill cut short before the catalog changed: that
        must move the logged micro-batch's files back, not delete them (Spark will not write it again).
        A first reconcile is itself killed while it moves them; the next one finishes the abort."""
        if fault == "global_commit":
            settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
            open_before = [r.attempt_id for r in FileJournal(settings.journal_dir).open_attempts()]
            assert _reconcile_in_a_process(settings, fault="return_logged") == -signal.SIGKILL
            assert [r.attempt_id for r in FileJournal(settings.journal_dir).open_attempts()] == open_before
            assert open_before
            assert [action.action for action in reconcile(settings)] == ["aborted"]

    _crash_and_recover(spec, tmp_path, spark_is_writing, (*FAULTS[1:], "partition_switch"),
                       reconcile_the_dead_drivers_commit)
    spark.catalog.refreshTable(table)
    ids = [row.id for row in spark.sql(f"SELECT id FROM {table}").collect()]
    assert sorted(ids) == list(range(FILES * ROWS_PER_FILE)), f"lost or duplicated rows: {len(ids)}"
    # Nothing staged is left but the stream's log (it lives as long as the checkpoint).
    stream = f"{stream_query_id(spec['checkpoint'])}{STREAM_SUFFIX}"
    assert os.listdir(root / "_staging") == [stream]
    assert os.listdir(root / "_staging" / stream) == [LOG_DIR]
    with MetastoreClient(metastore.uri) as client:
        assert client.get_table(database, "events").parameters[PARTITION_PROVIDER_KEY] == "catalog"
        served = {p.values[0]: Path(p.sd.location.removeprefix("file:"))
                  for p in client.partitions(database, "events")}
    # Each partition's files lie directly in its location (Spark reads no subdirectory there).
    assert sorted(served) == ["0", "1"]
    assert sum(len(list(location.glob("*.parquet"))) for location in served.values()) == FILES * 2
    _assert_journal_settled(tmp_path)


@pytest.fixture(scope="module")
def s3_chain(metastore, s3_bucket, tmp_path_factory) -> Iterator[tuple[Future, dict, str]]:
    """The chain into an unpartitioned table on the S3 server, started in a thread when first
    asked for (beside the local chain, as the PostgreSQL one)."""
    directory = tmp_path_factory.mktemp("s3-exactly-once")
    database = "sinkeo_s3_" + uuid.uuid4().hex[:6]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(database, f"s3a://{s3_bucket}/warehouse")
    spec = _spec(metastore, directory, "hive", f"{database}.events")
    root = f"s3a://{s3_bucket}/warehouse/{database}.db/events"

    def spark_is_writing() -> bool:  # the first micro-batch is being written, the table not created
        if not files.list_files(f"{root}/_staging"):
            return False
        with MetastoreClient(metastore.uri) as client:
            return client.get_table(database, "events") is None

    with ThreadPoolExecutor(1) as pool:
        chain = pool.submit(_crash_and_recover, spec, directory, spark_is_writing, ("global_commit",))
        yield chain, spec, root


def test_hive_sink_on_s3_exactly_once_across_driver_kills(metastore, spark, s3_chain):
    """No rename on S3: the stream runs through ``foreachBatch`` and every micro-batch's commit
    copies the table's version forward (``hive_sink``). Killed during the write and during the
    global commit, between the copies and the catalog switch: the points where S3 differs (the
    others are the local chain's)."""
    chain, spec, root = s3_chain
    chain.result(timeout=900)
    spark.catalog.refreshTable(spec["table"])
    ids = [row.id for row in spark.sql(f"SELECT id FROM {spec['table']}").collect()]
    assert sorted(ids) == list(range(FILES * ROWS_PER_FILE)), f"lost or duplicated rows: {len(ids)}"
    assert files.list_files(f"{root}/_staging") == [], "staged files left behind"
    database, table = spec["table"].split(".")
    with MetastoreClient(metastore.uri) as client:
        served = normalize_location(current_location(client.get_table(database, table)))
    assert served.startswith(f"{root}/_v="), served
    # The served version holds each micro-batch once, in its own batch directory.
    batches = [entry.name for entry in files.list_dir(served) if entry.name.startswith("batch-")]
    assert len(batches) == FILES, batches
    _assert_journal_settled(Path(spec["journal_dir"]).parent)


def test_postgres_sink_exactly_once_across_driver_kills(postgres, postgres_chain):
    chain, name, directory = postgres_chain
    chain.result(timeout=900)
    with psycopg.connect(postgres.conninfo()) as conn:
        ids = [row[0] for row in conn.execute(f"SELECT id FROM public.{name}").fetchall()]
        leftovers = conn.execute(
            "SELECT relname FROM pg_class WHERE starts_with(relname, %s)", (f"{name}__s",)
        ).fetchall()
    assert sorted(ids) == list(range(FILES * ROWS_PER_FILE)), f"lost or duplicated rows: {len(ids)}"
    assert leftovers == []
    _assert_journal_settled(directory)


def test_batch_task_failing_once_is_retried_without_orphans(metastore, spark, tmp_path):
    """``local[2,2]``: partition 1's first attempt stages its files and fails; Spark retries it.
    The failed attempt's files never reach the commit and are swept; every row once."""
    database = "sinkretry_" + uuid.uuid4().hex[:6]
    spark.sql(f"CREATE DATABASE {database}")
    spec = {"mode": "batch_retry", "metastore_uri": metastore.uri, "warehouse": metastore.warehouse,
            "journal_dir": str(tmp_path / "journal"), "table": f"{database}.t"}
    code, output = run_driver(spec, tmp_path)
    assert code == 0 and "done" in output, output[-3000:]
    spark.catalog.refreshTable(f"{database}.t")
    ids = [row.id for row in spark.sql(f"SELECT id FROM {database}.t").collect()]
    assert sorted(ids) == list(range(100))
    root = Path(metastore.warehouse) / f"{database}.db" / "t"
    data_files = sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))
    assert len(data_files) == 4 and not any(f.startswith("_staging") for f in data_files), data_files
    # Partition 1's files are its second attempt's (the task key names the attempt).
    names = [f.split("/")[-1] for f in data_files]
    assert any(n.startswith("p1-a1-") for n in names) and not any(n.startswith("p1-a0-") for n in names)
