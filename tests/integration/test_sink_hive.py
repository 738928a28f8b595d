"""The built-in Hive sink in batch writes, on a real metastore and Spark (the session's Spark), and
a stream's journal pruning."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from unittest import mock

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.sink import hive as hive_module
from airflow_provider_staged.sink import recovery
from airflow_provider_staged.sink.api import WriterContext, check_committer_idempotent, commit_write
from airflow_provider_staged.sink.file_stream import LOG_DIR, logged_batches
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.runtime import stream_query_id, write_batch
from airflow_provider_staged.sink.tasks import write_task
from airflow_provider_staged.staging import pruning
from airflow_provider_staged.staging.attempts import QUARANTINED
from airflow_provider_staged.staging.audits import AuditFailedError, RowCountChange, RowExpectation
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.kinds.hive_sink import HiveAppendStagedTable
from airflow_provider_staged.staging.kinds.hive_table import SINK_ROWS_KEY
from airflow_provider_staged.staging.pruning import prune_journal
from airflow_provider_staged.staging.quarantine import publish_anyway
from airflow_provider_staged.staging.rollback import rollback
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import normalize_location
from tests.integration.staged_helpers import build, staged_table, stream_all_files


@pytest.fixture
def settings(metastore, tmp_path):
    return StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))


@pytest.fixture
def table(database):
    return TableIdentifier(database, "t_" + uuid.uuid4().hex[:8])


def rows(spark, table):
    spark.catalog.refreshTable(table.name)
    return sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table.quoted}").collect())


def files_under(root):
    """Every file under the table's root except Spark's hidden markers (the orphan check)."""
    found = []
    for directory, _, names in os.walk(root):
        found += [os.path.join(directory, n) for n in names if not n.startswith((".", "_SUCCESS"))]
    return sorted(found)


def sink_rows(settings: StagedSettings, table: TableIdentifier) -> str | None:
    with MetastoreClient(settings.metastore_uri) as client:
        return (client.get_table(table.database, table.table).parameters or {}).get(SINK_ROWS_KEY)


def table_root(sink: HiveSink) -> str:
    return normalize_location(sink.root()).removeprefix("file:")


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_append_and_overwrite(spark, settings, table, native):
    sink = HiveSink(table, settings, partition_by=["p"], native=native)
    df = spark.sql("SELECT id, CAST(id % 3 AS INT) AS p FROM range(30)")
    write_batch(df, sink)
    write_batch(spark.sql("SELECT id, CAST(id % 3 AS INT) AS p FROM range(30, 40)"), sink)
    assert rows(spark, table) == [(i, i % 3) for i in range(40)]
    assert sink_rows(settings, table) == "40"
    # Appended batches land beside each other, one directory per partition and write.
    overwrite = HiveSink(table, settings, mode="overwrite", partition_by=["p"], native=native)
    write_batch(spark.sql("SELECT id, CAST(1 AS INT) AS p FROM range(5)"), overwrite)
    assert rows(spark, table) == [(i, 1) for i in range(5)]
    assert sink_rows(settings, table) == "5"  # an overwrite counts afresh
    records = settings.journal.records()
    assert {r.kind for r in records} == {"hive_append", "hive_overwrite"}
    assert all(r.state is AttemptState.COMMITTED for r in records)
    # Nothing staged is left behind.
    assert not os.listdir(os.path.join(table_root(sink), "_staging"))


def test_a_staged_replace_resets_the_sinks_row_count(spark, metastore, settings, table):
    sink = HiveSink(table, settings)
    write_batch(spark.sql("SELECT id FROM range(10)"), sink)
    build(spark, staged_table(metastore, settings.journal, table.name, "replace"), "SELECT id FROM range(3)")
    assert rows(spark, table) == [(0,), (1,), (2,)] and sink_rows(settings, table) is None
    write_batch(spark.sql("SELECT id FROM range(3, 5)"), HiveSink(table, settings))
    assert sink_rows(settings, table) == "2"


def test_append_refuses_another_schema_and_changes_nothing(spark, settings, table):
    sink = HiveSink(table, settings)
    write_batch(spark.sql("SELECT id FROM range(3)"), sink)
    with pytest.raises(StagingError, match="does not match table"):
        write_batch(spark.sql("SELECT id, 'x' AS extra FROM range(3)"), sink)
    assert rows(spark, table) == [(0,), (1,), (2,)]
    assert not os.listdir(os.path.join(table_root(sink), "_staging"))


def test_bad_input_is_refused_naming_it(settings):
    with pytest.raises(ValueError, match="'upsert'"):
        HiveSink("db.t", settings, mode="upsert")
    with pytest.raises(ValueError, match="'p; drop'"):
        HiveSink("db.t", settings, partition_by=["p; drop"])
    with pytest.raises(ValueError, match=r"'x\.y\.z'"):
        HiveSink("x.y.z", settings)


def test_failed_and_duplicate_task_attempts_leave_no_orphans(spark, settings, table):
    """What Spark does with a retried and a speculative task: three attempts write, the messages of
    one attempt per partition reach the commit; the others' files must be swept, data exactly once."""
    sink = HiveSink(table, settings, native=False)
    batches = [spark.sql(f"SELECT id FROM range({i * 10}, {i * 10 + 10})").toArrow().to_batches()
               for i in range(2)]
    schema = spark.sql("SELECT id FROM range(1)").schema.json()
    context = WriterContext("w" + uuid.uuid4().hex[:8], "q", 0, "append", schema)
    committed = []
    for partition, data in enumerate(batches):
        task = replace(context, partition_id=partition, attempt_number=0, task_attempt_id=partition * 10)
        failed = write_task(sink, task, iter(data))  # the attempt that failed: its message is lost
        assert failed[0].files
        retried = replace(task, attempt_number=1, task_attempt_id=partition * 10 + 1)
        committed += write_task(sink, retried, iter(data))
        speculative = replace(task, attempt_number=2, task_attempt_id=partition * 10 + 2)
        write_task(sink, speculative, iter(data))  # the duplicate that lost the race
    assert commit_write(sink, context, committed)
    assert rows(spark, table) == [(i,) for i in range(20)]
    data_files = [f for f in files_under(table_root(sink)) if f.endswith(".parquet")]
    assert len(data_files) == 2, data_files


def test_an_append_cut_before_its_partition_switch_leaves_the_catalog_as_it_was(spark, settings, table):
    """An append to catalog partitions registers the partitions it adds at the empty placeholder,
    then switches all it touches in one call. Died between the two (injected), its abort drops
    what it registered: no partition that no write made, the table reads what it read."""
    sink = HiveSink(table, settings, partition_by=["ds"], track_partitions=True)
    write_batch(spark.sql("SELECT 1 AS id, '2024-01-01' AS ds"), sink)
    with MetastoreClient(settings.metastore_uri) as client:
        before = {tuple(p.values): p.sd.location for p in client.partitions(table.database, table.table)}
    assert list(before) == [("2024-01-01",)]
    batch = spark.sql("SELECT id, ds FROM VALUES (2, '2024-01-01'), (3, '2024-01-02') AS v(id, ds)")
    died = RuntimeError("injected: died before the switch")
    switch = mock.patch.object(MetastoreClient, "alter_partitions", side_effect=died)
    with switch as called, pytest.raises(StagingError, match="did not land"):
        write_batch(batch, sink)
    assert called.called, "the append never reached its partition switch"
    with MetastoreClient(settings.metastore_uri) as client:
        after = {tuple(p.values): p.sd.location for p in client.partitions(table.database, table.table)}
    assert after == before
    assert rows(spark, table) == [(1, "2024-01-01")]
    assert sorted(r.state.value for r in settings.journal.records()) == ["ABORTED", "COMMITTED"]


def test_committer_idempotency_contract(spark, settings, table, monkeypatch):
    """Committing the same committables again, and a replayed micro-batch, change nothing."""
    sink = HiveSink(table, settings, native=False)
    data = spark.sql("SELECT id FROM range(7)")
    context = WriterContext("q1-b0-r1", "q1", 0, "append", data.schema.json(), streaming=True)
    committables = write_task(sink, context, iter(data.toArrow().to_batches()))

    def target():
        return rows(spark, table)

    check_committer_idempotent(sink, committables, target)
    assert target() == [(i,) for i in range(7)]
    # A replay of micro-batch 0 by a new run of the query: recognised, dropped, swept.
    replay = replace(context, write_id="q1-b0-r2")
    again = write_task(sink, replay, iter(data.toArrow().to_batches()))
    assert not commit_write(sink, replay, again)
    assert target() == [(i,) for i in range(7)]
    assert not os.listdir(os.path.join(table_root(sink), "_staging"))
    with MetastoreClient(settings.metastore_uri) as client:
        params = client.get_table(table.database, table.table).parameters
    assert params["sink.batch.q1"] == "0"
    # Batch 1 of run r1 (which journaled batch 0) skips the replay checks; a restarted run r2
    # replaying batch 1 (its batch 0 was dropped, so not journaled) still takes them and drops it.
    checked: list[str] = []
    sweep_runs = hive_module._HiveGlobalCommitter._sweep_runs

    def spied(committer, write):
        checked.append(write.write_id)
        sweep_runs(committer, write)

    monkeypatch.setattr(hive_module._HiveGlobalCommitter, "_sweep_runs", spied)
    for write_id, published in (("q1-b1-r1", True), ("q1-b1-r2", False)):
        batch = replace(context, write_id=write_id, batch_id=1)
        staged = write_task(sink, batch, iter(data.toArrow().to_batches()))
        assert commit_write(sink, batch, staged) is published
    assert checked == ["q1-b1-r2"]
    assert target() == sorted([(i,) for i in range(7)] * 2)
    assert not os.listdir(os.path.join(table_root(sink), "_staging"))
    # An overwrite supersedes the version the append created: inside the grace it is kept (retention).
    write_batch(spark.sql("SELECT id FROM range(2)"), HiveSink(table, settings, mode="overwrite"))
    assert target() == [(0,), (1,)]
    versions = sorted(name for name in os.listdir(table_root(sink)) if name.startswith("_v="))
    assert "_v=q1-b0-r1" in versions and len(versions) == 2, versions


def test_a_streams_journal_stays_bounded_while_replay_and_rollback_work(
    spark, metastore, table, tmp_path, monkeypatch
):
    """Six micro-batches pruning every second one (keeping the newest ended record): the journal
    holds the last records and the overwrites whose versions exist; the replay of the last batch,
    whose record is pruned too, is still dropped (the table records its batch); rollback to the
    superseded overwrite still works."""
    retention = RetentionPolicy(keep_versions=2, max_age_seconds=None, grace_seconds=0)
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"),
                              retention=retention)
    monkeypatch.setattr(recovery, "PRUNE_EVERY_BATCHES", 2)
    monkeypatch.setattr(pruning, "KEEP_LAST_RECORDS", 1)
    sink = HiveSink(table, settings)
    overwrite = HiveSink(table, settings, "overwrite")
    for ids in (range(5), range(100, 103)):  # nullable, as the stream's rows
        write_batch(spark.createDataFrame([(i,) for i in ids], "id BIGINT"), overwrite)
    first, second = sorted(settings.journal.records(), key=lambda r: r.updated_at)
    source, checkpoint = tmp_path / "source", str(tmp_path / "checkpoint")
    for n in range(6):
        # One file each: one micro-batch each (maxFilesPerTrigger).
        spark.sql(f"SELECT id FROM range({1000 + 10 * n}, {1010 + 10 * n})").coalesce(1).write.mode(
            "append").parquet(str(source))

    stream_all_files(spark, "id BIGINT", source, sink, checkpoint)
    streamed = [*range(100, 103), *range(1000, 1060)]
    assert rows(spark, table) == [(i,) for i in streamed]
    appends = [r.attempt_id for r in settings.journal.records() if r.kind == "hive_append"]
    assert [a.split("-")[1] for a in sorted(appends)] == ["b4", "b5"]  # b0..b3 pruned at b2 and b4
    assert {first.attempt_id, second.attempt_id} <= {r.attempt_id for r in settings.journal.records()}
    journal = tmp_path / "journal"
    assert sorted(p.stem for p in journal.glob("*.lock")) == sorted(p.stem for p in journal.glob("*.json"))

    assert sorted(prune_journal(settings, keep_last=0)) == sorted(appends)  # what the maintenance pass may do
    # A crash after the sink's commit of batch 5, before Spark's; and without the file sink's log
    # of it (lost with its disk, say): Spark writes batch 5 again, and only the table can tell.
    stream_log = os.path.join(sink.stream_staging(stream_query_id(checkpoint)), LOG_DIR)
    for directory in (os.path.join(checkpoint, "commits"), stream_log):
        for name in ("5", ".5.crc"):
            os.remove(os.path.join(directory, name))
    stream_all_files(spark, "id BIGINT", source, sink, checkpoint)
    assert rows(spark, table) == [(i,) for i in streamed]  # the replay was dropped
    assert os.listdir(os.path.dirname(stream_log)) == [LOG_DIR]  # and its files deleted
    rollback(settings, table, first.attempt_id)
    assert rows(spark, table) == [(i,) for i in range(5)]


def test_a_failed_publication_stops_the_stream_and_its_restart_publishes_the_batch(
    spark, settings, table, tmp_path, monkeypatch
):
    """The metastore refuses the commit of micro-batch 1 (Spark's file sink logged it already):
    the query stops and says why, nothing of batch 1 is visible, and the restart publishes it
    (and batch 2) exactly once from the log: Spark does not write a logged batch again."""
    source, checkpoint = tmp_path / "source", str(tmp_path / "checkpoint")
    for n in range(3):
        spark.sql(f"SELECT id FROM range({10 * n}, {10 * n + 10})").coalesce(1).write.mode(
            "append").parquet(str(source))
    publish = HiveAppendStagedTable.publish

    def refused(staged, record):
        if staged.batch_id == 1:
            raise RuntimeError("injected: the metastore refused the commit")
        return publish(staged, record)

    monkeypatch.setattr(HiveAppendStagedTable, "publish", refused)
    sink = HiveSink(table, settings)
    with pytest.raises(StagingError, match="injected: the metastore refused"):
        stream_all_files(spark, "id BIGINT", source, sink, checkpoint)
    assert rows(spark, table) == [(i,) for i in range(10)]
    staging = sink.stream_staging(stream_query_id(checkpoint))
    assert 1 in logged_batches(staging)  # logged: Spark will not write it again
    monkeypatch.setattr(HiveAppendStagedTable, "publish", publish)
    stream_all_files(spark, "id BIGINT", source, sink, checkpoint)
    assert rows(spark, table) == [(i,) for i in range(30)]
    assert [p for p in files_under(staging) if LOG_DIR not in p] == []
    assert [r.attempt_id for r in settings.journal.open_attempts()] == []


def test_audited_batches_fail_drop_or_warn_and_a_quarantined_one_can_be_published(spark, settings, table):
    """Each write judged after it is staged and before its commit: a failing one is kept
    unpublished (the table unchanged) until a person publishes it; dropped rows are counted."""
    signed = "SELECT id, 2 - id AS amount FROM range(5)"  # amounts 2, 1, 0, -1, -2
    write_batch(spark.sql("SELECT id, id AS amount FROM range(10, 12)"), HiveSink(table, settings))
    before = rows(spark, table)

    def audited(mode: str) -> HiveSink:
        return HiveSink(table, settings, audits=[RowExpectation("amount_not_negative", "amount >= 0", mode)])

    with pytest.raises(AuditFailedError, match="amount_not_negative") as failed:
        write_batch(spark.sql(signed), audited("fail"))
    assert "amount_not_negative (2 failing row(s)" in str(failed.value), str(failed.value)
    assert rows(spark, table) == before
    [held] = [r for r in settings.journal.records() if (r.audits or {}).get("verdict") == QUARANTINED]
    assert held.state is AttemptState.WRITTEN
    assert [f for f in files_under(normalize_location(held.location).removeprefix("file:"))
            if f.endswith(".parquet")], "the quarantined batch's files must be kept"
    publish_anyway(settings, held.attempt_id)
    assert rows(spark, table) == sorted([*before, *[(i, 2 - i) for i in range(5)]])
    after_publish = rows(spark, table)
    write_batch(spark.sql(signed), audited("drop"))
    assert rows(spark, table) == sorted([*after_publish, (0, 2), (1, 1), (2, 0)])
    dropped = max(settings.journal.records(), key=lambda r: r.created_at)
    assert dropped.state is AttemptState.COMMITTED and dropped.manifest["dropped_rows"] == 2
    write_batch(spark.sql(signed), audited("warn"))
    assert len(rows(spark, table)) == len(after_publish) + 3 + 5
    warned = max(settings.journal.records(), key=lambda r: r.created_at)
    [result] = warned.audits["results"]
    assert warned.state is AttemptState.COMMITTED and result["failing"] == 2 and not result["passed"], result


def test_sink_audits_refused_where_they_cannot_run(settings):
    with pytest.raises(ValueError, match="native writer"):
        HiveSink("db.t", settings, native=False, audits=[RowExpectation("positive", "id > 0")])
    with pytest.raises(ValueError, match=r"\['grew'\]"):
        HiveSink("db.t", settings, audits=[RowCountChange("grew", 0.5)])
    with pytest.raises(ValueError, match="'id >'"):
        HiveSink("db.t", settings, audits=[{"kind": "row", "name": "broken", "condition": "id >"}])
