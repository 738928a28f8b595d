"""Atomic CTAS/RTAS on a real Hive Metastore with real Spark, through the staging API."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.reader import read_table
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.errors import StagingError, TableAlreadyExistsError, TableNotFoundError
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_table import superseded_locations
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from tests.integration.staged_helpers import (
    PartFileWatcher,
    attempt_path,
    begin_and_write,
    build,
    expected_snapshot,
    snapshot,
    staged_table,
    table_location,
    table_root,
    version_dirs,
)

SQL_V1 = "SELECT id, CAST(id AS DECIMAL(12, 2)) AS amount, concat('v1-', id) AS label FROM range(1000)"
SQL_V2 = "SELECT id, CAST(id * 2 AS DECIMAL(12, 2)) AS amount, concat('v2-', id) AS label FROM range(2500)"
# Fails inside a Spark write task (the projection runs after the shuffle, in the stage that
# writes) after the tasks have opened their part files; each row sleeps 5 ms, so that the files
# stay for about a second before the job fails and Spark deletes them.
SQL_FAILS_MID_WRITE = (
    "SELECT IF(id = 399, raise_error('injected task failure'), id) AS id, "
    "reflect('java.lang.Thread', 'sleep', 5L) AS z "
    "FROM (SELECT /*+ REPARTITION(4) */ id FROM range(400)) AS shuffled"
)


def _assert_no_open_or_orphans(metastore, journal, target, failed=None):
    """No attempt is open, the ``failed`` attempt's directory is gone, and every version
    directory under the table's root is either the one the metastore points at or a version a
    COMMITTED attempt wrote and a later COMMITTED attempt superseded (kept by retention)."""
    records = [r for r in journal.records() if r.target == target]
    assert [r.attempt_id for r in records if not r.state.ended] == []
    current = table_location(metastore, target)
    current_dir = current.rstrip("/").rsplit("/", 1)[1] if current is not None else None
    committed = {_dir_name(r.location) for r in records if r.state is AttemptState.COMMITTED}
    superseded = {
        _dir_name(location)
        for r in records
        if r.state is AttemptState.COMMITTED
        for location in superseded_locations(r)
    }
    dirs = version_dirs(metastore, target)
    unexplained = [d for d in dirs if d != current_dir and not (d in committed and d in superseded)]
    assert unexplained == [], f"orphan version directories of {target}: {unexplained} (records: {records})"
    if current_dir is not None:
        assert current_dir in dirs and current_dir in committed
    if failed is not None:
        record = journal.require(failed.attempt_id)
        assert record.state is AttemptState.ABORTED
        assert _dir_name(record.location) not in dirs
        assert not attempt_path(record).exists()


def _dir_name(location):
    return location.rstrip("/").rsplit("/", 1)[1]


def test_create_then_replace_then_create_or_replace(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    first_location = table_location(metastore, target)

    build(spark, staged_table(metastore, journal, target, "replace"), SQL_V2)
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V2)
    assert table_location(metastore, target) != first_location

    build(spark, staged_table(metastore, journal, target, "create_or_replace"), SQL_V1)
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    assert [r.state for r in journal.records()] == [AttemptState.COMMITTED] * 3


def test_table_is_a_spark_and_metastore_table(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create_or_replace"), SQL_V1)
    database, table = target.split(".")
    with MetastoreClient(metastore.uri) as client:
        thrift = client.get_table(database, table)
    assert thrift.tableType == "EXTERNAL_TABLE"
    assert [(c.name, c.type) for c in thrift.sd.cols] == [
        ("id", "bigint"),
        ("amount", "decimal(12,2)"),
        ("label", "string"),
    ]
    assert thrift.parameters["staged.rows"] == "1000"
    assert thrift.sd.serdeInfo.parameters["path"] == thrift.sd.location
    # A reader with no Spark at all (pyarrow over the committed files).
    data = read_table(metastore.uri, TableIdentifier.parse(target), limit=5)
    assert data.total_rows == 1000 and data.columns == ["id", "amount", "label"]
    # A new Spark session (own catalog state) sees the same schema.
    other = spark.newSession()
    assert [f.name for f in other.table(target).schema.fields] == ["id", "amount", "label"]
    assert other.table(target).count() == 1000


def test_create_on_existing_fails_before_any_spark_work(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = snapshot(spark, target)
    staged = staged_table(metastore, journal, target, "create")
    with pytest.raises(TableAlreadyExistsError, match=target):
        staged.begin()
    assert journal.get(staged.attempt_id) is None
    assert snapshot(spark, target) == before
    assert len(version_dirs(metastore, target)) == 1
    _assert_no_open_or_orphans(metastore, journal, target)


def test_if_not_exists_leaves_existing_table_untouched(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    staged = build(spark, staged_table(metastore, journal, target, "create_if_not_exists"), SQL_V2)
    assert staged.skipped
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    assert len(version_dirs(metastore, target)) == 1


def test_replace_missing_table_fails_clearly(metastore, journal, target):
    with pytest.raises(TableNotFoundError, match="does not exist"):
        staged_table(metastore, journal, target, "replace").begin()


def test_missing_database_fails_clearly(metastore, journal):
    with pytest.raises(TableNotFoundError, match="database 'no_such_db_x' does not exist"):
        staged_table(metastore, journal, "no_such_db_x.t", "create").begin()
    assert journal.records() == []


@pytest.mark.parametrize("bad", ["db.t;drop", "`db`.t", "db.t.x", "", "db.'t'"])
def test_bad_identifiers_rejected(metastore, journal, bad):
    with pytest.raises(InvalidIdentifierError, match="invalid"):
        staged_table(metastore, journal, bad, "create")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELEC id FROM range(3)", "PARSE_SYNTAX_ERROR"),
        ("SELECT no_such_column FROM range(3)", "UNRESOLVED_COLUMN"),
        ("SELECT * FROM no_such_db_y.no_such_table", "TABLE_OR_VIEW_NOT_FOUND"),
    ],
)
def test_query_errors_before_writing_leave_nothing(spark, metastore, journal, target, sql, message):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = snapshot(spark, target)
    before_dirs = version_dirs(metastore, target)
    staged = staged_table(metastore, journal, target, "replace")
    with pytest.raises(Exception, match=message):
        build(spark, staged, sql)
    assert snapshot(spark, target) == before
    assert version_dirs(metastore, target) == before_dirs
    assert [(r.attempt_id, r.state) for r in journal.records() if r.state is AttemptState.ABORTED] == [
        (staged.attempt_id, AttemptState.ABORTED)
    ]
    _assert_no_open_or_orphans(metastore, journal, target, failed=staged)


def test_task_failing_mid_write_keeps_previous_version(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = snapshot(spark, target)
    before_dirs = version_dirs(metastore, target)
    staged = staged_table(metastore, journal, target, "create_or_replace")
    with PartFileWatcher(table_root(metastore, target)) as watcher, pytest.raises(
        Exception, match="injected task failure"
    ):
        build(spark, staged, SQL_FAILS_MID_WRITE)
    # The failure came mid-write: the attempt's directory had part files before it failed.
    assert list(watcher.seen) == [f"_v={staged.attempt_id}"], watcher.seen
    assert watcher.seen[f"_v={staged.attempt_id}"]
    assert snapshot(spark, target) == before
    assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
    assert version_dirs(metastore, target) == before_dirs
    _assert_no_open_or_orphans(metastore, journal, target, failed=staged)


@pytest.mark.parametrize("kind", ["table", "partitions"])
def test_failed_first_build_leaves_no_table_and_no_directory(spark, metastore, journal, target, kind):
    staged = staged_table(metastore, journal, target, "create")
    if kind == "partitions":  # the first refresh of a partitioned materialized table
        staged = HivePartitionStagedTable(staged.identifier, ["z"], {}, journal, metastore.uri)
    root = table_root(metastore, target)
    with PartFileWatcher(root) as watcher, pytest.raises(Exception, match="injected task failure"):
        build(spark, staged, SQL_FAILS_MID_WRITE)
    if kind == "table":  # a partitioned write sorts its input first: it fails before any file
        assert watcher.seen.get(f"_v={staged.attempt_id}"), "the job must fail after writing part files"
    assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
    assert not spark.catalog.tableExists(target)
    # An empty table directory would be an orphan no sweep removes (there is no table to sweep).
    assert not root.exists(), sorted(p.name for p in root.iterdir())


def test_failure_after_write_before_commit_then_abort(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = snapshot(spark, target)
    before_dirs = version_dirs(metastore, target)
    staged = begin_and_write(spark, staged_table(metastore, journal, target, "replace"), SQL_V2)
    # The staged data exists, invisible to readers.
    assert version_dirs(metastore, target) == sorted([*before_dirs, f"_v={staged.attempt_id}"])
    assert journal.require(staged.attempt_id).state is AttemptState.WRITTEN
    assert snapshot(spark, target) == before
    staged.abort("injected failure before commit")
    assert journal.require(staged.attempt_id).error == "injected failure before commit"
    assert snapshot(spark, target) == before
    assert version_dirs(metastore, target) == before_dirs
    _assert_no_open_or_orphans(metastore, journal, target, failed=staged)
    with pytest.raises(Exception, match="aborted"):
        staged.commit()


def test_four_concurrent_if_not_exists_attempts_make_one_table(spark, metastore, journal, target):
    attempts = [staged_table(metastore, journal, target, "create_if_not_exists") for _ in range(4)]
    for staged in attempts:
        staged.begin()  # all see no table: the race is decided at commit
    errors = []

    def run(staged, index):
        try:
            sql = f"SELECT id, {index} AS writer FROM range(20000)"
            staged.written(run_staged_write(spark, sql, staged.write_spec()))
            staged.commit()
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(s, i)) for i, s in enumerate(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    states = [journal.require(s.attempt_id).state for s in attempts]
    assert states.count(AttemptState.COMMITTED) == 1
    assert states.count(AttemptState.ABORTED) == 3
    assert sum(s.skipped for s in attempts) == 3
    rows = spark.table(target).groupBy("writer").count().collect()
    assert len(rows) == 1 and rows[0]["count"] == 20000
    assert len(version_dirs(metastore, target)) == 1
    for staged in attempts:
        if journal.require(staged.attempt_id).state is AttemptState.ABORTED:
            _assert_no_open_or_orphans(metastore, journal, target, failed=staged)


def test_retention_keeps_configured_superseded_versions(spark, metastore, journal, target):
    # Within the grace period nothing superseded goes, whatever the count: readers may still read it.
    within_grace = RetentionPolicy(keep_versions=1, max_age_seconds=None)
    for i in range(3):
        build(
            spark,
            staged_table(metastore, journal, target, "create_or_replace", within_grace),
            f"SELECT id, {i} AS round FROM range(10)",
        )
    assert len(version_dirs(metastore, target)) == 3
    past_grace = RetentionPolicy(keep_versions=1, max_age_seconds=None, grace_seconds=0)
    build(
        spark,
        staged_table(metastore, journal, target, "create_or_replace", past_grace),
        "SELECT id, 3 AS round FROM range(10)",
    )
    dirs = version_dirs(metastore, target)
    assert len(dirs) == 2  # the current version + one superseded
    assert any(table_location(metastore, target).endswith(d) for d in dirs)
    assert spark.table(target).select("round").distinct().first()[0] == 3
    _assert_no_open_or_orphans(metastore, journal, target)


def test_sweep_expires_abandoned_attempts(spark, metastore, journal, target, tmp_path):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = snapshot(spark, target)
    abandoned = begin_and_write(spark, staged_table(metastore, journal, target, "replace"), SQL_V2)
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(journal.root), attempt_ttl_seconds=60)
    assert [a.action for a in reconcile(settings)] == ["left running"]
    actions = reconcile(settings, now=time.time() + 120)
    assert [a.action for a in actions] == ["expired"]
    assert journal.require(abandoned.attempt_id).state is AttemptState.ABORTED
    assert journal.require(abandoned.attempt_id).error == "expired: no heartbeat within the attempt TTL"
    assert snapshot(spark, target) == before
    assert len(version_dirs(metastore, target)) == 1
    _assert_no_open_or_orphans(metastore, journal, target, failed=abandoned)


def test_partition_refresh_appends_columns_the_other_partitions_read_null(spark, metastore, journal, target):
    """After CREATE OR ALTER MATERIALIZED TABLE appended a column: the next partition refresh widens
    the table's schema; the partitions it leaves alone read the column as null; other changes fail."""

    def refresh(spec, sql):
        staged = HivePartitionStagedTable(TableIdentifier.parse(target), ["ds"], spec, journal, metastore.uri)
        return build(spark, staged, sql)

    refresh({}, "SELECT id, concat('d', CAST(id % 2 AS STRING)) AS ds FROM range(4)")
    refresh({"ds": "d1"}, "SELECT id, 'x' AS extra, 'd1' AS ds FROM range(3)")

    def grouped():
        spark.catalog.refreshTable(target)
        rows = spark.sql(f"SELECT ds, extra, count(*) AS n FROM {target} GROUP BY ds, extra ORDER BY ds")
        return [tuple(row) for row in rows.collect()]

    assert grouped() == [("d0", None, 2), ("d1", "x", 3)]
    assert [c.name for c in spark.table(target).schema] == ["id", "extra", "ds"]
    with pytest.raises(StagingError, match="a partition refresh can only append columns"):
        refresh({"ds": "d0"}, "SELECT 'y' AS extra, id, 'd0' AS ds FROM range(1)")
    assert grouped() == [("d0", None, 2), ("d1", "x", 3)]
    states = [record.state for record in journal.records()]
    assert sorted(states) == sorted([AttemptState.COMMITTED] * 2 + [AttemptState.ABORTED]), states
    aborted = next(record for record in journal.records() if record.state is AttemptState.ABORTED)
    assert not attempt_path(aborted).exists()
