"""Statement sets in ``staged sql`` against a real metastore and Spark: every INSERT's result is
published or none is, when an INSERT fails and when the process is SIGKILLed before the group's
decision or between its first and last commit (then ``reconcile`` settles it). Prints the window
in which a reader sees some targets new and others old (``staging.groups``)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.cli.sql import make_session
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.sql.properties import SessionProperties
from airflow_provider_staged.sql.session import SqlSession, StatementError
from airflow_provider_staged.sql.splitting import split_statements
from airflow_provider_staged.staging.groups import GROUP_KIND
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import local_path
from tests.fixtures.metastore import new_database
from tests.integration import statement_set_workers

SPAWN = multiprocessing.get_context("spawn")
PAUSE_TIMEOUT = 60


@pytest.fixture
def settings(metastore: MetastoreInfo, tmp_path: Path) -> StagedSettings:
    return StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))


@pytest.fixture
def session(spark: Any, settings: StagedSettings) -> SqlSession:
    return make_session(spark, SessionProperties(), lambda: settings)


@pytest.fixture
def tables(session: SqlSession, metastore: MetastoreInfo) -> tuple[str, str]:
    """Two tables of one ``id bigint`` column: a = 0, 1, 2 and b = 0, 1."""
    db = new_database(metastore, "stmtset")
    run(session, f"CREATE TABLE {db}.a AS SELECT id FROM range(3);\n"
                 f"CREATE TABLE {db}.b AS SELECT id FROM range(2)")
    return f"{db}.a", f"{db}.b"


def run(session: SqlSession, script: str) -> list[Any]:
    return [session.execute(statement) for statement in split_statements(script)]


def ids(spark: Any, table: str) -> list[int]:
    spark.catalog.refreshTable(table)
    return sorted(row.id for row in spark.table(table).collect())


def locations(metastore: MetastoreInfo, *tables: str) -> list[str]:
    with MetastoreClient(metastore.uri) as client:
        return [client.get_table(*table.split(".")).sd.location for table in tables]


def groups_of(settings: StagedSettings) -> list[AttemptRecord]:
    return [record for record in settings.journal.records() if record.kind == GROUP_KIND]


def commit_spread(settings: StagedSettings, group: AttemptRecord) -> float:
    """Seconds between the first and the last member's journaled COMMITTED."""
    times = [t for member in group.catalog["members"]
             for state, t in settings.journal.require(member).history if state == "COMMITTED"]
    return max(times) - min(times)


def test_a_statement_set_publishes_every_table_in_either_spelling(
    spark: Any, session: SqlSession, settings: StagedSettings, tables: tuple[str, str]
) -> None:
    a, b = tables
    (result,) = run(session, f"BEGIN STATEMENT SET;\nINSERT INTO {a} SELECT id + 10 FROM range(2);\n"
                             f"INSERT OVERWRITE {b} VALUES (7);\nEND;")
    expected = [(a, "append", 2), (b, "overwrite", 1)]
    assert [(row[0], row[1], row[3]) for row in result.rows] == expected, result
    assert ids(spark, a) == [0, 1, 2, 10, 11] and ids(spark, b) == [7]
    windows = [result.rows[0][5]]
    # A partitioned target: the query's last columns are its partition columns (dynamic partitions).
    parts = f"{a.split('.')[0]}.parts"
    run(session, f"CREATE TABLE {parts} PARTITIONED BY (ds) AS\n"
                 "SELECT id, CAST(id AS STRING) AS ds FROM range(2)")
    run(session, f"EXECUTE STATEMENT SET BEGIN INSERT INTO {parts} SELECT 5, '1' UNION ALL SELECT 6, '3';\n"
                 f"  INSERT INTO {b} SELECT 9; END;")
    spark.catalog.refreshTable(parts)
    assert sorted(map(tuple, spark.table(parts).collect())) == [(0, "0"), (1, "1"), (5, "1"), (6, "3")]
    assert ids(spark, b) == [7, 9]
    for value in (20, 21, 22):  # a few more sets, to measure the window
        (result,) = run(session, f"EXECUTE STATEMENT SET BEGIN INSERT INTO {a} VALUES ({value});\n"
                                 f"  INSERT INTO TABLE {b} SELECT {value}; END;")
        windows.append(result.rows[0][5])
    assert ids(spark, a) == [0, 1, 2, 10, 11, 20, 21, 22] and ids(spark, b) == [7, 9, 20, 21, 22]
    found = groups_of(settings)
    assert [g.state for g in found] == [AttemptState.COMMITTED] * 5
    spreads = sorted(round(commit_spread(settings, g) * 1000, 1) for g in found)
    print(f"\nstatement sets of 2 tables, ms from the first commit's start to the last one's end: "
          f"{sorted(windows)}; between the members' journaled COMMITTED: {spreads}")


def test_a_failing_insert_leaves_every_table_exactly_old(
    spark: Any, session: SqlSession, settings: StagedSettings, metastore: MetastoreInfo,
    tables: tuple[str, str],
) -> None:
    a, b = tables
    before = locations(metastore, a, b)
    script = (f"EXECUTE STATEMENT SET BEGIN\n  INSERT INTO {a} VALUES (5);\n"
              f"  INSERT INTO {b} SELECT CAST(raise_error('boom') AS BIGINT);\nEND;")
    with pytest.raises(StatementError) as failed:
        run(session, script)
    assert "boom" in failed.value.message and (failed.value.line, failed.value.column) == (3, 3)
    assert ids(spark, a) == [0, 1, 2] and ids(spark, b) == [0, 1]
    assert locations(metastore, a, b) == before
    assert all(r.state is AttemptState.ABORTED for r in settings.journal.records()
               if r.group is not None or r.kind == GROUP_KIND)
    # Spark's position of an error in an INSERT's query, in the script.
    with pytest.raises(StatementError) as failed:
        run(session, f"SELECT 1;\nEXECUTE STATEMENT SET BEGIN\n  INSERT INTO {a} VALUES (5);\n"
                     f"  INSERT INTO {b}\n    SELECT id FROM range(1) WHERE nope > 0;\nEND;")
    assert "nope" in failed.value.message and (failed.value.line, failed.value.column) == (5, 35)
    assert ids(spark, a) == [0, 1, 2]
    # A missing target is refused at its INSERT before anything is journaled.
    journaled = len(settings.journal.records())
    with pytest.raises(StatementError) as failed:
        run(session, f"BEGIN STATEMENT SET;\nINSERT INTO {a} VALUES (5);\n"
                     f"INSERT INTO {a}_missing SELECT 1;\nEND;")
    assert "missing" in failed.value.message and (failed.value.line, failed.value.column) == (3, 1)
    assert len(settings.journal.records()) == journaled and ids(spark, a) == [0, 1, 2]
    # A table that does not read Parquet files is refused the same way.
    run(session, f"CREATE TABLE {a}_text (id BIGINT) USING csv")
    script = f"EXECUTE STATEMENT SET BEGIN INSERT INTO {a} VALUES (5); INSERT INTO {a}_text SELECT 1; END"
    with pytest.raises(StatementError) as failed:
        run(session, script)
    where = script.index(f"INSERT INTO {a}_text") + 1
    assert "not a Parquet table" in failed.value.message and failed.value.column == where, failed.value
    assert len(settings.journal.records()) == journaled and ids(spark, a) == [0, 1, 2]


def _killed_at(point: str, settings: StagedSettings, metastore: MetastoreInfo, tables: tuple[str, str],
               tmp_path: Path) -> None:
    """Run the set of two appends in a worker, SIGKILL it once it waits at ``point``."""
    pause = tmp_path / "pause"
    pause.mkdir()
    (pause / point).touch()
    worker = SPAWN.Process(target=statement_set_workers.append_set, daemon=True, args=(
        metastore.uri, metastore.warehouse, settings.journal_dir, str(pause), list(tables)))
    worker.start()
    reached = pause / f"{point}.reached"
    deadline = time.monotonic() + PAUSE_TIMEOUT
    while not reached.exists() or not reached.read_text():
        assert worker.is_alive() and time.monotonic() < deadline, f"the worker never reached {point}"
        time.sleep(0.1)
    assert int(reached.read_text()) == worker.pid
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(10)  # reaped: its owner record now names a process that is gone


def test_a_kill_between_the_commits_is_rolled_forward(
    spark: Any, settings: StagedSettings, metastore: MetastoreInfo, tables: tuple[str, str], tmp_path: Path
) -> None:
    a, b = tables
    _killed_at("group_commit", settings, metastore, tables, tmp_path)
    new = [0, 1, 2, *range(100, 100 + statement_set_workers.ROWS)]
    assert ids(spark, a) == new and ids(spark, b) == [0, 1]  # the window: a new, b still old
    (group,) = groups_of(settings)
    assert group.state is AttemptState.COMMITTED
    actions = {action.target: action.action for action in reconcile(settings)}
    assert actions == {b: "committed (its group was decided)"}, actions
    assert ids(spark, a) == new and ids(spark, b) == [0, 1, *range(100, 100 + statement_set_workers.ROWS)]


def test_a_kill_before_the_decision_leaves_every_table_old(
    spark: Any, settings: StagedSettings, metastore: MetastoreInfo, tables: tuple[str, str], tmp_path: Path
) -> None:
    a, b = tables
    before = locations(metastore, a, b)
    _killed_at("group_decision", settings, metastore, tables, tmp_path)
    actions = sorted(action.action for action in reconcile(settings))
    assert actions == ["aborted", "aborted", "aborted"], actions  # the group and both members
    assert ids(spark, a) == [0, 1, 2] and ids(spark, b) == [0, 1]
    assert locations(metastore, a, b) == before
    members = [r for r in settings.journal.records() if r.group is not None]
    assert len(members) == 2 and all(r.state is AttemptState.ABORTED for r in members)
    assert not any(local_path(r.location).exists() for r in members)  # their staged files are gone
