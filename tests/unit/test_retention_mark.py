"""The retention mark: a replace skips the version sweep (listing, journal read) while nothing can be due.

Pure logic on a temp directory and journal; the metastore URI points nowhere, so any catalog
read would fail the test (a sweep that deletes nothing reads no catalog).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds import hive_table
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy

TARGET = "db.t"
NOWHERE = "thrift://127.0.0.1:9"


def test_earliest_expiry_of_each_policy() -> None:
    assert RetentionPolicy().earliest_expiry(100.0) == 100.0 + 3600
    # An age bound below the grace waits for the grace.
    assert RetentionPolicy(keep_versions=2, max_age_seconds=60).earliest_expiry(100.0) == 100.0 + 3600
    assert RetentionPolicy(keep_versions=None, max_age_seconds=600).earliest_expiry(100.0) == 100.0 + 3600
    assert RetentionPolicy(keep_versions=None, max_age_seconds=7200).earliest_expiry(100.0) == 7300.0
    short_grace = RetentionPolicy(keep_versions=2, max_age_seconds=60, grace_seconds=10)
    assert short_grace.earliest_expiry(100.0) == 110.0
    assert RetentionPolicy(keep_versions=None, max_age_seconds=None).earliest_expiry(100.0) == math.inf


def test_the_mark_is_beside_the_records(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path)
    assert journal.retention_mark(TARGET) is None
    journal.set_retention_mark(TARGET, 123.5)
    journal.set_retention_mark("db.other", 7.0)
    assert journal.retention_mark(TARGET) == 123.5
    assert journal.records() == []  # not a record
    (tmp_path / ".retention" / TARGET).write_text("")  # torn by a crash: no mark, a full sweep
    assert journal.retention_mark(TARGET) is None


class Sweeps:
    """A table root with versions a1 (superseded by a2) and a2 (current), journaled as committed."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retention: RetentionPolicy) -> None:
        self.root = tmp_path / "warehouse" / "t"
        self.journal = FileJournal(tmp_path / "journal")
        self.retention = retention
        self.listings = 0
        self.monkeypatch = monkeypatch
        original = hive_table.list_dir

        def counted(location: str) -> list[hive_table.Entry]:
            self.listings += 1
            return original(location)

        monkeypatch.setattr(hive_table, "list_dir", counted)
        self.a1 = self.commit("a1", None)
        self.a2 = self.commit("a2", self.a1.location)

    def commit(self, attempt_id: str, superseded: str | None) -> AttemptRecord:
        location = f"file:{self.root}/_v={attempt_id}"
        (self.root / f"_v={attempt_id}").mkdir(parents=True)
        record = AttemptRecord(attempt_id, "hive_table", TARGET, "create_or_replace", location)
        self.journal.create(record)
        with self.journal.locked(attempt_id):
            self.journal.transition(attempt_id, AttemptState.WRITTEN, manifest={"location": location})
            return self.journal.transition(
                attempt_id, AttemptState.COMMITTED, superseded_location=superseded
            )

    def housekeep_at(self, now: float, record: AttemptRecord) -> None:
        staged = HiveStagedTable(
            TableIdentifier.parse(TARGET), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, self.journal,
            NOWHERE, self.retention, attempt_id=record.attempt_id,
        )
        with self.monkeypatch.context() as clock:
            clock.setattr(time, "time", lambda: now)
            staged.after_commit(record)

    def versions(self) -> list[str]:
        return sorted(path.name for path in self.root.iterdir())


def test_a_replace_inside_the_grace_skips_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = Sweeps(tmp_path, monkeypatch, RetentionPolicy(keep_versions=5, max_age_seconds=None))
    superseded_at = sweeps.a2.updated_at
    sweeps.housekeep_at(superseded_at + 10, sweeps.a2)  # no mark yet: a full sweep, nothing due
    assert sweeps.listings == 1
    assert sweeps.journal.retention_mark(TARGET) == pytest.approx(superseded_at)
    sweeps.housekeep_at(superseded_at + 20, sweeps.a2)
    sweeps.housekeep_at(superseded_at + 3600, sweeps.a2)  # the mark + the grace: still nothing due
    assert sweeps.listings == 1
    sweeps.housekeep_at(superseded_at + 3601, sweeps.a2)  # a1 could be due now: sweep again
    assert sweeps.listings == 2
    assert sweeps.versions() == ["_v=a1", "_v=a2"]  # kept by count (5): nothing deleted


def test_a_newer_commit_cannot_postpone_the_sweep_of_an_older_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = Sweeps(tmp_path, monkeypatch, RetentionPolicy(keep_versions=5, max_age_seconds=None))
    first = sweeps.a2.updated_at
    sweeps.housekeep_at(first + 10, sweeps.a2)
    a3 = sweeps.commit("a3", sweeps.a2.location)
    sweeps.housekeep_at(first + 3601, a3)  # a1's expiry passed, though a3 was just committed
    assert sweeps.listings == 2


def test_a_stricter_policy_sweeps_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mark holds times, not deadlines: a policy changed to no grace applies immediately."""
    sweeps = Sweeps(tmp_path, monkeypatch, RetentionPolicy(keep_versions=5, max_age_seconds=None))
    superseded_at = sweeps.a2.updated_at
    sweeps.housekeep_at(superseded_at + 10, sweeps.a2)
    sweeps.retention = RetentionPolicy(keep_versions=5, max_age_seconds=None, grace_seconds=0)
    sweeps.housekeep_at(superseded_at + 11, sweeps.a2)
    assert sweeps.listings == 2
