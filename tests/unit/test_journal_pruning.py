"""Which ended journal records pruning deletes, and that deleting one races no lock holder."""

from __future__ import annotations

import fcntl
import threading
import time

import pytest

from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.pruning import prunable

NOW = 1_000_000.0
HOUR = 3600.0
ROOT = "file:/wh/db.db/t"


def record(
    attempt_id: str, kind: str = "hive_append", state: AttemptState = AttemptState.COMMITTED,
    age: float = 2 * HOUR, target: str = "db.t", superseded: list[str] | None = None,
) -> AttemptRecord:
    location = f"{ROOT}/_v={attempt_id}" if kind != "hive_append" else f"{ROOT}/_staging/{attempt_id}"
    return AttemptRecord(
        attempt_id, kind, target, "create_or_replace", location, catalog={"root": ROOT}, state=state,
        superseded_location=superseded, updated_at=NOW - age,
    )


def pruned(records: list[AttemptRecord], existing: set[str] = frozenset(), keep_last: int = 2) -> list[str]:
    chosen = prunable(records, NOW, HOUR, keep_last, lambda location: location in existing)
    return sorted(r.attempt_id for r in chosen)


def test_only_old_ended_sink_records_beyond_the_newest_of_their_target() -> None:
    batches = [record(f"q-b{n}-r1", age=(10 - n) * HOUR) for n in range(6)]  # b5 is the newest
    assert pruned(batches) == ["q-b0-r1", "q-b1-r1", "q-b2-r1", "q-b3-r1"]
    assert pruned(batches, keep_last=0) == [r.attempt_id for r in batches]
    young = [record(f"q-b{n}-r1", age=HOUR - 1) for n in range(6)]  # inside the grace period
    assert pruned(young, keep_last=0) == []
    others = [
        record("open", state=AttemptState.WRITTEN, age=99 * HOUR),
        record("aborting", state=AttemptState.ABORTING, age=99 * HOUR),
        record("build", kind="hive_table", age=99 * HOUR),  # a staged build: not a sink kind
        record("expire", kind="expire", age=99 * HOUR),
        record("old-replace", kind="jdbc_table", age=99 * HOUR),
    ]
    assert pruned(others, keep_last=0) == []
    # The newest are counted per target.
    other_target = [record(f"p-b{n}-r1", kind="jdbc_append", target="jdbc://pg/public.t") for n in range(3)]
    assert pruned([*batches[4:], *other_target]) == ["p-b0-r1"]


def test_records_retention_still_needs_are_kept() -> None:
    live = record("v-live", kind="hive_overwrite", age=5 * HOUR)
    gone = record("v-gone", kind="hive_overwrite", age=5 * HOUR)
    aborted = record("v-aborted", kind="hive_overwrite", state=AttemptState.ABORTED, age=5 * HOUR)
    # A catalog-partition append owns its version directory and names the ones it superseded.
    owner = record("q-b1-r1", age=5 * HOUR)
    superseding = record("q-b2-r1", age=5 * HOUR, superseded=[f"{ROOT}/_v=q-b0-r1/ds=1"])
    plain = record("q-b3-r1", age=5 * HOUR)
    existing = {f"{ROOT}/_v=v-live", f"{ROOT}/_v=v-aborted", f"{ROOT}/_v=q-b1-r1", f"{ROOT}/_v=q-b0-r1"}
    found = pruned([live, gone, aborted, owner, superseding, plain], existing, keep_last=0)
    assert found == ["q-b3-r1", "v-aborted", "v-gone"]


def test_bad_keep_last_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="invalid keep_last -1"):
        prunable([], NOW, HOUR, -1)


def test_remove_ended_deletes_an_ended_record_and_its_lock_only(tmp_path) -> None:
    journal = FileJournal(tmp_path)
    journal.create(record("open", state=AttemptState.BEGUN))
    journal.create(record("done", state=AttemptState.BEGUN))
    with journal.locked("done"):
        journal.transition("done", AttemptState.COMMITTED)
    assert not journal.remove_ended("open") and not journal.remove_ended("missing")
    assert journal.remove_ended("done")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["open.json", "open.lock"]


def test_a_lock_waited_for_while_its_file_is_deleted_is_taken_on_the_new_file(tmp_path) -> None:
    journal = FileJournal(tmp_path)
    lock_path = journal._path("a", ".lock")
    inside, release = threading.Event(), threading.Event()

    def waiter() -> None:
        with journal.locked("a"):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=waiter)
    with journal.locked("a"):  # as remove_ended holds it while it deletes the files
        thread.start()
        time.sleep(0.3)  # the waiter blocks on the file about to be deleted
        lock_path.unlink()
    try:
        assert inside.wait(5)
        with open(lock_path, "a") as handle, pytest.raises(BlockingIOError):
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a newcomer must wait for the waiter
    finally:
        release.set()
        thread.join()


def test_the_maintenance_pass_prunes_after_the_version_sweep(tmp_path, monkeypatch) -> None:
    from airflow_provider_staged.staging import pruning
    from airflow_provider_staged.staging.expiry import SweepReport
    from airflow_provider_staged.staging.maintenance import MaintenanceReport, sweep_all_versions
    from airflow_provider_staged.staging.settings import StagedSettings

    monkeypatch.setattr(pruning, "KEEP_LAST_RECORDS", 1)
    settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "wh"), str(tmp_path / "journal"))
    for n in range(3):
        settings.journal.create(record(f"q-b{n}-r1", state=AttemptState.BEGUN))
        with settings.journal.locked(f"q-b{n}-r1"):
            settings.journal.transition(f"q-b{n}-r1", AttemptState.COMMITTED)
    versions = sweep_all_versions(settings, now=time.time() + 2 * HOUR)
    assert sorted(versions.pruned) == ["q-b0-r1", "q-b1-r1"]
    assert [r.attempt_id for r in settings.journal.records()] == ["q-b2-r1"]
    assert "journal: pruned 2 ended sink record(s)" in MaintenanceReport([], SweepReport(), versions).lines()


def test_the_version_sweep_deletes_the_job_directories_of_ended_attempts_only(tmp_path) -> None:
    from airflow_provider_staged.staging.expiry import SweepReport
    from airflow_provider_staged.staging.maintenance import MaintenanceReport, sweep_all_versions
    from airflow_provider_staged.staging.settings import StagedSettings
    from airflow_provider_staged.staging.storage_paths import JOBS_DIR

    settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "wh"), str(tmp_path / "journal"))
    ends = {"q-done-r1": AttemptState.COMMITTED, "q-aborted-r1": AttemptState.ABORTED, "q-open-r1": None}
    for attempt_id, end in ends.items():
        settings.journal.create(record(attempt_id, state=AttemptState.BEGUN, age=0))
        if end is not None:
            with settings.journal.locked(attempt_id):
                settings.journal.transition(attempt_id, end)
    jobs = tmp_path / "wh" / JOBS_DIR
    for name in [*ends, "not-journaled"]:  # what killed workers left, and what one writes now
        (jobs / name).mkdir(parents=True)
        (jobs / name / "spec.json").write_text("{}")
    versions = sweep_all_versions(settings)
    assert sorted(p.name for p in jobs.iterdir()) == ["not-journaled", "q-open-r1"]
    deleted = sorted(location.rpartition("/")[2] for location in versions.job_dirs)
    assert deleted == ["q-aborted-r1", "q-done-r1"]
    lines = MaintenanceReport([], SweepReport(), versions).lines()
    assert "jobs: deleted 2 directory(ies) of ended attempts" in lines


def _increment_under_lock(root: str, times: int) -> None:
    journal = FileJournal(root)
    counter = journal.root / "counter"
    for _ in range(times):
        with journal.locked("a"):
            value = int(counter.read_text())
            time.sleep(0.001)  # widen the read-modify-write window
            counter.write_text(str(value + 1))


def _prune_repeatedly(root: str) -> None:
    journal = FileJournal(root)
    removed = 0
    while not (journal.root / "stop").exists():
        if journal.get("a") is None:
            journal.create(record("a"))  # an ended record: remove_ended deletes it and its lock file
        removed += journal.remove_ended("a")
    (journal.root / "removed").write_text(str(removed))


def test_pruning_in_another_process_never_lets_two_processes_hold_one_records_lock(tmp_path) -> None:
    """remove_ended deletes the lock file while it holds the lock; processes that were waiting on
    the deleted file must not run beside a newcomer that locked the new one: no increment lost."""
    import multiprocessing

    (tmp_path / "counter").write_text("0")
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_increment_under_lock, args=(str(tmp_path), 150)) for _ in range(3)]
    pruner = context.Process(target=_prune_repeatedly, args=(str(tmp_path),))
    pruner.start()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    (tmp_path / "stop").touch()
    pruner.join(30)
    assert [writer.exitcode for writer in writers] + [pruner.exitcode] == [0, 0, 0, 0]
    assert int((tmp_path / "removed").read_text()) >= 20  # the lock file really went away, often
    assert int((tmp_path / "counter").read_text()) == 3 * 150
