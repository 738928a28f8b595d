"""A partition commit on a table whose partitions Spark discovers from its directories.

A partitioned CTAS without a partition TTL (and every whole-table replace) leaves a table that
Spark reads by listing ``<location>/ds=*/``; a partition commit switches catalog partitions. It
used to register its partitions and stop there: Spark went on reading the old version, and the
commit said COMMITTED. Now the commit makes the catalog's partitions what Spark reads (those
outside its spec at their directories, its own at its version), then switches the table to the
catalog's partitions with its last call. Real metastore, Spark reads the table.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import tracks_partitions
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.sink.api import WriterContext, commit_write
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.tasks import new_write_id, write_task
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import abort_attempt, commit_written
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable, sweep_versions
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import normalize_location
from tests.fixtures.metastore import new_database
from tests.integration import race_workers

FIRST = {"b0": [1], "b1": [1], "n1": [1]}  # refresh 1: b0, b1, n1


@pytest.fixture(scope="module")
def database(metastore: MetastoreInfo) -> str:
    return new_database(metastore, "track")


def _read(spark, target: str) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """What Spark reads: each partition's ``refresh`` values."""
    spark.catalog.refreshTable(target)
    rows = spark.sql(f"SELECT ds, sort_array(collect_set(refresh)) AS r FROM {target} GROUP BY ds").collect()
    return {row.ds: list(row.r) for row in rows}


def _discovered(metastore: MetastoreInfo, target: str, journal: FileJournal) -> None:
    """A partitioned CTAS without a partition TTL: the whole-table kind, directory-discovered."""
    identifier = TableIdentifier.parse(target)
    staged = HiveStagedTable(identifier, StagingPurpose.CREATE_TABLE_AS, journal, metastore.uri)
    staged.begin()
    commit_written(staged, race_workers.write_partitions(staged, 1))


def _refresh(
    metastore: MetastoreInfo, target: str, journal: FileJournal, spec: dict[str, str]
) -> HivePartitionStagedTable:
    staged = HivePartitionStagedTable(
        TableIdentifier.parse(target), ["ds"], spec, journal, metastore.uri,
        purpose=StagingPurpose.CREATE_OR_REPLACE_TABLE_AS,
    )
    staged.begin()
    return staged


def _refreshed(
    metastore: MetastoreInfo, target: str, journal: FileJournal, spec: dict[str, str], refresh: int,
    partitions: list[str] | None = None,
) -> HivePartitionStagedTable:
    """A committed refresh of ``spec`` writing ``refresh``'s rows (into ``partitions``)."""
    staged = _refresh(metastore, target, journal, spec)
    commit_written(staged, race_workers.write_partitions(staged, refresh, partitions))
    return staged


def _tracked(metastore: MetastoreInfo, target: str) -> bool:
    with MetastoreClient(metastore.uri) as client:
        return tracks_partitions(client.get_table(*target.split(".")))


def test_a_full_partition_replace_switches_a_discovered_table(
    spark, metastore: MetastoreInfo, database: str, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    target = f"{database}.full"
    journal = FileJournal(tmp_path / "journal")
    _discovered(metastore, target, journal)
    assert _read(spark, target) == FIRST and not _tracked(metastore, target)
    staged = _refreshed(metastore, target, journal, {}, 2)
    assert _read(spark, target) == {"b0": [2], "b1": [2], "n1": [2], "n2": [2]}
    assert _tracked(metastore, target)
    assert staged.is_published(journal.require(staged.attempt_id))
    with MetastoreClient(metastore.uri) as client:  # registered ones too, not only Hive's adds
        assert all(p.createTime > 0 for p in client.partitions(*target.split("."))), "create time 0"


def test_a_partition_refresh_of_a_discovered_table_keeps_the_others(
    spark, metastore: MetastoreInfo, database: str, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    target = f"{database}.one"
    journal = FileJournal(tmp_path / "journal")
    _discovered(metastore, target, journal)
    _refreshed(metastore, target, journal, {"ds": "b1"}, 2, ["b1"])
    assert _read(spark, target) == {"b0": [1], "b1": [2], "n1": [1]}
    _refreshed(metastore, target, journal, {"ds": "n1"}, 3, ["n1"])  # now a tracked table: the usual path
    assert _read(spark, target) == {"b0": [1], "b1": [2], "n1": [3]}


def test_a_commit_failing_before_the_table_switch_changes_nothing_readers_see(
    spark, metastore: MetastoreInfo, database: str, tmp_path: Path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The partitions are switched, the table's last call fails: readers still see the old
    version, the attempt is not published, and its abort leaves the table as it was."""
    target = f"{database}.failed_switch"
    journal = FileJournal(tmp_path / "journal")
    _discovered(metastore, target, journal)
    staged = _refresh(metastore, target, journal, {"ds": "b1"})
    real_update = HivePartitionStagedTable._update_table

    def fail_the_switch(self, txn, current, targets, widened, track=False):  # type: ignore[no-untyped-def]
        if track:
            raise StagingError("injected: the table switch failed")
        real_update(self, txn, current, targets, widened, track)

    monkeypatch.setattr(HivePartitionStagedTable, "_update_table", fail_the_switch)
    with pytest.raises(StagingError, match="injected"):
        commit_written(staged, race_workers.write_partitions(staged, 2, ["b1"]))
    monkeypatch.undo()
    record = journal.require(staged.attempt_id)
    assert record.state is AttemptState.WRITTEN
    assert not staged.is_published(record)
    assert _read(spark, target) == FIRST and not _tracked(metastore, target)
    abort_attempt(staged, "the test's reconcile: the task failed")
    assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
    assert _read(spark, target) == FIRST
    _refreshed(metastore, target, journal, {"ds": "b1"}, 3, ["b1"])  # the next run converts the table
    assert _read(spark, target) == {"b0": [1], "b1": [3], "n1": [1]}


def test_a_sink_table_with_batch_directories_is_refused_and_unchanged(
    spark, metastore: MetastoreInfo, database: str, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    """A partitioned table the Hive sink appends to keeps each micro-batch in a directory inside
    the partition's; a catalog partition would hide those files, so a refresh of some partitions
    is refused with a clear error before it changes anything."""
    target = f"{database}.sink_batches"
    journal = FileJournal(tmp_path / "journal")
    sink = HiveSink(target, StagedSettings(metastore.uri, metastore.warehouse, str(journal.root)),
                    native=False, partition_by=["ds"])
    context = WriterContext(new_write_id(), "q", 0, "append", race_workers.PART_SCHEMA_JSON, partition_id=0,
                            task_attempt_id=0)
    rows = pa.table({"refresh": pa.array([1, 1], pa.int32()), "row": pa.array([0, 1], pa.int32()),
                     "ds": pa.array(["b0", "b1"])})
    commit_write(sink, context, write_task(sink, context, iter(rows.to_batches())))
    assert _read(spark, target) == {"b0": [1], "b1": [1]}
    staged = _refresh(metastore, target, journal, {"ds": "b1"})
    with pytest.raises(StagingError, match=r"partition directory .*ds=b0 of .*sink_batches keeps files in"):
        commit_written(staged, race_workers.write_partitions(staged, 2, ["b1"]))
    assert journal.require(staged.attempt_id).state is AttemptState.WRITTEN
    assert _read(spark, target) == {"b0": [1], "b1": [1]} and not _tracked(metastore, target)
    with MetastoreClient(metastore.uri) as client:
        assert client.partitions(database, "sink_batches") == []


def test_partitions_left_by_a_whole_table_replace_keep_no_version_alive(
    spark, metastore: MetastoreInfo, database: str, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    """A whole-table replace switches a catalog-partitioned table to its own directories; the
    catalog's partitions, pointing into the superseded version, are read by nobody after it, so
    retention deletes that version like any other (it used to keep it forever)."""
    target = f"{database}.replaced_tracked"
    journal = FileJournal(tmp_path / "journal")
    first = _refreshed(metastore, target, journal, {}, 1)  # creates a catalog-partitioned table
    assert _tracked(metastore, target)
    identifier = TableIdentifier.parse(target)
    replace = HiveStagedTable(identifier, StagingPurpose.REPLACE_TABLE_AS, journal, metastore.uri)
    replace.begin()
    commit_written(replace, race_workers.write_partitions(replace, 2))
    assert _read(spark, target) == {"b0": [2], "b1": [2], "n1": [2], "n2": [2]}
    with MetastoreClient(metastore.uri) as client:
        assert client.partitions(database, "replaced_tracked")  # still there, unread
    root = replace.versions_root(journal.require(replace.attempt_id))
    swept = sweep_versions(replace, RetentionPolicy(0, None, 0), root)
    assert [normalize_location(path) for path in swept] == [normalize_location(first.location)]
    assert _read(spark, target) == {"b0": [2], "b1": [2], "n1": [2], "n2": [2]}
