"""Retention of the version a sink append created: issue 8's rule, like every other version."""

from __future__ import annotations

from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds.hive_table import _doomed, version_location
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import Entry

ROOT = "file:/w/db/t"
T0 = 1_700_000_000.0
POLICY = RetentionPolicy(keep_versions=0, max_age_seconds=None, grace_seconds=3600)


def _append(attempt_id: str, state: AttemptState, at: float) -> AttemptRecord:
    """A sink append: staged under _staging/, its version (if it created the table) at _v=<id>."""
    return AttemptRecord(
        attempt_id, "hive_append", "db.t", "create_or_replace", f"{ROOT}/_staging/{attempt_id}",
        catalog={"root": ROOT, "query_id": "q", "batch_id": 0, "streaming": False},
        state=state, updated_at=at,
    )


def _overwrite(attempt_id: str, superseded: str | None, at: float) -> AttemptRecord:
    return AttemptRecord(
        attempt_id, "hive_overwrite", "db.t", "create_or_replace", f"{ROOT}/_v={attempt_id}",
        catalog={"root": ROOT}, state=AttemptState.COMMITTED, superseded_location=superseded, updated_at=at,
    )


def _listed(*attempt_ids: str) -> list[Entry]:
    return [Entry(f"_v={a}", f"{ROOT}/_v={a}", True, T0) for a in attempt_ids]


def test_append_created_version_is_a_version_not_an_orphan():
    assert version_location(_append("a1", AttemptState.COMMITTED, T0)) == f"{ROOT}/_v=a1"
    assert version_location(_overwrite("o1", None, T0)) == f"{ROOT}/_v=o1"


def test_version_an_append_created_and_an_overwrite_replaced_waits_for_the_grace():
    records = [_append("a1", AttemptState.COMMITTED, T0), _overwrite("o1", f"{ROOT}/_v=a1", T0 + 10)]
    live = {f"{ROOT}/_v=o1"}
    listed = _listed("a1", "o1")
    # Beyond keep_versions (0) but inside the grace: kept.
    assert _doomed(listed, records, live, POLICY, T0 + 60) == []
    # Past the grace: deleted; the version the catalog points at never.
    assert _doomed(listed, records, live, POLICY, T0 + 10 + 3601) == [f"{ROOT}/_v=a1"]
    # Within keep_versions: kept even past the grace.
    kept = RetentionPolicy(keep_versions=1, max_age_seconds=None, grace_seconds=3600)
    assert _doomed(listed, records, live, kept, T0 + 10 + 3601) == []
    # Never while the catalog points at it (a rollback to it, say), however old.
    assert f"{ROOT}/_v=a1" not in _doomed(listed, records, {f"{ROOT}/_v=a1"}, POLICY, T0 + 10**6)


def test_version_of_a_running_append_that_creates_the_table_is_not_an_orphan():
    records = [_append("a2", AttemptState.WRITTEN, T0)]
    assert _doomed(_listed("a2"), records, set(), POLICY, T0 + 10**6) == []
    aborted = [_append("a2", AttemptState.ABORTED, T0)]
    # Dead since its abort, by the journal's clock: deleted once the grace has passed.
    assert _doomed(_listed("a2"), aborted, set(), POLICY, T0 + 1) == []
    assert _doomed(_listed("a2"), aborted, set(), POLICY, T0 + 3601) == [f"{ROOT}/_v=a2"]
