"""Audits on real Spark and a real metastore: each violation mode on a whole table and on a
partition refresh, the quarantine (kept, published anyway or refused, swept), and a task killed
during its audit."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.attempts import JournaledStagedTable, is_quarantined, run_attempt
from airflow_provider_staged.staging.audits import (
    AuditError,
    AuditFailedError,
    AuditSuite,
    RowCountChange,
    RowExpectation,
    SchemaUnchanged,
    TableExpectation,
    coerce_audits,
    references,
    unique,
)
from airflow_provider_staged.staging.errors import CommitConflictError, StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState, TaskRef
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds import from_record
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.quarantine import publish_anyway
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from tests.integration.staged_helpers import attempt_path, build, staged_table

# 20 rows; ids 0-4 have a negative amount, id 7 a NULL label.
SQL_V2 = ("SELECT id, CAST(id - 5 AS INT) AS amount, IF(id = 7, NULL, concat('v2-', id)) AS label "
          "FROM range(20)")
SQL_V1 = "SELECT id, CAST(id AS INT) AS amount, concat('v1-', id) AS label FROM range(10)"


@pytest.fixture
def settings(metastore, journal):
    return StagedSettings(metastore.uri, metastore.warehouse, str(journal.root),
                          retention=RetentionPolicy(quarantine_seconds=3600))


def audited(staged: JournaledStagedTable, *audits) -> JournaledStagedTable:
    staged.audits = coerce_audits(audits)
    return staged


def run(spark, staged: JournaledStagedTable, sql: str):
    """The operator's path: begin, the Spark job, written, audit, commit (abort on failure)."""
    return run_attempt(staged, lambda spec: run_staged_write(spark, sql, spec), ttl_seconds=600)


def rows(spark, target: str) -> list[tuple]:
    spark.catalog.refreshTable(target)
    return sorted(tuple(row) for row in spark.table(target).collect())


def results(journal: FileJournal, attempt_id: str) -> dict[str, dict]:
    return {item["name"]: item for item in journal.require(attempt_id).audits["results"]}


def test_whole_table_fail_quarantines_then_reconcile_keeps_and_sweeps(spark, metastore, journal, target,
                                                                      settings):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = rows(spark, target)
    staged = audited(staged_table(metastore, journal, target, "replace"),
                     RowExpectation("non_negative", "amount >= 0"), TableExpectation("some", "COUNT(*) > 0"))
    with pytest.raises(AuditFailedError) as failed:
        run(spark, staged, SQL_V2)
    message = str(failed.value)
    assert message.startswith(f"audit(s) failed on {target}: non_negative (5 failing row(s), e.g. [{{")
    assert "'amount': '-5'" in message and f"staged publish {staged.attempt_id}" in message
    assert rows(spark, target) == before  # exactly the old content
    record = journal.require(staged.attempt_id)
    assert is_quarantined(record) and attempt_path(record).exists()  # the staged data is kept
    found = results(journal, staged.attempt_id)
    assert (found["non_negative"]["failing"], found["some"]["passed"]) == (5, True)
    assert len(found["non_negative"]["samples"]) == 5
    # The failed task's abort and reconcile leave it for inspection until the quarantine is over.
    staged.abort("task failed")
    assert [a.action for a in reconcile(settings)] == ["quarantined"]
    with pytest.raises(StagingError, match="failed its audits: cannot commit"):
        staged.commit()
    actions = reconcile(settings, now=time.time() + 3601)
    assert [a.action for a in actions] == ["swept"]
    assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
    assert not attempt_path(record).exists() and rows(spark, target) == before


def test_whole_table_drop_and_warn_publish_and_report(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    staged = audited(
        staged_table(metastore, journal, target, "replace"),
        RowExpectation("non_negative", "amount >= 0", "drop"),
        RowExpectation("label present", "label IS NOT NULL", "warn"),  # any printable name
        unique("id"),
        RowCountChange("no_shrink", 0.5),
        {"column_mapping": {"amount": {"min": {"geq_to": 0}}}, "mode": "warn"},
        # Partition clauses (FILTER (WHERE ...) on the aggregates, CASE on a row check).
        {"column_mapping": {"amount": {"max": {"leq_to": 5, "partition_clause": "id < 11"}},
                            "id": {"unique_check": {"equal_to": 0}}}, "partition_clause": "amount >= 0"},
        {"checks": {"big_labelled": {"check_statement": "label IS NOT NULL",
                                     "partition_clause": "amount > 5"}}},
    )
    manifest = run(spark, staged, SQL_V2)
    expected = sorted((i, i - 5, None if i == 7 else f"v2-{i}") for i in range(5, 20))
    assert rows(spark, target) == expected  # exactly the rows amount >= 0 kept
    assert manifest.rows == 15 and manifest.dropped_rows == 5
    record = journal.require(staged.attempt_id)
    assert record.state is AttemptState.COMMITTED and record.audits["verdict"] == "passed"
    found = results(journal, staged.attempt_id)
    assert (found["non_negative"]["passed"], found["non_negative"]["failing"]) == (True, 5)
    assert (found["label present"]["passed"], found["label present"]["failing"]) == (False, 1)
    assert found["label present"]["samples"] == [{"id": "7", "amount": "2", "label": None}]
    assert (found["id_unique"]["passed"], found["id_unique"]["value"]) == (True, 0)
    assert found["no_shrink"]["passed"]  # 15 rows against the 10 that v1 recorded
    assert (found["amount.min"]["passed"], found["amount.min"]["value"]) == (True, 0)
    assert (found["amount.max"]["passed"], found["amount.max"]["value"]) == (True, 5)  # 14 over all rows
    assert (found["id.unique_check"]["passed"], found["id.unique_check"]["value"]) == (True, 0)
    assert (found["big_labelled"]["passed"], found["big_labelled"]["failing"]) == (True, 0)  # id 7: amount 2


def test_change_audit_fails_when_rows_drop_below_the_recorded_fraction(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    staged = audited(staged_table(metastore, journal, target, "replace"), RowCountChange("no_shrink", 0.5))
    with pytest.raises(AuditFailedError, match=r"no_shrink \(below 0.5 x previous: table: 10 -> 4 rows\)"):
        run(spark, staged, "SELECT id, CAST(id AS INT) AS amount, 'x' AS label FROM range(4)")
    assert len(rows(spark, target)) == 10


def test_schema_audit_keeps_a_retyped_replace_unpublished(spark, metastore, journal, target):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    retyped = "SELECT id, CAST(id AS DECIMAL(10, 2)) AS amount, 'x' AS label, 1 AS extra FROM range(10)"
    staged = audited(staged_table(metastore, journal, target, "replace"), SchemaUnchanged())
    changes = r"schema_unchanged \(added extra int; amount int -> decimal\(10,2\)\)"
    with pytest.raises(AuditFailedError, match=changes):
        run(spark, staged, retyped)
    assert rows(spark, target) == [(i, i, f"v1-{i}") for i in range(10)]  # exactly the old version
    # The same columns with the same types pass, whatever the data.
    same = audited(staged_table(metastore, journal, target, "replace"), SchemaUnchanged())
    run(spark, same, "SELECT id, CAST(id * 2 AS INT) AS amount, 'y' AS label FROM range(3)")
    assert rows(spark, target) == [(i, i * 2, "y") for i in range(3)]
    assert results(journal, same.attempt_id)["schema_unchanged"]["passed"] is True


def partitions(metastore, journal, target, spec, *audits) -> HivePartitionStagedTable:
    staged = HivePartitionStagedTable(TableIdentifier.parse(target), ["ds"], spec, journal, metastore.uri)
    return audited(staged, *audits)


def test_partition_refresh_fail_drop_warn_and_publish(spark, metastore, journal, target, settings):
    # Every build's columns have the same nullability: a refresh whose schema differs from the
    # table's in nullability alone is refused (``switched_schema``).
    build(spark, partitions(metastore, journal, target, {}),
          "SELECT id, IF(id < 0, NULL, CAST(id AS INT)) AS amount, IF(id % 2 = 0, 'd0', 'd1') AS ds "
          "FROM range(20)")
    before = rows(spark, target)
    # d1 shrinks from 10 rows to 2: its change audit fails, its old rows stay.
    failing = partitions(metastore, journal, target, {"ds": "d1"}, RowCountChange("no_shrink", 0.5))
    with pytest.raises(AuditFailedError, match=r"no_shrink \(below 0.5 x previous: ds=d1: 10 -> 2 rows\)"):
        run(spark, failing, "SELECT id, IF(id < 0, NULL, CAST(id AS INT)) AS amount, 'd1' AS ds "
                            "FROM range(2)")
    assert rows(spark, target) == before
    assert is_quarantined(journal.require(failing.attempt_id))
    assert attempt_path(journal.require(failing.attempt_id)).exists()  # kept for inspection
    # A quarantined refresh of a new partition leaves the catalog as it was (nothing registered).
    new_day = partitions(metastore, journal, target, {}, RowExpectation("big", "amount >= 100"))
    with pytest.raises(AuditFailedError, match="big"):
        run(spark, new_day, "SELECT id, IF(id < 0, NULL, CAST(id AS INT)) AS amount, 'd2' AS ds "
                            "FROM range(3)")
    database, table = target.split(".")
    with MetastoreClient(metastore.uri) as client:
        assert sorted(tuple(p.values) for p in client.partitions(database, table)) == [("d0",), ("d1",)]
    # d0: rows with a negative or NULL amount are dropped, amounts of 8 and more warned about.
    dropping = partitions(metastore, journal, target, {"ds": "d0"},
                          RowExpectation("non_negative", "amount >= 0", "drop"),
                          RowExpectation("small", "amount < 8", "warn"),
                          RowCountChange("no_shrink", 0.5))
    manifest = run(spark, dropping, "SELECT id, IF(id = 3, NULL, CAST(id - 2 AS INT)) AS amount, 'd0' AS ds "
                                    "FROM range(12)")
    after = rows(spark, target)
    assert [r for r in after if r[2] == "d1"] == [r for r in before if r[2] == "d1"]
    assert [r for r in after if r[2] == "d0"] == [(i, i - 2, "d0") for i in range(2, 12) if i != 3]
    assert manifest.dropped_rows == 3
    found = results(journal, dropping.attempt_id)
    # Counted before the drop: the NULL amount violates both.
    assert (found["non_negative"]["failing"], found["small"]["failing"]) == (3, 3)
    assert found["small"]["samples"] == [{"id": "10", "amount": "8", "ds": "d0"},
                                         {"id": "11", "amount": "9", "ds": "d0"}]
    assert found["no_shrink"]["passed"]  # d0: 10 -> 9 rows
    # The d0 commit did not touch d1: the quarantined d1 refresh may still be published.
    publish_anyway(settings, failing.attempt_id)
    assert [r for r in rows(spark, target) if r[2] == "d1"] == [(0, 0, "d1"), (1, 1, "d1")]
    # The quarantined d2 refresh is swept once its quarantine is over; the table is untouched.
    before = rows(spark, target)
    assert [a.action for a in reconcile(settings, now=time.time() + 3601)] == ["swept"]
    assert not attempt_path(journal.require(new_day.attempt_id)).exists()
    assert rows(spark, target) == before


def test_publish_anyway_and_refusal_when_the_table_moved_on(spark, metastore, journal, target, settings):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    check = RowExpectation("non_negative", "amount >= 0")
    first = audited(staged_table(metastore, journal, target, "replace"), check)
    with pytest.raises(AuditFailedError):
        run(spark, first, SQL_V2)
    published = publish_anyway(settings, first.attempt_id)
    assert published.state is AttemptState.COMMITTED and published.audits["verdict"] == "published_anyway"
    assert len(rows(spark, target)) == 20
    # A second quarantined version, then a newer commit: publishing it would undo that commit.
    second = audited(staged_table(metastore, journal, target, "replace"), check)
    with pytest.raises(AuditFailedError):
        run(spark, second, SQL_V2)
    build(spark, staged_table(metastore, journal, target, "replace"), SQL_V1)
    with pytest.raises(CommitConflictError, match=f"{target} moved on since attempt {second.attempt_id}"):
        publish_anyway(settings, second.attempt_id)
    assert rows(spark, target) == sorted((i, i, f"v1-{i}") for i in range(10))
    assert is_quarantined(journal.require(second.attempt_id))
    with pytest.raises(StagingError, match="is not quarantined: it is COMMITTED"):
        publish_anyway(settings, first.attempt_id)


def test_reference_audit_keeps_a_version_with_keys_missing_from_the_referenced_table(
    spark, metastore, journal, target
):
    """A foreign key: every non-NULL id of the new version must be a customer of another table."""
    customers = f"{target}_customers"
    spark.sql(f"CREATE TABLE {customers} USING parquet AS SELECT id AS customer FROM range(15)")
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = rows(spark, target)
    check = references("id", customers, "customer")
    staged = audited(staged_table(metastore, journal, target, "replace"), check)
    with pytest.raises(AuditFailedError, match=r"id_references_t_\w+_customers \(5 failing row\(s\)"):
        run(spark, staged, SQL_V2)  # ids 15-19 are no customer
    assert rows(spark, target) == before and is_quarantined(journal.require(staged.attempt_id))
    found = results(journal, staged.attempt_id)[check.name]
    assert (found["kind"], found["failing"]) == ("reference", 5)
    assert sorted(int(row["id"]) for row in found["samples"]) == [15, 16, 17, 18, 19]
    # Once the referenced table has them, the same build passes and is published.
    spark.sql(f"INSERT INTO {customers} SELECT id FROM range(15, 20)")
    run(spark, audited(staged_table(metastore, journal, target, "replace"), check), SQL_V2)
    assert len(rows(spark, target)) == 20


def test_unknown_column_fails_before_writing(spark, metastore, journal, target):
    staged = audited(staged_table(metastore, journal, target, "create"), RowExpectation("pos", "cost >= 0"))
    with pytest.raises(AuditError, match=r"audit 'pos': unknown column 'cost' .* at line 1, column 1"):
        run(spark, staged, SQL_V1)
    record = journal.require(staged.attempt_id)
    assert record.state is AttemptState.ABORTED and not attempt_path(record).exists()


def _audit_in_child(raw: dict, attempt_id: str, pause_dir: str) -> None:
    """The task's audit step in its own process, which waits at the audit's pause point."""
    os.environ["STAGED_PAUSE_DIR"] = pause_dir
    settings = StagedSettings(**raw)
    from_record(settings.journal.require(attempt_id), settings).audit()


def test_task_killed_during_audit_is_aborted_never_published(spark, metastore, journal, target, settings,
                                                             tmp_path):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    before = rows(spark, target)
    check = RowExpectation("pos", "amount >= 0")
    staged = audited(staged_table(metastore, journal, target, "replace"), check)
    staged.task = TaskRef("dag", "build", "run-1", 1)
    staged.begin()
    staged.written(run_staged_write(spark, SQL_V1, staged.write_spec_audited()))  # passes its audit
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    (pause_dir / "audit").touch()
    raw = {"metastore_uri": metastore.uri, "warehouse": metastore.warehouse, "journal_dir": str(journal.root)}
    child = multiprocessing.get_context("spawn").Process(
        target=_audit_in_child, args=(raw, staged.attempt_id, str(pause_dir)))
    child.start()
    reached = pause_dir / "audit.reached"
    deadline = time.monotonic() + 60
    while not reached.exists():
        assert child.is_alive() and time.monotonic() < deadline, "the audit never reached its pause point"
        time.sleep(0.1)
    os.kill(child.pid, signal.SIGKILL)  # the task dies during its audit
    child.join()
    record = journal.require(staged.attempt_id)
    assert record.state is AttemptState.WRITTEN and "verdict" not in record.audits
    # Even a task state of success (a commit callback would commit a WRITTEN attempt) aborts it.
    actions = reconcile(settings, task_state=lambda ref: "success")
    assert [a.action for a in actions] == ["aborted"]
    record = journal.require(staged.attempt_id)
    assert record.state is AttemptState.ABORTED and record.error == "its audits were never recorded"
    assert rows(spark, target) == before and not Path(attempt_path(record)).exists()


def test_declared_audits_are_journaled_at_begin(metastore, journal, target):
    staged = audited(staged_table(metastore, journal, target, "create_or_replace"), unique("id"))
    staged.begin()
    assert AuditSuite.from_list(journal.require(staged.attempt_id).audits["declared"]) == staged.audits
    staged.written({"location": staged.location})
    with pytest.raises(StagingError, match="has audits that were not recorded: cannot commit"):
        staged.commit()
    staged.abort("test over")


def test_a_job_that_ran_no_audit_is_not_published(spark, metastore, journal, target):
    """A Spark job that ignores the audits (an older package on a cluster) reports none: the
    attempt fails and is aborted, never published unaudited."""
    staged = audited(staged_table(metastore, journal, target, "create"), RowExpectation("pos", "amount >= 0"))

    def unaudited_job(spec):
        return run_staged_write(spark, SQL_V1, {key: value for key, value in spec.items() if key != "audits"})

    with pytest.raises(StagingError, match=r"reported no result for audit\(s\) \['pos'\]"):
        run_attempt(staged, unaudited_job, ttl_seconds=600)
    assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
    assert not spark.catalog.tableExists(target)
