"""JDBC staged tables on a real PostgreSQL server, written by a real Spark session.

Each test works in its own schema. ``run_staged`` drives an attempt the way the operator does:
begin, the Spark job, written, commit, and abort on any failure.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_provider_staged.catalogs.postgres_connections import APPLICATION_NAME
from airflow_provider_staged.catalogs.postgres_types import UnsupportedColumnTypeError
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose
from airflow_provider_staged.staging.attempts import abort_attempt, is_quarantined, run_attempt
from airflow_provider_staged.staging.audits import (
    AuditFailedError,
    RowCountChange,
    RowExpectation,
    TableExpectation,
    coerce_audits,
    unique,
)
from airflow_provider_staged.staging.errors import (
    CommitConflictError,
    StagingError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds import from_record
from airflow_provider_staged.staging.kinds.jdbc_table import (
    JdbcStagedTable,
    JdbcWriteOptions,
    jdbc_sink_for_target,
)
from airflow_provider_staged.staging.maintenance import sweep_all_versions
from airflow_provider_staged.staging.quarantine import publish_anyway
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from tests.fixtures.airflow_cli import AirflowCli
from tests.fixtures.postgres_server import PostgresServer
from tests.integration.staged_helpers import wait_for_open_attempt

pytestmark = pytest.mark.timeout(300)


def rebuilt_from_journal(journal: FileJournal, attempt_id: str):
    """The attempt as reconcile rebuilds it: by its kind, from the journal alone."""
    settings = StagedSettings("thrift://127.0.0.1:9", "/unused", str(journal.root))
    return from_record(journal.require(attempt_id), settings)

OLD_ROWS, NEW_ROWS = 20_000, 30_000
OLD = (OLD_ROWS, OLD_ROWS * (OLD_ROWS + 1))  # count, sum(v) of make_table: v = 2 * id
NEW_QUERY = f"SELECT id, id * 3 AS v FROM range(1, {NEW_ROWS + 1})"
NEW = (NEW_ROWS, 3 * NEW_ROWS * (NEW_ROWS + 1) // 2)
LOOKALIKE = "t__old_0123456789"  # a user's table that merely looks like one of ours


@pytest.fixture
def db(postgres: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def schema(db: psycopg.Connection[Any]) -> Iterator[str]:
    name = f"t_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(autouse=True)
def _forget_job_env() -> Iterator[None]:
    yield
    for key in [key for key in os.environ if key.startswith("STAGED_JDBC_PASSWORD_")]:
        del os.environ[key]


def staged_table(
    conn_id: str, schema: str, purpose: str, journal: FileJournal, table: str = "t", **options: Any
) -> JdbcStagedTable:
    sink = jdbc_sink_for_target(
        f"jdbc://{conn_id}/{schema}.{table}", journal, options=JdbcWriteOptions(**options)
    )
    return sink.apply_staging(StagingContext(StagingPurpose.parse(purpose)))


def write(spark: Any, staged: JdbcStagedTable, query: str) -> dict[str, Any]:
    """The Spark job, with the secrets in its environment as the engines pass them."""
    os.environ.update(staged.job_env())
    return run_staged_write(spark, query, staged.write_spec())


def run_staged(spark: Any, staged: JdbcStagedTable, query: str) -> None:
    """What ``execute_staged`` does: begin, write, commit, housekeep; abort on failure."""
    staged.begin()
    if staged.skipped:
        return
    try:
        staged.written(write(spark, staged, query))
        staged.commit()
    except BaseException as error:
        staged.abort(f"failed: {error}")
        raise
    staged.housekeep()


def tables(db: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = db.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
        (schema,),
    ).fetchall()
    return {row[0] for row in rows}


def count_sum(db: psycopg.Connection[Any], schema: str, table: str = "t") -> tuple[int, int]:
    query = sql.SQL("SELECT count(*), coalesce(sum(v), 0)::bigint FROM {}").format(
        sql.Identifier(schema, table)
    )
    count, total = db.execute(query).fetchone()
    return int(count), int(total)


def make_table(db: psycopg.Connection[Any], schema: str, table: str = "t") -> None:
    name = sql.Identifier(schema, table)
    db.execute(
        sql.SQL(
            "CREATE TABLE {} AS SELECT g::bigint AS id, 2 * g::bigint AS v FROM generate_series(1, {}) g"
        ).format(name, sql.Literal(OLD_ROWS))
    )


def states(journal: FileJournal) -> list[str]:
    return [record.state.value for record in journal.records()]


def task_env(
    airflow_cli: AirflowCli, metastore: MetastoreInfo, journal: FileJournal, target: str, **extra: str
) -> dict[str, str]:
    """``AirflowCli.task_env`` plus the PostgreSQL connection the JDBC ``target`` names."""
    conn_var = f"AIRFLOW_CONN_{target.removeprefix('jdbc://').split('/')[0].upper()}"
    return airflow_cli.task_env(metastore, journal.root, target, **{conn_var: os.environ[conn_var]}, **extra)


def inserting_sessions(db: psycopg.Connection[Any]) -> int:
    """Sessions of ours running a JDBC INSERT now."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND query LIKE 'INSERT INTO%%' AND state <> 'idle'",
        (APPLICATION_NAME,),
    ).fetchone()
    return int(row[0])


# -- success --------------------------------------------------------------------------------------


def test_create_types_columns_and_keeps_the_password_out(
    spark: Any,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres: PostgresServer,
    postgres_conn_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    staged = staged_table(
        postgres_conn_id, schema, "create", journal, batch_size=250, num_partitions=2, count_rows=True
    )
    query = """
        SELECT id, CAST(id / 4 AS DECIMAL(12, 2)) AS amount, id % 2 = 0 AS even, concat('n', id) AS Name,
               timestamp_seconds(1767225600 + id) AS ts, array(id, id + 1) AS pair, array('a', 'b') AS tags,
               DATE'2026-11-21' AS d
        FROM range(1000)
    """
    run_staged(spark, staged, query)

    assert tables(db, schema) == {"t"}
    types = dict(
        db.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (f"{schema}.t",),
        ).fetchall()
    )
    assert types == {
        "id": "bigint",
        "amount": "numeric(12,2)",
        "even": "boolean",
        "name": "text",
        "ts": "timestamp with time zone",
        "pair": "bigint[]",
        "tags": "text[]",
        "d": "date",
    }
    row = db.execute(
        sql.SQL(
            "SELECT count(*), sum(amount), min(extract(epoch FROM ts)), count(*) FILTER (WHERE even),"
            " (SELECT pair FROM {t} WHERE id = 3), min(tags), min(d)::text, max(name) FROM {t}"
        ).format(t=sql.Identifier(schema, "t"))
    ).fetchone()
    assert row[:5] == (1000, 124875, 1767225600, 500, [3, 4])
    assert row[5:] == (["a", "b"], "2026-11-21", "n999")
    [record] = journal.records()
    assert record.state is AttemptState.COMMITTED and record.manifest["rows"] == 1000
    assert record.catalog == {
        "conn_id": postgres_conn_id,
        "schema": schema,
        "staged_table": staged.staged_name,
        # Journaled so that reconcile rebuilds the attempt with the same lock timeouts.
        "options": {"batch_size": 250, "num_partitions": 2, "count_rows": True, "lock_timeout_ms": 5000,
                    "commit_attempts": 3},
    }

    password = postgres.password
    journal_text = "".join(path.read_text() for path in Path(journal.root).glob("*.json"))
    assert password not in journal_text
    assert password not in json.dumps(staged.write_spec()) + repr(staged.connection)
    assert password not in caplog.text
    assert list(staged.job_env().values()) == [password]


def test_operator_through_airflow_keeps_the_password_out_of_everything_airflow_stores(
    airflow_cli: AirflowCli,
    metastore: MetastoreInfo,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres: PostgresServer,
    postgres_conn_id: str,
) -> None:
    """``airflow dags test`` of the operator on a JDBC target, the connection from ``AIRFLOW_CONN_*``."""
    make_table(db, schema)
    env = task_env(
        airflow_cli,
        metastore,
        journal,
        f"jdbc://{postgres_conn_id}/{schema}.t",
        STAGED_TEST_SQL=NEW_QUERY,
        STAGED_TEST_PURPOSE="replace",
        STAGED_TEST_JDBC_OPTIONS=json.dumps({"count_rows": True, "batch_size": 500}),
    )
    result = airflow_cli.run("dags", "test", "staged_operator", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert count_sum(db, schema) == NEW
    assert tables(db, schema) == {"t"}
    [record] = journal.records()
    assert record.state is AttemptState.COMMITTED

    with sqlite3.connect(airflow_cli.home / "airflow.db") as airflow_db:
        stored = "\n".join(airflow_db.iterdump())  # XCom, rendered templates, asset events, audit log
        extras = [json.loads(row[0]) for row in airflow_db.execute("SELECT extra FROM asset_event")]
    assert next(e for e in extras if e.get("version") == record.attempt_id)["rows"] == NEW_ROWS
    output = result.stdout + result.stderr
    assert f"committed jdbc://{postgres_conn_id}/{schema}.t" in output  # dags test prints the task's log
    journal_text = "".join(path.read_text() for path in Path(journal.root).glob("*.json"))
    for place, text in [
        ("the task's log (dags test output)", output),
        ("the Airflow database", stored),
        ("the journal", journal_text),
    ]:
        assert postgres.password not in text, f"the password appears in {place}"
    assert f"{schema}.t" in stored  # what was searched does hold this run's records


def test_create_if_not_exists_creates_then_leaves_the_table(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    run_staged(spark, staged_table(postgres_conn_id, schema, "create_if_not_exists", journal), NEW_QUERY)
    assert count_sum(db, schema) == NEW

    again = staged_table(postgres_conn_id, schema, "create_if_not_exists", journal)
    run_staged(spark, again, "SELECT 1 AS id, 1 AS v")
    assert again.skipped
    assert count_sum(db, schema) == NEW
    assert states(journal) == ["COMMITTED"]


def test_create_or_replace_creates_a_missing_table(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    run_staged(spark, staged_table(postgres_conn_id, schema, "create_or_replace", journal), NEW_QUERY)
    assert count_sum(db, schema) == NEW
    assert tables(db, schema) == {"t"}


def test_wrong_purpose_fails_before_any_spark_work(
    db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    with pytest.raises(TableNotFoundError, match="does not exist"):
        staged_table(postgres_conn_id, schema, "replace", journal).begin()
    with pytest.raises(TableNotFoundError, match="schema 'nowhere' does not exist"):
        staged_table(postgres_conn_id, "nowhere", "create", journal).begin()
    make_table(db, schema)
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        staged_table(postgres_conn_id, schema, "create", journal).begin()
    assert tables(db, schema) == {"t"}
    assert journal.records() == []


@pytest.mark.parametrize("purpose", ["replace", "create_or_replace"])
def test_replace_readers_see_old_or_new_only(
    spark: Any,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres: PostgresServer,
    postgres_conn_id: str,
    purpose: str,
) -> None:
    make_table(db, schema)
    db.execute(sql.SQL("COMMENT ON TABLE {} IS 'orders per day'").format(sql.Identifier(schema, "t")))
    db.execute(sql.SQL("COMMENT ON COLUMN {} IS 'value'").format(sql.Identifier(schema, "t", "v")))
    reads: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
            while not stop.is_set():
                try:
                    reads.append(count_sum(conn, schema))
                except BaseException as error:
                    errors.append(error)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        run_staged(spark, staged_table(postgres_conn_id, schema, purpose, journal), NEW_QUERY)
        seen = len(reads)
        while len(reads) < seen + 20:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join()

    assert errors == []
    first_new = reads.index(NEW)  # every read is complete: the old table, then the new one
    assert first_new > 0 and set(reads[:first_new]) == {OLD} and set(reads[first_new:]) == {NEW}
    assert tables(db, schema) == {"t"}
    comments = db.execute(
        "SELECT obj_description(%(t)s::regclass, 'pg_class'), col_description(%(t)s::regclass, 2)",
        {"t": f"{schema}.t"},
    ).fetchone()
    assert comments == ("orders per day", "value")
    [record] = journal.records()
    assert record.state is AttemptState.COMMITTED
    assert record.manifest["rows"] is None  # not counted unless count_rows


def _leave_old_table(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres: PostgresServer,
    conn_id: str,
) -> str:
    """A committed replace whose housekeeping failed: its renamed-away table is left. Returns it.
    A user's look-alike table is beside it (``t__old_0123456789``): never dropped."""
    make_table(db, schema)
    db.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(schema, LOOKALIKE)))
    first = staged_table(conn_id, schema, "replace", journal, lock_timeout_ms=200)
    first.begin()
    first.written(write(spark, first, NEW_QUERY))
    first.commit()
    old = journal.require(first.attempt_id).superseded_location
    old_table = old.partition(".")[2]
    assert count_sum(db, schema) == NEW and count_sum(db, schema, old_table) == OLD

    with psycopg.connect(postgres.conninfo()) as holder:  # an open transaction reading the old table
        assert count_sum(holder, schema, old_table) == OLD
        first.housekeep()  # its DROP times out on the lock: logged, not raised
        holder.rollback()
    # Not caplog: which handlers see the log depends on how Airflow's logging was set up before.
    assert tables(db, schema) == {"t", old_table, LOOKALIKE}
    assert states(journal) == ["COMMITTED"]
    return old_table


@pytest.mark.parametrize("cleanup", ["next_commit", "maintenance_sweep"])
def test_old_table_left_by_a_failed_drop_goes_with_the_next_commit_or_the_sweep(
    spark: Any,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres: PostgresServer,
    postgres_conn_id: str,
    tmp_path: Path,
    cleanup: str,
) -> None:
    """Dropped by the next commit of the table, or, for a table never rebuilt, by the maintenance
    pass (as the last commit's own housekeeping would have)."""
    _leave_old_table(spark, db, schema, journal, postgres, postgres_conn_id)
    if cleanup == "next_commit":
        run_staged(spark, staged_table(postgres_conn_id, schema, "replace", journal), NEW_QUERY)
    else:
        settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "warehouse"), str(journal.root))
        assert sweep_all_versions(settings).failures == {}
    assert tables(db, schema) == {"t", LOOKALIKE}
    assert count_sum(db, schema) == NEW


def test_replace_refused_while_a_view_depends_on_the_target(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    """A view follows the table, not its name: after a swap it would keep reading the old data."""
    make_table(db, schema)
    view = sql.Identifier(schema, "t_totals")
    table = sql.Identifier(schema, "t")
    db.execute(sql.SQL("CREATE VIEW {} AS SELECT count(*) AS n FROM {}").format(view, table))
    with pytest.raises(StagingError, match=rf"cannot replace .*view {schema}\.t_totals"):
        run_staged(spark, staged_table(postgres_conn_id, schema, "replace", journal), NEW_QUERY)
    assert count_sum(db, schema) == OLD
    assert db.execute(sql.SQL("SELECT n FROM {}").format(view)).fetchone() == (OLD_ROWS,)
    assert tables(db, schema) == {"t"}
    assert states(journal) == ["ABORTED"]


# -- failures: target unchanged, no staged table, journal ABORTED ---------------------------------


@pytest.mark.parametrize(
    ("query", "error"),
    [
        # A Spark task fails after the other partition may have written its rows.
        ("SELECT id, IF(id = 15000, raise_error('boom'), id) AS v FROM range(20000)", Exception),
        # PostgreSQL rejects a value (NUL in text) in the middle of a batch.
        ("SELECT id, IF(id = 700, concat('x', char(0)), 'ok') AS v FROM range(1000)", Exception),
        ("SELECT 1 AS id, map('a', 1) AS v", UnsupportedColumnTypeError),
        ('SELECT 1 AS `a"; drop table x; --`', InvalidIdentifierError),
    ],
    ids=["spark-task-fails", "value-rejected", "unsupported-type", "column-injection"],
)
def test_failed_write_changes_nothing(
    spark: Any,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres_conn_id: str,
    query: str,
    error: type[BaseException],
) -> None:
    make_table(db, schema)
    with pytest.raises(error):
        run_staged(spark, staged_table(postgres_conn_id, schema, "create_or_replace", journal), query)
    assert count_sum(db, schema) == OLD
    assert tables(db, schema) == {"t"}
    assert states(journal) == ["ABORTED"]


def test_connection_killed_during_commit(
    spark: Any,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres: PostgresServer,
    postgres_conn_id: str,
) -> None:
    make_table(db, schema)
    staged = staged_table(postgres_conn_id, schema, "replace", journal, lock_timeout_ms=30_000)
    staged.begin()
    staged.written(write(spark, staged, NEW_QUERY))
    failures: list[BaseException] = []

    def commit() -> None:
        try:
            staged.commit()
        except BaseException as error:
            failures.append(error)
            staged.abort(f"commit failed: {error}")

    with psycopg.connect(postgres.conninfo()) as reader:
        # A reader in an open transaction keeps the commit waiting for its lock.
        assert count_sum(reader, schema) == OLD
        thread = threading.Thread(target=commit)
        thread.start()
        deadline = time.monotonic() + 60
        killed = None
        while killed is None and time.monotonic() < deadline:
            killed = db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND wait_event_type = 'Lock'",
                (APPLICATION_NAME,),
            ).fetchone()
            time.sleep(0.05)
        thread.join(timeout=60)
        reader.rollback()
    assert killed == (True,)
    # The lost connection is resolved by the exact is_published check: the task says what state
    # the table is in instead of a bare driver error.
    assert len(failures) == 1 and isinstance(failures[0], StagingError)
    assert isinstance(failures[0].__cause__, psycopg.OperationalError)
    assert "is still its previous version" in str(failures[0])
    assert count_sum(db, schema) == OLD
    assert tables(db, schema) == {"t"}
    assert states(journal) == ["ABORTED"]


def test_sigterm_of_the_airflow_task_during_write_aborts(
    airflow_cli: AirflowCli,
    metastore: MetastoreInfo,
    db: psycopg.Connection[Any],
    schema: str,
    journal: FileJournal,
    postgres_conn_id: str,
    tmp_path: Path,
) -> None:
    """SIGTERM to ``airflow dags test`` while Spark inserts: ``on_kill`` aborts, writers are ended."""
    make_table(db, schema)
    target = f"jdbc://{postgres_conn_id}/{schema}.t"
    env = task_env(
        airflow_cli,
        metastore,
        journal,
        target,
        STAGED_TEST_SQL="SELECT id, id AS v FROM range(200000000)",
        STAGED_TEST_PURPOSE="replace",
    )
    log_path = tmp_path / "dags-test.log"
    process = airflow_cli.start("dags", "test", "staged_operator", env=env, log_path=log_path)
    try:
        attempt = wait_for_open_attempt(journal, target, process)
        deadline = time.monotonic() + 180  # the embedded Spark session starts after begin
        while inserting_sessions(db) == 0:
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    log = log_path.read_text()
    assert process.returncode != 0, log[-3000:]
    assert journal.require(attempt.attempt_id).state is AttemptState.ABORTED, log[-3000:]
    assert count_sum(db, schema) == OLD
    assert tables(db, schema) == {"t"}
    assert inserting_sessions(db) == 0


def test_concurrent_if_not_exists_make_exactly_one_table(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    attempts = [staged_table(postgres_conn_id, schema, "create_if_not_exists", journal) for _ in range(4)]
    os.environ.update(attempts[0].job_env())
    # Everyone has begun and written before anyone commits: all four race for the rename.
    ready = threading.Barrier(len(attempts))

    def attempt(writer: int) -> None:
        staged = attempts[writer]
        staged.begin()
        manifest = run_staged_write(
            spark, f"SELECT {writer} AS writer, id AS v FROM range(2000)", staged.write_spec()
        )
        staged.written(manifest)
        ready.wait(timeout=120)
        staged.commit()

    with ThreadPoolExecutor(len(attempts)) as pool:
        list(pool.map(attempt, range(len(attempts))))

    winners = [index for index, staged in enumerate(attempts) if not staged.skipped]
    assert len(winners) == 1
    assert db.execute(
        sql.SQL("SELECT DISTINCT writer FROM {}").format(sql.Identifier(schema, "t"))
    ).fetchall() == [(winners[0],)]
    assert count_sum(db, schema) == (2000, 1999 * 2000 // 2)
    assert tables(db, schema) == {"t"}
    assert sorted(states(journal)) == ["ABORTED", "ABORTED", "ABORTED", "COMMITTED"]


# -- identifiers, reconcile -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["x; drop table y", "'x; drop table y'", 'x"y', "`x`", "tablé", "x--", "a.b.c"],
)
def test_injected_identifiers_rejected_and_nothing_created(
    db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str, name: str
) -> None:
    before = db.execute("SELECT count(*) FROM pg_class").fetchone()
    with pytest.raises(ValueError, match="invalid JDBC target") as error:
        jdbc_sink_for_target(f"jdbc://{postgres_conn_id}/{schema}.{name}", journal)
    assert repr(f"jdbc://{postgres_conn_id}/{schema}.{name}") in str(error.value)
    assert db.execute("SELECT count(*) FROM pg_class").fetchone() == before
    assert tables(db, schema) == set()


def test_reconcile_rebuilds_attempts_from_the_journal(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    """A task that died: its attempt is aborted from the journal alone; a commit not journaled is kept."""
    dead = staged_table(postgres_conn_id, schema, "create", journal, table="dead")
    dead.begin()
    dead.written(write(spark, dead, NEW_QUERY))
    assert abort_attempt(rebuilt_from_journal(journal, dead.attempt_id), "expired")
    assert tables(db, schema) == set()

    lost = staged_table(postgres_conn_id, schema, "create", journal, table="lost")
    lost.begin()
    lost.written(write(spark, lost, NEW_QUERY))
    lost.publish(journal.require(lost.attempt_id))  # committed in PostgreSQL, then the process died
    rebuilt = rebuilt_from_journal(journal, lost.attempt_id)
    assert not abort_attempt(rebuilt, "expired")
    assert tables(db, schema) == {"lost"}
    assert sorted(states(journal)) == ["ABORTED", "COMMITTED"]
    with pytest.raises(StagingError, match="aborted"):
        write(spark, dead, NEW_QUERY)


# Audits (issue 34) on a PostgreSQL target: 30,000 new rows, 10 of which (ids 1-10) have v < 0.
AUDITED_QUERY = f"SELECT id, IF(id <= 10, -id, id * 3) AS v FROM range(1, {NEW_ROWS + 1})"


def audited(staged: JdbcStagedTable, *audits: Any) -> JdbcStagedTable:
    staged.audits = coerce_audits(audits)
    return staged


def run_audited(spark: Any, staged: JdbcStagedTable, query: str) -> Any:
    """The operator's path (begin, write, written, audit, commit; a failed audit quarantines)."""
    def job(spec: dict[str, Any]) -> dict[str, Any]:
        os.environ.update(staged.job_env())
        return run_staged_write(spark, query, spec)

    return run_attempt(staged, job, ttl_seconds=600)


def test_failing_audit_keeps_the_old_table_and_quarantines_the_staged_one(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    make_table(db, schema)
    staged = audited(staged_table(postgres_conn_id, schema, "replace", journal),
                     RowExpectation("non_negative", "v >= 0"), TableExpectation("some", "COUNT(*) > 0"))
    with pytest.raises(AuditFailedError, match=r"audit\(s\) failed on .*: non_negative \(10 failing row"):
        run_audited(spark, staged, AUDITED_QUERY)
    assert count_sum(db, schema) == OLD  # exactly the old content
    record = journal.require(staged.attempt_id)
    found = {item["name"]: item for item in record.audits["results"]}
    assert (found["non_negative"]["failing"], found["some"]["passed"]) == (10, True)
    assert len(found["non_negative"]["samples"]) == 5
    assert is_quarantined(record) and tables(db, schema) == {"t", staged.staged_name}  # kept
    settings = StagedSettings("thrift://127.0.0.1:9", "/unused", str(journal.root),
                              retention=RetentionPolicy(quarantine_seconds=3600))
    assert [a.action for a in reconcile(settings)] == ["quarantined"]
    assert [a.action for a in reconcile(settings, now=time.time() + 3601)] == ["swept"]
    assert tables(db, schema) == {"t"} and count_sum(db, schema) == OLD


def test_drop_and_warn_audits_publish_and_report(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    make_table(db, schema)
    staged = audited(staged_table(postgres_conn_id, schema, "replace", journal),
                     RowExpectation("non_negative", "v >= 0", "drop"),
                     RowExpectation("small", "v < 30", "warn"), unique("id"))
    manifest = run_audited(spark, staged, AUDITED_QUERY)
    kept = range(11, NEW_ROWS + 1)
    assert count_sum(db, schema) == (len(kept), 3 * sum(kept))  # exactly the rows v >= 0 kept
    assert (manifest.rows, manifest.dropped_rows) == (len(kept), 10)
    found = {item["name"]: item for item in journal.require(staged.attempt_id).audits["results"]}
    assert (found["non_negative"]["passed"], found["non_negative"]["failing"]) == (True, 10)
    assert (found["small"]["passed"], found["small"]["failing"]) == (False, len(kept))  # every v >= 33
    assert (found["id_unique"]["passed"], found["id_unique"]["value"]) == (True, 0)
    assert tables(db, schema) == {"t"}


def test_row_count_change_audit_against_the_recorded_previous_table(
    spark: Any, db: psycopg.Connection[Any], schema: str, journal: FileJournal, postgres_conn_id: str
) -> None:
    def shrinking() -> JdbcStagedTable:
        staged = staged_table(postgres_conn_id, schema, "create_or_replace", journal)
        return audited(staged, RowCountChange("no_shrink", 0.5))

    run_audited(spark, shrinking(), NEW_QUERY)
    assert count_sum(db, schema) == NEW
    moved_on = shrinking()
    with pytest.raises(AuditFailedError, match=rf"no_shrink .*table: {NEW_ROWS} -> 100 rows"):
        run_audited(spark, moved_on, "SELECT id, id AS v FROM range(100)")
    assert count_sum(db, schema) == NEW
    run_audited(spark, shrinking(), NEW_QUERY)  # the table moves on: another table (oid) now
    settings = StagedSettings("thrift://127.0.0.1:9", "/unused", str(journal.root))
    with pytest.raises(CommitConflictError, match=r"moved on since attempt .* publishing it would undo"):
        publish_anyway(settings, moved_on.attempt_id)
    assert count_sum(db, schema) == NEW
    # `staged publish` after a person looked: the same commit path.
    looked_at = shrinking()
    with pytest.raises(AuditFailedError):
        run_audited(spark, looked_at, "SELECT id, id AS v FROM range(100)")
    publish_anyway(settings, looked_at.attempt_id)
    assert count_sum(db, schema) == (100, sum(range(100)))
