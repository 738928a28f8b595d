"""Builds journaled in the shared PostgreSQL journal: an atomic CTAS and replace, a partition
refresh, and a commit whose staged files a sweep (or a hand) deleted. A real metastore, embedded
Spark and a real PostgreSQL server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_postgres import PostgresJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.maintenance import sweep_all_versions
from airflow_provider_staged.staging.settings import StagedSettings
from tests.integration.staged_helpers import (
    attempt_path,
    begin_and_write,
    build,
    expected_snapshot,
    snapshot,
    staged_table,
    version_dirs,
)

SQL_V1 = "SELECT id, concat('v1-', id) AS label FROM range(100)"
SQL_V2 = "SELECT id, concat('v2-', id) AS label FROM range(250)"


@pytest.fixture
def settings(metastore, postgres, tmp_path):
    extras = {
        "warehouse": metastore.warehouse,
        "journal": postgres.url(),
        "journal_schema": "j_" + uuid.uuid4().hex[:12],
    }
    host, port = metastore.uri.removeprefix("thrift://").split(":")
    return StagedSettings.from_fields(host, int(port), extras, tmp_path)


def test_atomic_ctas_and_replace_journaled_in_postgres(spark, metastore, settings, target):
    journal = settings.journal
    assert isinstance(journal, PostgresJournal)
    first = build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    second = build(spark, staged_table(metastore, journal, target, "replace"), SQL_V2)
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V2)
    records = {r.attempt_id: r for r in journal.records()}
    assert [records[s.attempt_id].state for s in (first, second)] == [AttemptState.COMMITTED] * 2
    assert records[second.attempt_id].superseded_location == records[first.attempt_id].location
    # Another host's sweep reads the same journal: v1 is a version inside its grace, not an orphan.
    sweep = sweep_all_versions(settings)
    assert sweep.deleted == {} and sweep.failures == {}
    assert version_dirs(metastore, target) == sorted(f"_v={s.attempt_id}" for s in (first, second))


def test_partition_refresh_journaled_in_postgres(spark, metastore, settings, target):
    identifier = TableIdentifier.parse(target)

    def refresh(spec, sql):
        staged = HivePartitionStagedTable(identifier, ["ds"], spec, settings.journal, metastore.uri)
        return build(spark, staged, sql)

    by_parity = "SELECT id, concat('d', CAST(id % 2 AS STRING)) AS ds FROM range({}, {})"
    refresh({}, by_parity.format(0, 6))
    refreshed = refresh({"ds": "d1"}, by_parity.format(10, 12) + " WHERE id % 2 = 1")
    spark.catalog.refreshTable(target)
    rows = spark.sql(f"SELECT ds, sum(id) AS total, count(*) AS n FROM {target} GROUP BY ds ORDER BY ds")
    assert [tuple(row) for row in rows.collect()] == [("d0", 6, 3), ("d1", 11, 1)]
    record = settings.journal.require(refreshed.attempt_id)
    assert record.state is AttemptState.COMMITTED and record.partition_spec == {"ds": "d1"}


def test_a_commit_whose_staged_files_are_gone_aborts_and_changes_nothing(spark, metastore, settings, target):
    journal = settings.journal
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = snapshot(spark, target)
    staged = begin_and_write(spark, staged_table(metastore, journal, target, "replace"), SQL_V2)
    (gone,) = sorted(attempt_path(journal.require(staged.attempt_id)).rglob("*.parquet"))[:1]
    Path(gone).unlink()  # what a sweep of a host that did not see this attempt used to do
    with pytest.raises(StagingError, match=r"1 staged file\(s\) gone before the commit, e.g. .*\.parquet"):
        staged.commit()
    record = journal.require(staged.attempt_id)
    assert record.state is AttemptState.ABORTED and "gone before the commit" in (record.error or "")
    assert snapshot(spark, target) == before
    assert f"_v={staged.attempt_id}" not in version_dirs(metastore, target)


def test_a_partition_refresh_whose_staged_file_is_gone_aborts(spark, metastore, settings, target):
    """Its files lie in one directory per partition: one listing of the version finds the gap."""
    identifier = TableIdentifier.parse(target)
    by_parity = "SELECT id, concat('d', CAST(id % 2 AS STRING)) AS ds FROM range(0, 6)"

    def refresh() -> HivePartitionStagedTable:
        return HivePartitionStagedTable(identifier, ["ds"], {}, settings.journal, metastore.uri)

    build(spark, refresh(), by_parity)
    before = snapshot(spark, target)
    staged = begin_and_write(spark, refresh(), by_parity.replace("0, 6", "10, 16"))
    written = sorted(attempt_path(settings.journal.require(staged.attempt_id)).rglob("*.parquet"))
    assert {path.parent.name for path in written} == {"ds=d0", "ds=d1"}
    written[-1].unlink()
    with pytest.raises(StagingError, match=r"1 staged file\(s\) gone before the commit, e.g. .*ds=d1/"):
        staged.commit()
    assert settings.journal.require(staged.attempt_id).state is AttemptState.ABORTED
    assert snapshot(spark, target) == before
