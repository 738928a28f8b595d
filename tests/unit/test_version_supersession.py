"""When a version stopped being read, which starts its retention grace (pure logic, no catalog).

Found by a probe: an expiry that dropped a version's last partitions did not count, so the version
counted as superseded at an older commit and was deleted at once, under a Spark reader.
"""

from __future__ import annotations

from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds.hive_table import EXPIRE_KIND, _doomed, version_records
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import Entry

ROOT = "file:/w/db/t"
T0 = 1_700_000_000.0
GRACE = 3600.0
POLICY = RetentionPolicy(keep_versions=0, max_age_seconds=None, grace_seconds=GRACE)


def _refresh(
    attempt_id: str, state: AttemptState, at: float, superseded: list[str] | None = None
) -> AttemptRecord:
    return AttemptRecord(
        attempt_id, "hive_partitions", "db.t", "create_or_replace", f"{ROOT}/_v={attempt_id}",
        state=state, superseded_location=superseded, updated_at=at,
    )


def _expiry(attempt_id: str, at: float, dropped: list[str]) -> AttemptRecord:
    return AttemptRecord(
        attempt_id, EXPIRE_KIND, "db.t", "replace", f"expire://db/t/{attempt_id}",
        state=AttemptState.COMMITTED, superseded_location=dropped, updated_at=at,
    )


def _listed(*attempt_ids: str) -> list[Entry]:
    return [Entry(f"_v={a}", f"{ROOT}/_v={a}", True, T0) for a in attempt_ids]


def test_a_version_whose_last_partitions_expired_waits_for_the_grace_from_the_expiry() -> None:
    # v1 held ds=1 and ds=2; a refresh replaced ds=1 at T0 + 100; an expiry dropped ds=2 at T0 + 5000.
    journal = [
        _refresh("v1", AttemptState.COMMITTED, T0),
        _refresh("v2", AttemptState.COMMITTED, T0 + 100, [f"{ROOT}/_v=v1/ds=1"]),
        _expiry("e1", T0 + 5000, [f"{ROOT}/_v=v1/ds=2"]),
    ]
    records = version_records(journal, "db.t")  # what the sweep and a rollback's check read
    live = {f"{ROOT}/_v=v2"}
    listed = _listed("v1", "v2")
    assert _doomed(listed, records, live, POLICY, T0 + 5000 + 10) == []
    assert _doomed(listed, records, live, POLICY, T0 + 5000 + GRACE + 1) == [f"{ROOT}/_v=v1"]


def test_a_version_whose_end_no_record_names_waits_while_an_attempt_is_in_flight() -> None:
    """v2 switched the table and has not journaled COMMITTED yet (or a sweep read the journal
    before it did): v1 may have stopped being read a moment ago."""
    in_flight = [_refresh("v1", AttemptState.COMMITTED, T0), _refresh("v2", AttemptState.WRITTEN, T0 + 10)]
    live = {f"{ROOT}/_v=v2"}
    listed = _listed("v1", "v2")
    assert _doomed(listed, in_flight, live, POLICY, T0 + 10**6) == []
    # Journaled: the grace runs from v2's commit.
    done = [in_flight[0], _refresh("v2", AttemptState.COMMITTED, T0 + 20, [f"{ROOT}/_v=v1"])]
    assert _doomed(listed, done, live, POLICY, T0 + 20 + GRACE - 1) == []
    assert _doomed(listed, done, live, POLICY, T0 + 20 + GRACE + 1) == [f"{ROOT}/_v=v1"]
    # Nothing in flight and no record names v1's end (the table was switched by someone else):
    # the grace runs from the newest commit, which came after whatever did it.
    unnamed = [in_flight[0], _refresh("v2", AttemptState.COMMITTED, T0 + 20)]
    assert _doomed(listed, unnamed, live, POLICY, T0 + 20 + GRACE + 1) == [f"{ROOT}/_v=v1"]


def test_a_quarantined_attempt_is_not_in_flight_for_retention() -> None:
    """A version that failed its audits stays WRITTEN for days; it never switched the table."""
    quarantined = _refresh("v3", AttemptState.WRITTEN, T0 + 30)
    quarantined.audits = {"declared": [], "verdict": "quarantined"}
    journal = [_refresh("v1", AttemptState.COMMITTED, T0), _refresh("v2", AttemptState.COMMITTED, T0 + 20),
               quarantined]
    live = {f"{ROOT}/_v=v2"}
    # v1's end is named by no record: dated by the newest commit, not held while v3 is quarantined;
    # v3's own directory is kept (it is not ended).
    doomed = _doomed(_listed("v1", "v2", "v3"), journal, live, POLICY, T0 + 20 + GRACE + 1)
    assert doomed == [f"{ROOT}/_v=v1"]


def _rollback(attempt_id: str, version: str, at: float, superseded: str) -> AttemptRecord:
    """A rollback's location is the version it makes current again."""
    return AttemptRecord(
        attempt_id, "hive_rollback", "db.t", "replace", f"{ROOT}/_v={version}",
        state=AttemptState.COMMITTED, superseded_location=superseded, updated_at=at,
    )


def test_a_version_a_rollback_restored_is_not_dated_by_its_end_before_the_rollback() -> None:
    """v1, superseded by v2 at T0 + 10, is current again from a rollback at T0 + 5000; a replace
    v3 switched the table away from it and died before journaling its commit. v1's recorded end
    (T0 + 10) is from before the rollback: it must wait as a version whose end no record names."""
    journal = [
        _refresh("v1", AttemptState.COMMITTED, T0),
        _refresh("v2", AttemptState.COMMITTED, T0 + 10, [f"{ROOT}/_v=v1"]),
        _rollback("r1", "v1", T0 + 5000, f"{ROOT}/_v=v2"),
        _refresh("v3", AttemptState.WRITTEN, T0 + 5010),
    ]
    records = version_records(journal, "db.t")
    live = {f"{ROOT}/_v=v3"}
    assert f"{ROOT}/_v=v1" not in _doomed(_listed("v1", "v2", "v3"), records, live, POLICY, T0 + 5020)
    # v3's commit journaled: the grace runs from it.
    records[-1] = _refresh("v3", AttemptState.COMMITTED, T0 + 5010, [f"{ROOT}/_v=v1"])
    assert f"{ROOT}/_v=v1" not in _doomed(_listed("v1", "v3"), records, live, POLICY, T0 + 5010 + GRACE - 1)
    assert _doomed(_listed("v1", "v3"), records, live, POLICY, T0 + 5010 + GRACE + 1) == [f"{ROOT}/_v=v1"]
