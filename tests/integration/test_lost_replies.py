"""A commit whose catalog call fails without a verdict, for every kind (real metastore, Spark, PostgreSQL).

The catalog call really runs (or really does not) and then the caller sees a transport error,
as when the metastore's reply, or PostgreSQL's, is lost. The task must find out itself: succeed
when the change landed, or fail saying the table is still its previous version — never leave
a half-known state for the abort to destroy.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest
from psycopg import sql
from thrift.transport.TTransport import TTransportException

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.errors import CatalogConflictError, StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.jdbc_table import JdbcStagedTable, jdbc_sink_for_target
from airflow_provider_staged.staging.versions import RetentionPolicy
from tests.integration.staged_helpers import build, expected_snapshot, snapshot, staged_table

pytestmark = pytest.mark.timeout(300)

OLD_SQL = "SELECT id, concat('old-', id) AS label FROM range(500)"
NEW_SQL = "SELECT id, concat('new-', id) AS label FROM range(800)"
OLD_PARTS = "SELECT id, concat('old-', id) AS label, concat('2024-01-0', id % 2 + 1) AS ds FROM range(600)"
# Replaces ds=2024-01-01 and 2024-01-02, adds 2024-01-03.
NEW_PARTS = "SELECT id, concat('new-', id) AS label, concat('2024-01-0', id % 3 + 1) AS ds FROM range(900)"
KEEP_ALL = RetentionPolicy(keep_versions=None, max_age_seconds=None)


def _lose_reply(monkeypatch: pytest.MonkeyPatch, owner: type, method: str, applied: bool) -> list[str]:
    """Make the first ``owner.method`` call raise a transport error, after (``applied``) or
    instead of really running; return a list that records the injected call."""
    original = getattr(owner, method)
    injected: list[str] = []

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if injected:
            return original(self, *args, **kwargs)
        injected.append(method)
        if applied:
            original(self, *args, **kwargs)
        raise TTransportException(TTransportException.END_OF_FILE, "TSocket read 0 bytes")

    monkeypatch.setattr(owner, method, call)
    return injected


def _write_and_commit(spark: Any, staged: JournaledStagedTable, query: str) -> None:
    staged.begin()
    os.environ.update(staged.job_env())
    staged.written(run_staged_write(spark, query, staged.write_spec()))
    try:
        staged.commit()
    except BaseException:
        staged.abort("commit failed")
        raise


def _partitions(metastore, target: str) -> dict[tuple[str, ...], str]:
    database, table = target.split(".")
    with MetastoreClient(metastore.uri) as client:
        return {tuple(p.values): p.sd.location for p in client.partitions(database, table)}


@pytest.mark.parametrize("applied", [True, False], ids=["reply-lost", "request-lost"])
def test_hive_table(spark, metastore, journal, database, monkeypatch, applied):
    target = f"{database}.t_{uuid.uuid4().hex[:8]}"
    build(spark, staged_table(metastore, journal, target, "create", KEEP_ALL), OLD_SQL)
    staged = staged_table(metastore, journal, target, "replace", KEEP_ALL)
    injected = _lose_reply(monkeypatch, MetastoreClient, "alter_table", applied)
    if applied:
        _write_and_commit(spark, staged, NEW_SQL)
        assert snapshot(spark, target) == expected_snapshot(spark, NEW_SQL)
        assert journal.require(staged.attempt_id).state is AttemptState.COMMITTED
    else:
        with pytest.raises(StagingError, match="is still its previous version"):
            _write_and_commit(spark, staged, NEW_SQL)
        assert snapshot(spark, target) == expected_snapshot(spark, OLD_SQL)
        assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
        assert not Path(staged.location.removeprefix("file:")).exists()
    assert injected == ["alter_table"]


@pytest.mark.parametrize("applied", [True, False], ids=["reply-lost", "request-lost"])
@pytest.mark.parametrize("switch", ["switch_partitions", "alter_partitions"])
def test_hive_partitions(spark, metastore, journal, database, monkeypatch, applied, switch):
    """The commit prepared when the output was recorded is one ``switch_partitions``; when the
    table changed since, it is refused and the commit's locked calls end in ``alter_partitions``."""
    identifier = TableIdentifier.parse(f"{database}.p_{uuid.uuid4().hex[:8]}")

    def refresh() -> HivePartitionStagedTable:
        return HivePartitionStagedTable(identifier, ["ds"], {}, journal, metastore.uri, KEEP_ALL)

    _write_and_commit(spark, refresh(), OLD_PARTS)
    before = _partitions(metastore, identifier.name)
    assert sorted(before) == [("2024-01-01",), ("2024-01-02",)]
    staged = refresh()
    if switch == "alter_partitions":
        refused = CatalogConflictError("injected: the table changed after the commit was prepared")
        monkeypatch.setattr(MetastoreClient, "switch_partitions", mock.Mock(side_effect=refused))
    injected = _lose_reply(monkeypatch, MetastoreClient, switch, applied)
    if applied:
        _write_and_commit(spark, staged, NEW_PARTS)
        assert snapshot(spark, identifier.name) == expected_snapshot(spark, NEW_PARTS)
        after = _partitions(metastore, identifier.name)
        assert sorted(after) == [("2024-01-01",), ("2024-01-02",), ("2024-01-03",)]
        assert all(location.startswith(staged.location + "/") for location in after.values())
        assert journal.require(staged.attempt_id).state is AttemptState.COMMITTED
    else:
        with pytest.raises(StagingError, match="is still its previous version"):
            _write_and_commit(spark, staged, NEW_PARTS)
        assert snapshot(spark, identifier.name) == expected_snapshot(spark, OLD_PARTS)
        # The partition registered empty for the switch that never came is gone with the abort.
        assert _partitions(metastore, identifier.name) == before
        assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
        assert not Path(staged.location.removeprefix("file:")).exists()
    assert injected == [switch]


@pytest.mark.parametrize("applied", [True, False], ids=["reply-lost", "request-lost"])
def test_postgres_table(spark, postgres, postgres_conn_id, journal, monkeypatch, applied):
    schema = f"lost_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.conninfo(), autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        db.execute(sql.SQL("CREATE TABLE {} AS SELECT 1::bigint AS id").format(sql.Identifier(schema, "t")))
        sink = jdbc_sink_for_target(f"jdbc://{postgres_conn_id}/{schema}.t", journal)
        staged = sink.apply_staging(StagingContext(StagingPurpose.REPLACE_TABLE_AS))
        original = JdbcStagedTable.swap
        injected: list[str] = []

        def swap(self: JdbcStagedTable, txn: Any, *args: Any) -> Any:
            injected.append("swap")
            if not applied:
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            result = original(self, txn, *args)
            # Committed by the transaction's exit; the caller then loses the connection.
            monkeypatch.setattr(psycopg.Transaction, "__exit__", _commit_then_fail)
            return result

        monkeypatch.setattr(JdbcStagedTable, "swap", swap)
        if applied:
            _write_and_commit(spark, staged, "SELECT id FROM range(70)")
            assert journal.require(staged.attempt_id).state is AttemptState.COMMITTED
            expected = 70
        else:
            with pytest.raises(StagingError, match="is still its previous version"):
                _write_and_commit(spark, staged, "SELECT id FROM range(70)")
            assert journal.require(staged.attempt_id).state is AttemptState.ABORTED
            expected = 1
        monkeypatch.undo()
        count = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "t"))).fetchone()
        assert count == (expected,)
        assert injected == ["swap"]
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


_TRANSACTION_EXIT = psycopg.Transaction.__exit__


def _commit_then_fail(self: psycopg.Transaction, *exc: Any) -> Any:
    _TRANSACTION_EXIT(self, *exc)
    raise psycopg.OperationalError("connection lost after COMMIT")
