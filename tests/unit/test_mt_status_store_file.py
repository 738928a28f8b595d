"""The refresh status kept beside the definition (no table yet): failure count, reason, note."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from airflow_provider_staged.materialized.catalog_status import (
    CatalogStatusStore,
    read_state,
    remove_state,
    set_workflow_options,
    suspension_of,
)
from airflow_provider_staged.materialized.failure_streak import SUSPENDED_DUE_TO_ERRORS, FailureStreak
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus
from airflow_provider_staged.staging.identifiers import TableIdentifier

T = TableIdentifier("db", "t")


def test_count_suspend_and_resume_in_the_state_file(tmp_path: Path) -> None:
    path = tmp_path / "db__t.sql"
    path.write_text("CREATE MATERIALIZED TABLE db.t FRESHNESS = INTERVAL '1' DAY AS SELECT 1 AS x")
    store = CatalogStatusStore(None)
    store.save(T, path, RefreshStatus.ACTIVATED, '{"handler": 1}')
    set_workflow_options(path, {"compression": "zstd"}, None)
    for i in range(3):
        status = store.update(T, path, lambda s, i=i: replace(
            s, failures=FailureStreak(s.failures.count + 1, f"scheduled__{i}: boom")))
    assert (status.failures, status.stored_in) == (FailureStreak(3, "scheduled__2: boom"), "file")
    assert suspension_of(path) is None

    store.save(T, path, RefreshStatus.SUSPENDED, suspend_reason=SUSPENDED_DUE_TO_ERRORS)
    status = store.load(T, path)
    assert status.status_text() == "SUSPENDED (SUSPENDED_DUE_TO_ERRORS)"
    assert status.failures.count == 3 and status.refresh_handler == '{"handler": 1}'  # kept
    assert suspension_of(path).startswith("SUSPENDED_DUE_TO_ERRORS after 3 consecutive failed")
    assert status.dynamic_options == {"compression": "zstd"}  # other fields of the file stay

    store.save(T, path, RefreshStatus.ACTIVATED, failures=FailureStreak())  # what RESUME does
    status = store.load(T, path)
    assert (status.status_text(), status.failures) == ("ACTIVATED", FailureStreak())
    assert suspension_of(path) is None
    assert "consecutive_failures" not in read_state(path)

    assert store.update(T, path, lambda current: None) == status  # None writes nothing
    remove_state(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db__t.sql"]  # no lock file left


def test_damaged_state_file_never_breaks_the_description(tmp_path: Path) -> None:
    path = tmp_path / "db__t.sql"
    (tmp_path / "db__t.workflow.json").write_text("{not json")
    assert suspension_of(path) is None
