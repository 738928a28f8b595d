"""CONTINUOUS materialized tables on real Spark, a real metastore and the session's real Airflow.

First the streaming refresh itself (``ContinuousRefresh`` on the session's Spark): rows that
arrive in a source table as new files reach the table through the Hive sink, an aggregation is
replaced whole each micro-batch, a restart continues from the checkpoint with nothing lost or
doubled, a source that is not a stream of files is refused naming it, and a one-time refresh of
a partition beside the running stream keeps every row once. Then the whole
lifecycle on the running Airflow: create -> rows appear within the freshness -> a one-time
refresh of a partition (the stream yields to it and resumes) -> suspend (query stopped, DAG
paused) -> more rows -> resume (caught up, exactly once) -> drop (query stopped, checkpoint gone).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.discovery.embedded import AirflowInfo
from airflow_provider_staged.engine.runners import EmbeddedEngine
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.materialized.continuous import NotStreamableError, SourceReplacedError
from airflow_provider_staged.materialized.continuous_run import (
    ContinuousRefresh,
    read_progress,
    table_root,
)
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger
from airflow_provider_staged.sink.file_stream import LOG_DIR
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.kinds.continuous_partitions import ContinuousPartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_sink import STREAM_SUFFIX
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import exists, normalize_location
from tests.integration.test_mt_auto_suspend import mt_cli, wait_for

pytestmark = pytest.mark.slow

FRESHNESS_SECONDS = 5


@pytest.fixture(scope="module")
def db(metastore, spark) -> str:
    name = "mtc_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(name, metastore.warehouse)
    return name


@pytest.fixture(scope="module")
def settings(metastore, tmp_path_factory) -> StagedSettings:
    return StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path_factory.mktemp("mtc-journal")))


def source_table(spark, db: str, name: str, tmp: Path) -> str:
    """A plain Parquet table whose rows arrive as new files (Spark's INSERT INTO writes files)."""
    table = f"{db}.{name}"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, grp STRING, v INT) USING parquet LOCATION '{tmp / name}'")
    return table


def insert(spark, table: str, first: int, count: int) -> None:
    spark.sql(f"INSERT INTO {table} SELECT id, concat('g', CAST(id % 3 AS STRING)), CAST(id AS INT) "
              f"FROM range({first}, {first + count})")


def definition(db: str, name: str, query: str) -> Any:
    return parse_definition(f"CREATE MATERIALIZED TABLE {db}.{name}\n"
                            f"FRESHNESS = INTERVAL '{FRESHNESS_SECONDS}' SECOND\nAS {query}", f"{name}.sql")


@pytest.fixture
def running(spark, settings) -> Iterator[Callable[[Any], ContinuousRefresh]]:
    started: list[ContinuousRefresh] = []

    def start(parsed: Any) -> ContinuousRefresh:
        refresh = ContinuousRefresh(parsed, settings, spark)
        refresh.start()
        started.append(refresh)
        return refresh

    yield start
    for refresh in started:
        refresh.stop()


def ids(spark, table: str) -> list[int]:
    """The table's ids as the catalog has them now (Spark caches a table's file listing)."""
    if not spark.catalog.tableExists(table):
        return []
    spark.catalog.refreshTable(table)
    return sorted(row[0] for row in spark.table(table).select("id").collect())


def test_append_query_streams_new_files_and_resumes_exactly_once(spark, db, running, tmp_path) -> None:
    src = source_table(spark, db, "clicks", tmp_path)
    insert(spark, src, 0, 50)
    parsed = definition(db, "clicks_live", f"SELECT id, v FROM {src} WHERE v % 2 = 0")
    target = parsed.identifier.name
    refresh = running(parsed)
    wait_for("the first 50 source rows",
             lambda: refresh.report() and ids(spark, target) == list(range(0, 50, 2)), 90)
    insert(spark, src, 50, 50)
    wait_for("rows appended later",
             lambda: refresh.report() and ids(spark, target) == list(range(0, 100, 2)), 90)
    progress = refresh.report()
    assert progress.state == "running" and progress.batch_id is not None and progress.batch_rows
    assert progress.lag_seconds() is not None and progress.lag_seconds() < 3 * FRESHNESS_SECONDS
    refresh.stop()
    assert read_progress(refresh.root).state == "stopped"
    # Its source's stream view goes with it: the session may be a caller's (the SQL client's).
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith("__staged_stream__")]
    insert(spark, src, 100, 10)  # arrives while stopped: the restart must pick it up, once
    resumed = running(parsed)
    wait_for("rows that arrived while stopped", lambda: resumed.report()
             and ids(spark, target) == list(range(0, 110, 2)), 90)
    time.sleep(FRESHNESS_SECONDS)
    assert ids(spark, target) == list(range(0, 110, 2))  # nothing doubled by the restart
    assert exists(f"{table_root(parsed.identifier, resumed.settings.metastore_uri)}/_continuous/checkpoint")


def test_a_column_list_shapes_the_streamed_table(spark, db, running, tmp_path) -> None:
    """The stream writes the query's columns as the column list casts and orders them."""
    src = source_table(spark, db, "typed_src", tmp_path)
    insert(spark, src, 0, 10)
    parsed = parse_definition(f"CREATE MATERIALIZED TABLE {db}.typed_live (v BIGINT, grp STRING NOT NULL)\n"
                              f"FRESHNESS = INTERVAL '{FRESHNESS_SECONDS}' SECOND\n"
                              f"AS SELECT id, v, grp FROM {src}", "typed_live.sql")
    target = parsed.identifier.name
    refresh = running(parsed)
    wait_for("the streamed rows", lambda: refresh.report() and ids(spark, target) == list(range(10)), 90)
    assert spark.table(target).dtypes == [("id", "bigint"), ("v", "bigint"), ("grp", "string")]
    assert sorted(tuple(row) for row in spark.table(target).collect())[:2] == [(0, 0, "g0"), (1, 1, "g1")]


def test_aggregation_is_replaced_whole_each_batch(spark, db, running, tmp_path) -> None:
    src = source_table(spark, db, "sales", tmp_path)
    insert(spark, src, 0, 30)
    parsed = definition(db, "sales_by_grp",
                        f"SELECT grp, count(*) AS n, sum(v) AS total FROM {src} GROUP BY grp")
    refresh = running(parsed)
    target = parsed.identifier.name

    def totals() -> dict[str, tuple[int, int]]:
        spark.catalog.refreshTable(target)
        return {row.grp: (row.n, row.total) for row in spark.table(target).collect()}

    expected = {f"g{g}": (10, sum(i for i in range(30) if i % 3 == g)) for g in range(3)}
    wait_for("the first totals", lambda: refresh.report() and spark.catalog.tableExists(target)
             and totals() == expected, 90)
    assert refresh.plan is not None and refresh.plan.output_mode == "complete"
    insert(spark, src, 30, 30)
    expected = {f"g{g}": (20, sum(i for i in range(60) if i % 3 == g)) for g in range(3)}
    wait_for("totals over both inserts", lambda: refresh.report() and totals() == expected, 90)


def test_a_table_the_sink_appends_to_is_a_stream(spark, db, settings, running) -> None:
    from airflow_provider_staged.sink.hive import HiveSink
    from airflow_provider_staged.sink.runtime import write_batch

    src = f"{db}.appended"
    sink = HiveSink(src, settings, "append")

    def append(first: int, count: int) -> None:
        write_batch(spark.range(first, first + count).selectExpr("id", "CAST(id AS INT) AS v"), sink)

    append(0, 20)
    parsed = definition(db, "appended_live", f"SELECT id, v FROM {src}")
    refresh = running(parsed)
    target = parsed.identifier.name
    wait_for("the sink's first append",
             lambda: refresh.report() and ids(spark, target) == list(range(20)), 90)
    append(20, 20)  # a new batch directory under the same version
    wait_for("the sink's next append", lambda: refresh.report() and ids(spark, target) == list(range(40)), 90)


def test_a_source_that_is_no_stream_of_files_is_refused_by_name(spark, db, running, tmp_path) -> None:
    spark.sql(f"CREATE TABLE {db}.csv_src (id BIGINT) USING csv LOCATION '{tmp_path / 'csv'}'")
    parsed = definition(db, "from_csv", f"SELECT id FROM {db}.csv_src")
    with pytest.raises(NotStreamableError, match=rf"source table {db}\.csv_src is not a Parquet table"):
        running(parsed)
    parsed = definition(db, "from_missing", f"SELECT id FROM {db}.nowhere")
    with pytest.raises(NotStreamableError, match=rf"source table {db}\.nowhere does not exist"):
        running(parsed)


def test_a_replaced_source_stops_the_stream_and_its_restart_by_name(spark, db, running, tmp_path) -> None:
    """A source switched to another location (what a staged replace does) is no longer the stream of
    files the checkpoint follows: the refresh stops with the reason and refuses to start again."""
    src = source_table(spark, db, "swapped", tmp_path)
    insert(spark, src, 0, 20)
    parsed = definition(db, "swapped_live", f"SELECT id, v FROM {src}")
    target = parsed.identifier.name
    refresh = running(parsed)
    refresh.source_check_seconds = 0.0  # check on every report
    wait_for("the first rows", lambda: refresh.report() and ids(spark, target) == list(range(20)), 90)
    replaced = tmp_path / "swapped_v2"
    spark.sql(f"CREATE TABLE {db}.swapped_copy USING parquet LOCATION '{replaced}' AS SELECT * FROM {src}")
    spark.sql(f"DROP TABLE {db}.swapped_copy")  # external: its files stay
    spark.sql(f"ALTER TABLE {src} SET LOCATION '{replaced}'")
    insert(spark, src, 20, 10)  # lands in the new location, which the checkpoint never read
    moved = rf"source table {src} was replaced: its data moved from \S+/swapped to \S+/swapped_v2"
    with pytest.raises(SourceReplacedError, match=moved):
        refresh.report()
    assert not refresh.query.isActive
    progress = read_progress(refresh.root)
    assert progress.state == "failed" and "DROP, then CREATE" in progress.error
    with pytest.raises(SourceReplacedError, match=moved):
        running(parsed)
    assert ids(spark, target) == list(range(20))  # nothing read twice, nothing half-read


def partitions(metastore_uri: str, table: str) -> dict[str, str]:
    """Partition value -> location, as the catalog has them (one partition column)."""
    database, name = table.split(".")
    with MetastoreClient(metastore_uri) as client:
        return {p.values[0]: normalize_location(p.sd.location) for p in client.partitions(database, name)}


def partition_ids(spark, table: str, ds: str) -> list[int]:
    """The ids of partition ``ds`` as the catalog has them now."""
    spark.catalog.refreshTable(table)
    return sorted(row[0] for row in spark.table(table).where(f"ds = '{ds}'").select("id").collect())


D0, D1 = "2026-11-01", "2026-11-02"


def test_one_time_partition_refresh_beside_the_running_stream(
    spark, db, settings, running, tmp_path
) -> None:
    """A one-time refresh of partition D1 while the stream runs: D1 becomes the batch query's result
    over the source files the stream committed (a file deleted since is gone from it), the
    micro-batch committed between the refresh's start and its switch is carried into it, the next
    ones land in it; D0 is untouched; every source row is in the table once."""
    src = f"{db}.visits"
    spark.sql(f"CREATE TABLE {src} (id BIGINT, v INT, ds STRING) USING parquet "
              f"LOCATION '{tmp_path / 'visits'}'")

    def add(first: int, count: int) -> None:
        spark.sql(f"INSERT INTO {src} SELECT id, CAST(id AS INT), IF(id % 2 = 0, '{D0}', '{D1}') "
                  f"FROM range({first}, {first + count})")

    def part(ds: str) -> list[int]:
        return partition_ids(spark, target, ds)

    add(0, 40)
    parsed = parse_definition(
        f"CREATE MATERIALIZED TABLE {db}.visits_live PARTITIONED BY (ds)\n"
        f"FRESHNESS = INTERVAL '{FRESHNESS_SECONDS}' SECOND\nAS SELECT id, v, ds FROM {src}",
        "visits_live.sql")
    target = parsed.identifier.name
    refresh = running(parsed)
    wait_for("the first rows", lambda: refresh.report() and ids(spark, target) == list(range(40)), 90)
    before = set((tmp_path / "visits").glob("*.parquet"))
    spark.sql(f"INSERT INTO {src} SELECT /*+ COALESCE(1) */ id, 0, '{D1}' FROM range(1001, 1009, 2)")
    wait_for("rows erased at the source later", lambda: refresh.report() and len(part(D1)) == 24, 90)
    for erased in set((tmp_path / "visits").glob("*.parquet")) - before:
        erased.unlink()  # the stream keeps its rows: only a refresh can take them out

    request = parse_refresh_request(RefreshTrigger(static_partitions={"ds": D1}).as_conf(), parsed,
                                    datetime.now(timezone.utc))
    staged = staged_refresh(parsed, request, settings, None)  # covers the micro-batches committed so far
    assert isinstance(staged, ContinuousPartitionStagedTable) and staged.after_batch >= 0
    add(40, 20)  # streamed into D1's current location before the switch: carried over
    wait_for("rows streamed during the refresh", lambda: refresh.report() and ids(spark, target) == sorted(
        [*range(60), *range(1001, 1009, 2)]), 90)
    d0 = (partitions(settings.metastore_uri, target)[D0], part(D0))
    result = run_refresh(parsed, request, settings, staged, EmbeddedEngine(settings))

    assert result["partitions"] == {"ds": D1}
    located = partitions(settings.metastore_uri, target)
    assert located[D1].startswith(normalize_location(staged.location) + "/")
    assert part(D1) == list(range(1, 60, 2))  # the batch query's result for D1, erased rows gone
    assert (located[D0], part(D0)) == d0  # untouched
    add(60, 20)  # a new version of D1 (and D0) holding the switched files and the batch's
    wait_for("rows after the refresh", lambda: refresh.report() and ids(spark, target) == list(range(80)), 90)
    time.sleep(FRESHNESS_SECONDS)
    assert ids(spark, target) == list(range(80))  # nothing lost, nothing doubled
    assert sorted(partitions(settings.metastore_uri, target)) == [D0, D1]
    root = Path(table_root(parsed.identifier, settings.metastore_uri).removeprefix("file:"))
    # Staged: only the running stream's file sink directory, no file in it but its log (idle now).
    (stream,) = (root / "_staging").iterdir()
    assert stream.name.endswith(STREAM_SUFFIX)
    assert [p for p in stream.rglob("*") if p.is_file() and LOG_DIR not in p.parts] == []


E2E_FRESHNESS = 5


def test_continuous_table_lifecycle_on_airflow(
    airflow_server: AirflowInfo, definitions_dir: Path, metastore, spark, db, tmp_path
) -> None:
    """create -> rows appear within the freshness -> one-time refresh of partition g1 -> SIGKILL of
    the streaming task -> the next run resumes (exactly once) -> suspend ->
    more rows -> resume (exactly once) -> drop (query stopped, checkpoint gone), on the session's
    running Airflow."""
    src = source_table(spark, db, "events", tmp_path)
    insert(spark, src, 0, 20)
    identifier = TableIdentifier(db, "events_live")
    dag_id = f"mt__{db}__events_live"
    text = (f"CREATE MATERIALIZED TABLE {identifier.name} PARTITIONED BY (grp)\n"
            f"FRESHNESS = INTERVAL '{E2E_FRESHNESS}' SECOND\nAS SELECT id, v, grp FROM {src}\n")
    user, password = airflow_server.credentials("admin")
    scheduler = AirflowWorkflowScheduler(airflow_server.endpoint, definitions_dir, user, password,
                                         parse_timeout=90)
    api = httpx.Client(base_url=airflow_server.endpoint + "/api/v2", timeout=180,
                       headers={"Authorization": f"Bearer {api_token(airflow_server)}"})

    def running_runs() -> list[dict[str, Any]]:
        found = api.get(f"/dags/{dag_id}/dagRuns", params={"state": ["running"]}).raise_for_status()
        return found.json()["dag_runs"]

    target = identifier.name
    with scheduler, api:
        tables = MaterializedTables(scheduler, metastore.uri)
        tables.create(text)
        try:
            dag = api.get(f"/dags/{dag_id}").json()
            assert (dag["timetable_summary"], dag["max_active_runs"], dag["is_paused"]) == (
                "@continuous", 1, False)
            wait_for("the first rows", lambda: ids(spark, target) == list(range(20)), 240)
            arrived = time.monotonic()
            insert(spark, src, 20, 10)
            wait_for("rows appended while running", lambda: ids(spark, target) == list(range(30)), 120)
            seen_after = time.monotonic() - arrived
            # Within the freshness: the next trigger picks the files up (plus its commit).
            assert seen_after <= 2 * E2E_FRESHNESS + 10, seen_after
            # The task reports every poll_seconds (5 s), so the batch shows up within one poll.
            wait_for("the batch in the progress",
                     lambda: getattr(tables.describe(identifier).progress, "batch_id", None) is not None, 30)
            info = tables.describe(identifier)
            assert info.refresh_mode == "CONTINUOUS" and info.progress is not None
            assert info.progress.state == "running" and info.progress.batch_id is not None
            assert info.progress.lag_seconds() < 3 * E2E_FRESHNESS
            cli = mt_cli(airflow_server, definitions_dir, metastore.uri)
            described = cli("describe", target)
            for fact in ("refresh mode", "CONTINUOUS", "last batch", "rows/s", "actual lag"):
                assert fact in described

            # A one-time refresh (Flink's batch overwrite of partitions): the stream yields to the
            # queued run at its next poll, the run switches g1 alone, the next run resumes the stream.
            before = partitions(metastore.uri, target)
            streaming_run = running_runs()[0]["dag_run_id"]
            one_time = tables.refresh(identifier, RefreshTrigger(static_partitions={"grp": "g1"}))
            assert tables.wait_for_refresh(identifier, one_time, 240) == "success"
            after = partitions(metastore.uri, target)
            assert after["g1"] != before["g1"] and {k: after[k] for k in ("g0", "g2")} == {
                k: before[k] for k in ("g0", "g2")}
            assert ids(spark, target) == list(range(30))
            wait_for("the stream resumed", lambda: [run["dag_run_id"] for run in running_runs()
                                                    if run["dag_run_id"] != streaming_run], 120)

            # A lost worker: SIGKILL of the streaming task's process (no callback runs). Airflow
            # fails its run, the next @continuous run resumes from the checkpoint, rows arrive once.
            killed = running_runs()[0]["dag_run_id"]
            task = f"/dags/{dag_id}/dagRuns/{killed}/taskInstances/refresh"
            wait_for("the streaming task's process", lambda: api.get(task).json()["pid"], 120)
            os.kill(api.get(task).json()["pid"], signal.SIGKILL)
            insert(spark, src, 30, 5)
            wait_for("the run after the kill", lambda: [run["dag_run_id"] for run in running_runs()
                                                        if run["dag_run_id"] != killed], 120)
            assert api.get(f"/dags/{dag_id}/dagRuns/{killed}").json()["state"] == "failed"
            wait_for("rows streamed after the kill", lambda: ids(spark, target) == list(range(35)), 240)

            tables.suspend(identifier)  # waits for the task to stop its query
            assert api.get(f"/dags/{dag_id}").json()["is_paused"] is True and running_runs() == []
            root = table_root(identifier, metastore.uri)
            assert read_progress(root).state == "stopped"
            assert exists(f"{root}/_continuous/checkpoint")
            insert(spark, src, 35, 10)
            time.sleep(E2E_FRESHNESS + 2)
            assert ids(spark, target) == list(range(35))  # nothing streams while suspended

            tables.resume(identifier)
            wait_for("caught up after resume", lambda: ids(spark, target) == list(range(45)), 240)
            time.sleep(E2E_FRESHNESS)
            assert ids(spark, target) == list(range(45))  # no duplicates from the restarts
        finally:
            tables.drop(identifier)
        assert api.get(f"/dags/{dag_id}").status_code == 404 and not scheduler.definition_file(dag_id)
        assert not exists(f"{table_root(identifier, metastore.uri)}/_continuous")
        assert ids(spark, target) == list(range(45))  # DROP keeps the table's data


def test_a_continuous_table_on_s3_streams_and_resumes_exactly_once(
    spark, metastore, s3_bucket, running, tmp_path
) -> None:
    """The table, its checkpoint and its progress on the S3 server: the stream appends through
    ``foreachBatch`` (no rename there) and a restart continues from the checkpoint on S3."""
    db = "mtc_s3_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(db, f"s3a://{s3_bucket}/warehouse")
    src = source_table(spark, db, "views", tmp_path)
    insert(spark, src, 0, 30)
    parsed = definition(db, "views_live", f"SELECT id, v FROM {src}")
    target = parsed.identifier.name
    refresh = running(parsed)
    wait_for("the first 30 source rows",
             lambda: refresh.report() and ids(spark, target) == list(range(30)), 90)
    refresh.stop()
    insert(spark, src, 30, 10)
    resumed = running(parsed)
    wait_for("rows that arrived while stopped",
             lambda: resumed.report() and ids(spark, target) == list(range(40)), 90)
    root = table_root(parsed.identifier, metastore.uri)
    assert root.startswith(f"s3a://{s3_bucket}/"), root
    assert exists(f"{root}/_continuous/checkpoint/offsets")
    assert read_progress(root) is not None  # the progress lives beside it, on S3


def test_expect_constraints_audit_each_micro_batch(spark, db, settings, running, tmp_path) -> None:
    """DROP ROW leaves a batch's offending rows out (counted in its journal record); one without
    ON VIOLATION keeps them and reports them."""
    src = source_table(spark, db, "checked_source", tmp_path)
    insert(spark, src, 0, 20)
    parsed = parse_definition(
        f"CREATE MATERIALIZED TABLE {db}.events_checked (\n"
        "  CONSTRAINT even EXPECT (v % 2 = 0) ON VIOLATION DROP ROW,\n"
        "  CONSTRAINT small EXPECT (v < 15))\n"
        f"FRESHNESS = INTERVAL '{FRESHNESS_SECONDS}' SECOND\nAS SELECT id, v FROM {src}",
        "events_checked.sql")
    target = parsed.identifier.name
    refresh = running(parsed)
    wait_for("the even source rows",
             lambda: refresh.report() and ids(spark, target) == list(range(0, 20, 2)), 90)
    batches = [r for r in settings.journal.records() if r.target == target and r.state.value == "COMMITTED"]
    assert sum(r.manifest["dropped_rows"] for r in batches) == 10
    failing: dict[str, int] = {}
    for record in batches:
        for result in record.audits["results"]:
            failing[result["name"]] = failing.get(result["name"], 0) + result["failing"]
    assert failing == {"even": 10, "small": 5}, failing  # counted before the drops, as Databricks does
