"""The journal contract, run against both journals: the file journal and the shared PostgreSQL one
(a real server from ``tests/fixtures/postgres_server.py``, a fresh schema per test)."""

import multiprocessing
import os
import time
import uuid

import pytest

from airflow_provider_staged.staging.api import StagedTable, StagingJobStatusHook
from airflow_provider_staged.staging.errors import CommitConflictError
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.journal_postgres import PostgresJournal
from airflow_provider_staged.staging.versions import (
    RetentionPolicy,
    new_attempt_id,
    parse_version_dir,
    version_of_location,
)


def open_journal(spec):
    """A journal from a picklable spec: a directory, or (URL, schema)."""
    return PostgresJournal(*spec) if isinstance(spec, tuple) else FileJournal(spec)


@pytest.fixture(params=["files", "postgres"])
def journal_spec(request, tmp_path):
    if request.param == "files":
        return str(tmp_path / "journal")
    return request.getfixturevalue("postgres").url(), "j_" + uuid.uuid4().hex[:12]


@pytest.fixture
def journal(journal_spec):
    return open_journal(journal_spec)


def _record(attempt_id="a1", task=None):
    return AttemptRecord(
        attempt_id=attempt_id, kind="hive_table", target="db.t", purpose="create", location="/x", task=task
    )


def test_transitions_and_history(journal):
    journal.create(_record())
    with journal.locked("a1"):
        journal.transition("a1", AttemptState.WRITTEN, manifest={"rows": 3})
        journal.transition("a1", AttemptState.COMMITTED)
    record = journal.require("a1")
    assert record.state is AttemptState.COMMITTED
    assert [state for state, _ in record.history] == ["BEGUN", "WRITTEN", "COMMITTED"]
    assert record.manifest == {"rows": 3}


@pytest.mark.parametrize("ended", [AttemptState.COMMITTED, AttemptState.ABORTED])
def test_ended_attempts_cannot_move(journal, ended):
    journal.create(_record())
    with journal.locked("a1"):
        journal.transition("a1", ended)
        other = AttemptState.ABORTED if ended is AttemptState.COMMITTED else AttemptState.COMMITTED
        with pytest.raises(CommitConflictError, match=f"is {ended.value}"):
            journal.transition("a1", other)


def test_duplicate_create_and_bad_ids(journal):
    journal.create(_record())
    with pytest.raises(CommitConflictError):
        journal.create(_record())
    with pytest.raises(ValueError, match="invalid attempt id"):
        journal.get("../etc/passwd")


def test_for_task_matches_try(journal):
    task1 = TaskRef("d", "t", "r", 1)
    journal.create(_record("a1", task1))
    journal.create(_record("a2", TaskRef("d", "t", "r", 2)))
    assert [r.attempt_id for r in journal.for_task(task1)] == ["a1"]
    assert {r.attempt_id for r in journal.for_task(TaskRef("d", "t", "r", 0))} == {"a1", "a2"}



def test_records_with_a_prefix_read_only_those_attempts(journal):
    for attempt_id in ("q1-b1-x", "q1-b1-y", "q1-b10-x", "q2-b1-x"):
        journal.create(_record(attempt_id))
    assert [r.attempt_id for r in journal.records("q1-b1-")] == ["q1-b1-x", "q1-b1-y"]
    assert len(journal.records()) == 4

def test_temporary_files_of_killed_writers_are_removed_once_stale(tmp_path):
    journal = FileJournal(tmp_path)
    journal.create(_record("a1"))
    journal.set_retention_mark("db.t", 1.0)
    marks = tmp_path / ".retention"
    stale = [tmp_path / ".tmp-killed.json", marks / ".tmp-killed"]
    fresh = [tmp_path / ".tmp-writing.json", marks / ".tmp-writing"]
    for path in stale + fresh:
        path.write_text("{")
    old = time.time() - 2 * 3600
    for path in stale:
        os.utime(path, (old, old))
    assert [r.attempt_id for r in journal.records()] == ["a1"]
    journal.set_retention_mark("db.u", 2.0)
    assert [p.exists() for p in stale + fresh] == [False, False, True, True]
    assert journal.retention_mark("db.t") == 1.0 and journal.retention_mark("db.u") == 2.0


def test_records_with_a_prefix_take_it_literally(journal):
    # ``_`` is a wildcard of SQL's LIKE: a prefix never matches by pattern.
    for attempt_id in ("q1_b-x", "q1xb-y", "q1.b-z"):
        journal.create(_record(attempt_id))
    assert [r.attempt_id for r in journal.records("q1_b")] == ["q1_b-x"]
    assert [r.attempt_id for r in journal.records("q1.")] == ["q1.b-z"]


def test_times_are_the_journals_clock(journal):
    before = journal.now()
    assert abs(before - time.time()) < 5  # the test's server runs on this host
    record = journal.create(_record())
    with journal.locked("a1"):
        journal.transition("a1", AttemptState.WRITTEN)
    after = journal.now()
    stored = journal.require("a1")
    times = [stored.created_at, stored.updated_at, stored.heartbeat_at, *(at for _, at in stored.history)]
    assert all(before <= at <= after for at in times), (before, times, after)
    assert record.history == stored.history[:1]


def test_heartbeat_moves_only_open_attempts(journal):
    journal.create(_record("open"))
    journal.create(_record("ended"))
    with journal.locked("ended"):
        journal.transition("ended", AttemptState.ABORTED)
    open_before, ended_before = journal.require("open"), journal.require("ended")
    time.sleep(0.01)
    journal.heartbeat("open")
    journal.heartbeat("ended")
    assert journal.require("open").heartbeat_at > open_before.heartbeat_at
    assert journal.require("ended") == ended_before
    assert [r.attempt_id for r in journal.open_attempts()] == ["open"]


def test_remove_ended_keeps_open_records(journal):
    journal.create(_record("open"))
    journal.create(_record("done"))
    with journal.locked("done"):
        journal.transition("done", AttemptState.COMMITTED)
    assert journal.remove_ended("open") is False
    assert journal.remove_ended("done") is True
    assert journal.remove_ended("done") is False
    assert [r.attempt_id for r in journal.records()] == ["open"]


def test_retention_marks(journal):
    assert journal.retention_mark("db.t") is None
    journal.set_retention_mark("db.t", 123.5)
    journal.set_retention_mark("db.other", 7.0)
    journal.set_retention_mark("db.t", 124.25)
    assert journal.retention_mark("db.t") == 124.25 and journal.retention_mark("db.other") == 7.0
    assert journal.records() == []  # not records


def test_orphan_sightings_keep_the_first_and_forget_the_unlisted(journal):
    first = journal.orphans_seen("db.t", ["w/_v=x", "w/_v=y"])
    assert set(first) == {"w/_v=x", "w/_v=y"}
    time.sleep(0.01)
    again = journal.orphans_seen("db.t", ["w/_v=x", "w/_v=z"])
    assert again["w/_v=x"] == first["w/_v=x"] and again["w/_v=z"] > first["w/_v=x"]
    assert set(again) == {"w/_v=x", "w/_v=z"}  # y was not listed: its sighting is gone
    assert journal.orphans_seen("db.other", []) == {}
    assert journal.orphans_seen("db.t", []) == {}


def _hold_lock(spec, ready, release):
    with open_journal(spec).locked("a1"):
        ready.set()
        release.wait(10)


def test_lock_excludes_other_processes(journal_spec):
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(journal_spec, ready, release))
    holder.start()
    assert ready.wait(10)
    started = time.monotonic()
    threading_release = ctx.Process(target=lambda: (time.sleep(0.5), release.set()))
    threading_release.start()
    with open_journal(journal_spec).locked("a1"):
        waited = time.monotonic() - started
    holder.join()
    threading_release.join()
    assert waited >= 0.4


def test_attempt_ids_deterministic_per_try():
    task = TaskRef("d", "t", "r", 1)
    assert new_attempt_id(task) == new_attempt_id(task)
    assert new_attempt_id(task) != new_attempt_id(TaskRef("d", "t", "r", 2))
    assert new_attempt_id() != new_attempt_id()
    assert parse_version_dir("_v=" + new_attempt_id(task)) == new_attempt_id(task)
    assert parse_version_dir("ds=2024-01-01") is None


def test_retention_by_count_and_age():
    superseded = {"v1": 100.0, "v2": 200.0, "v3": 300.0}
    no_grace = {"max_age_seconds": None, "grace_seconds": 0}
    assert sorted(RetentionPolicy(keep_versions=1, **no_grace).expired(superseded, 400)) == ["v1", "v2"]
    assert sorted(
        RetentionPolicy(keep_versions=None, max_age_seconds=150, grace_seconds=0).expired(superseded, 400)
    ) == ["v1", "v2"]
    assert RetentionPolicy(keep_versions=5, **no_grace).expired(superseded, 400) == []
    assert sorted(RetentionPolicy(keep_versions=0, **no_grace).expired(superseded, 400)) == ["v1", "v2", "v3"]


def test_retention_never_deletes_by_count_alone_within_the_grace_period():
    # Two quick replaces: a reader that started on v1 still reads it, however many versions came after.
    superseded = {"v1": 1000.0, "v2": 1001.0, "v3": 1002.0}
    policy = RetentionPolicy(keep_versions=0, max_age_seconds=None, grace_seconds=3600)
    assert policy.expired(superseded, 1003.0) == []
    assert sorted(policy.expired(superseded, 1000.0 + 3600.5)) == ["v1"]
    assert sorted(policy.expired(superseded, 1002.0 + 3601)) == ["v1", "v2", "v3"]
    # Within keep_versions a version stays past the grace period, until max_age.
    kept = RetentionPolicy(keep_versions=3, max_age_seconds=7200, grace_seconds=3600)
    assert kept.expired(superseded, 1002.0 + 3601) == []
    assert sorted(kept.expired(superseded, 1000.0 + 7201)) == ["v1"]
    # Nor by an age below the grace: max_age shorter than the grace waits for the grace.
    young = RetentionPolicy(keep_versions=None, max_age_seconds=2, grace_seconds=3600)
    assert young.expired(superseded, 1003.0 + 60) == []
    assert sorted(young.expired(superseded, 1000.0 + 3600.5)) == ["v1"]
    assert RetentionPolicy().grace_seconds == 3600
    with pytest.raises(ValueError, match="grace_seconds -1"):
        RetentionPolicy(grace_seconds=-1)
    with pytest.raises(ValueError, match="keep_versions -1"):
        RetentionPolicy(keep_versions=-1)


class _Recorder(StagedTable):
    def __init__(self):
        self.calls = []

    def begin(self):
        self.calls.append("begin")

    def commit(self):
        self.calls.append("commit")

    def abort(self, reason=None):
        self.calls.append(f"abort: {reason}")


def test_job_status_hook_maps_transitions():
    table = _Recorder()
    hook = StagingJobStatusHook(table)
    hook.on_created("j")
    hook.on_finished("j")
    hook.on_failed("j", RuntimeError("x"))
    hook.on_canceled("j")
    # The reason reaches the journal: why an attempt was aborted is readable later.
    assert table.calls == ["begin", "commit", "abort: job failed: RuntimeError('x')", "abort: task killed"]


def test_the_version_of_a_location_is_its_innermost_version_directory():
    assert version_of_location("s3a://b/wh/db.db/t/_v=af-1/ds=2024-01-01") == "af-1"
    assert version_of_location("/wh/db.db/t/_v=af-1/_v=af-2/") == "af-2"
    assert version_of_location("file:/wh/db.db/t/ds=2024-01-01") is None  # written in place: no version
    assert version_of_location("/wh/db.db/t/_v=/ds=1") is None
