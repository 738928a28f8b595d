"""The shared journal across processes standing in for hosts: races on one attempt, a holder killed
while it holds the lock, a host whose clock runs ahead. A real PostgreSQL server
(``tests/fixtures/postgres_server.py``), a fresh schema per test."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable, abort_attempt, commit_written
from airflow_provider_staged.staging.errors import CommitConflictError, StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_postgres import PostgresJournal, redacted_url
from airflow_provider_staged.staging.kinds.hive_table import (
    HiveStagedTable,
    _doomed,
    list_versions,
    sweep_versions,
)
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy

FORK = multiprocessing.get_context("fork")
NOWHERE = "thrift://127.0.0.1:9"  # any metastore call fails the test


@pytest.fixture
def spec(postgres) -> tuple[str, str]:
    return postgres.url(), "j_" + uuid.uuid4().hex[:12]


class PointerTable(JournaledStagedTable):
    """A kind whose catalog is one file naming the current data directory (the race's referee)."""

    kind = "test_pointer"

    def __init__(self, journal: PostgresJournal, root: Path, attempt_id: str) -> None:
        super().__init__("t", StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, attempt_id=attempt_id)
        self.root = root

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> PointerTable:
        raise NotImplementedError

    def target_exists(self) -> bool:
        return True

    def staging_location(self) -> str:
        return str(self.root / self.attempt_id)

    def write_spec(self) -> dict[str, Any]:
        return {}

    def catalog_ref(self) -> dict[str, Any]:
        return {}

    @contextlib.contextmanager
    def catalog_transaction(self, exclusive: bool = True) -> Iterator[None]:
        yield None

    def load_current(self, txn: Any) -> str | None:
        return None

    def create_target(self, txn: Any, record: AttemptRecord, manifest: Any) -> None:
        time.sleep(0.05)  # a catalog call takes a while: the abort arrives meanwhile
        (self.root / "pointer.tmp").write_text(record.location)
        os.replace(self.root / "pointer.tmp", self.root / "pointer")

    def swap(self, txn: Any, current: Any, record: AttemptRecord, manifest: Any) -> None:
        raise NotImplementedError

    def is_published(self, record: AttemptRecord) -> bool:
        pointer = self.root / "pointer"
        return pointer.exists() and pointer.read_text() == record.location

    def discard(self, record: AttemptRecord) -> None:
        for path in Path(record.location).glob("*"):
            path.unlink()
        with contextlib.suppress(FileNotFoundError):
            Path(record.location).rmdir()


def _race_side(spec, root, attempt_id, side, barrier, results) -> None:
    staged = PointerTable(PostgresJournal(*spec), Path(root), attempt_id)
    barrier.wait(10)
    try:
        if side == "commit":
            commit_written(staged)
            results.put((side, "won"))
        else:
            results.put((side, "won" if abort_attempt(staged, "on_kill") else "lost"))
    except CommitConflictError as error:
        results.put((side, f"lost: {error}"))


def test_commit_and_abort_of_one_attempt_from_two_processes_exactly_one_wins(spec, tmp_path):
    journal = PostgresJournal(*spec)
    outcomes = []
    for round_ in range(8):
        attempt_id = f"race-{round_}"
        staged = PointerTable(journal, tmp_path, attempt_id)
        staged.begin()
        Path(staged.location).mkdir()
        (Path(staged.location) / "part-0.parquet").write_text("rows")
        staged.written({"location": staged.location, "format": "none"})
        barrier, results = FORK.Barrier(2), FORK.Queue()
        sides = [
            FORK.Process(target=_race_side, args=(spec, str(tmp_path), attempt_id, side, barrier, results))
            for side in ("commit", "abort")
        ]
        for process in sides:
            process.start()
        for process in sides:
            process.join(30)
        said = dict(results.get(timeout=5) for _ in sides)
        winners = [side for side, outcome in said.items() if outcome == "won"]
        assert len(winners) == 1, said
        record = journal.require(attempt_id)
        published = staged.is_published(record)
        if winners == ["commit"]:
            assert record.state is AttemptState.COMMITTED and published
            assert Path(record.location, "part-0.parquet").exists()
        else:
            assert record.state is AttemptState.ABORTED and not published
            assert not Path(record.location).exists()
        outcomes.append(winners[0])
    assert outcomes  # which side wins depends on the scheduler; each round has exactly one


def _wait_for_blocked_update(conninfo: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while not conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            assert time.monotonic() < deadline, "the transition never waited on the row"
            time.sleep(0.02)


def test_a_transition_that_read_a_stale_state_is_refused_without_the_lock(spec, postgres):
    """The lock is not the only guard: a transition whose read was overtaken changes nothing."""
    journal = PostgresJournal(*spec)
    journal.create(AttemptRecord("a1", "hive_table", "db.t", "create", "/x"))
    with journal.locked("a1"):
        journal.transition("a1", AttemptState.WRITTEN)
    outcome: list[object] = []

    def commit() -> None:
        try:
            outcome.append(journal.transition("a1", AttemptState.COMMITTED))
        except CommitConflictError as error:
            outcome.append(error)

    attempts = f'"{spec[1]}".attempts'
    with psycopg.connect(postgres.conninfo()) as other:  # another host: holds the row, then aborts it
        other.execute(f"UPDATE {attempts} SET revision = revision WHERE attempt_id = 'a1'")
        committer = threading.Thread(target=commit)
        committer.start()
        _wait_for_blocked_update(postgres.conninfo())  # it read WRITTEN and waits to write
        other.execute(
            f"UPDATE {attempts} SET state = 'ABORTING', revision = revision + 1,"
            " record = jsonb_set(record, '{state}', '\"ABORTING\"') WHERE attempt_id = 'a1'"
        )
        other.commit()
    committer.join(10)
    (result,) = outcome
    assert isinstance(result, CommitConflictError), result
    assert "changed while it became COMMITTED" in str(result)
    assert journal.require("a1").state is AttemptState.ABORTING


def _hold_until_killed(spec, ready) -> None:
    with PostgresJournal(*spec).locked("a1"):
        ready.set()
        time.sleep(600)


def test_a_holder_killed_with_the_lock_releases_it_at_once(spec, postgres):
    ready = FORK.Event()
    holder = FORK.Process(target=_hold_until_killed, args=(spec, ready))
    holder.start()
    assert ready.wait(10)
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        assert conn.execute(held).fetchone()[0] == 1
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        got = threading.Event()

        def take() -> None:
            with PostgresJournal(*spec).locked("a1"):
                got.set()

        started = time.monotonic()
        threading.Thread(target=take, daemon=True).start()
        assert got.wait(5), "the killed holder's lock was not released"
        assert time.monotonic() - started < 5


def test_sessions_ask_the_server_to_reap_a_vanished_host(spec):
    """A host that vanishes without closing its connection: the server's keepalives end its
    session (and its locks) within tcp_keepalives_idle + count * interval (~25 s)."""
    journal = PostgresJournal(*spec)
    settings = journal._query(
        "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'),"
        " current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout')"
    )
    assert settings == [("10", "5", "3", "30000")]  # ms


def _sweep_with_clock_ahead(spec, root, results) -> None:
    real = time.time
    time.time = lambda: real() + 30  # this host's clock runs 30 s ahead
    try:
        journal = PostgresJournal(*spec)
        staged = HiveStagedTable(
            TableIdentifier.parse("db.t"), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, NOWHERE
        )
        retention = RetentionPolicy(keep_versions=0, max_age_seconds=None, grace_seconds=20)
        # By its own clock, this host would find v1 past the grace (the control)...
        by_host_clock = _doomed(
            list_versions(root), journal.records(), {f"file:{root}/_v=v2"}, retention, time.time()
        )
        # ...the sweep decides by the journal's.
        results.put((by_host_clock, sweep_versions(staged, retention, root)))
    except Exception as error:
        results.put(("failed", repr(error)))


def test_a_host_whose_clock_runs_ahead_deletes_nothing_inside_the_grace(spec, tmp_path):
    journal = PostgresJournal(*spec)
    root = tmp_path / "t"
    for attempt_id, superseded in (("v1", None), ("v2", f"file:{root}/_v=v1")):
        location = f"file:{root}/_v={attempt_id}"
        (root / f"_v={attempt_id}").mkdir(parents=True)
        journal.create(AttemptRecord(attempt_id, "hive_table", "db.t", "create_or_replace", location))
        with journal.locked(attempt_id):
            journal.transition(attempt_id, AttemptState.WRITTEN, manifest={"location": location})
            journal.transition(attempt_id, AttemptState.COMMITTED, superseded_location=superseded)
    (root / "_v=stray").mkdir()  # a directory no record names: first seen now, by the journal's clock
    results = FORK.Queue()
    sweeper = FORK.Process(target=_sweep_with_clock_ahead, args=(spec, str(root), results))
    sweeper.start()
    sweeper.join(30)
    by_host_clock, deleted = results.get(timeout=5)
    assert by_host_clock == [f"file:{root}/_v=v1"], deleted
    assert deleted == []
    assert sorted(p.name for p in root.iterdir()) == ["_v=stray", "_v=v1", "_v=v2"]


def test_the_password_never_shows(postgres):
    url = f"postgresql://{postgres.user}:wrong-Secret-1@{postgres.host}:{postgres.port}/postgres"
    journal = PostgresJournal(url)
    assert "wrong-Secret-1" not in repr(journal) + str(journal)
    with pytest.raises(StagingError) as caught:
        journal.now()
    assert "wrong-Secret-1" not in str(caught.value)
    assert "cannot reach the journal at postgresql://staged:***@" in str(caught.value)
    assert redacted_url("postgresql://h/db?user=u&password=p&sslmode=require") == (
        "postgresql://h/db?user=u&password=***&sslmode=require"
    )
    settings = StagedSettings.from_fields("h", 1, {"journal": url}, Path("/tmp"))
    assert "wrong-Secret-1" not in repr(settings)


@pytest.mark.parametrize(
    ("extras", "message"),
    [
        ({"journal": "postgresql://u@h/db", "journal_schema": "Bad-Name"}, "journal schema 'Bad-Name'"),
        ({"journal": "s3a://bucket/journal"}, "invalid connection extra journal='s3a://bucket/journal'"),
        ({"journal": "/a", "journal_dir": "/b"}, "name two file journals"),
        ({"journal_schema": "s"}, "journal_schema needs a postgresql:// journal"),
    ],
)
def test_bad_journal_settings_fail_in_one_line(extras, message):
    with pytest.raises(ValueError, match=message):
        StagedSettings.from_fields("h", 1, extras, Path("/tmp"))


def test_settings_pick_the_journal():
    home = Path("/tmp/home")
    assert str(StagedSettings.from_fields("h", 1, {}, home).journal) == "/tmp/home/journal"
    assert str(StagedSettings.from_fields("h", 1, {"journal_dir": "/j"}, home).journal) == "/j"
    assert str(StagedSettings.from_fields("h", 1, {"journal": "file:/j"}, home).journal) == "/j"
    shared = StagedSettings.from_fields("h", 1, {"journal": "postgresql://u:p@db/airflow"}, home)
    assert isinstance(shared.journal, PostgresJournal)
    assert shared.journal_dir == "/tmp/home/journal"  # still this host's scratch (sink staging)


def test_a_role_that_may_not_create_uses_the_tables_an_administrator_made(spec, postgres):
    PostgresJournal(*spec).now()  # the administrator's first use creates the schema and tables
    role, password, schema = "w_" + uuid.uuid4().hex[:8], uuid.uuid4().hex, spec[1]
    with psycopg.connect(postgres.conninfo(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        admin.execute(f"REVOKE CREATE ON DATABASE postgres FROM PUBLIC, {role}")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}")
    url = f"postgresql://{role}:{password}@{postgres.host}:{postgres.port}/postgres"
    worker = PostgresJournal(url, schema)
    worker.create(AttemptRecord("w1", "hive_table", "db.t", "create", "/x"))
    with worker.locked("w1"):
        assert worker.transition("w1", AttemptState.WRITTEN).state is AttemptState.WRITTEN
