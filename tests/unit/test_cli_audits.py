"""``staged audits show`` and ``staged publish``, from the journal alone (no metastore reached)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli import context
from airflow_provider_staged.cli.main import app
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.quarantine import newer_commits
from airflow_provider_staged.staging.settings import StagedSettings
from tests.unit.test_cli_errors import fails_with

RESULTS = [
    {"name": "non_negative", "kind": "row", "mode": "fail", "passed": False, "failing": 2, "value": None,
     "samples": [{"id": "1", "amount": "-4"}, {"id": "2", "amount": "-3"}], "detail": ""},
    {"name": "id_unique", "kind": "table", "mode": "fail", "passed": True, "failing": None, "value": 0,
     "samples": [], "detail": ""},
]


def _record(
    attempt_id: str, created_at: float, state: AttemptState, kind: str = "hive_table", **fields: object
) -> AttemptRecord:
    location = f"/w/db.db/orders/_v={attempt_id}"
    return AttemptRecord(attempt_id, kind, "db.orders", "create_or_replace", location, state=state,
                         created_at=created_at, **fields)  # type: ignore[arg-type]


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StagedSettings:
    settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "warehouse"), str(tmp_path / "journal"))
    monkeypatch.setattr(context, "connection_settings", lambda conn: settings)
    return settings


def _quarantined(journal: FileJournal, attempt_id: str, created_at: float) -> None:
    journal.create(_record(attempt_id, created_at, AttemptState.WRITTEN, audits={
        "declared": [], "results": RESULTS, "verdict": "quarantined", "audited_at": created_at + 1,
        "replaced": {"": "/w/db.db/orders/_v=old"}}))


def test_show_lists_outcomes_and_sample_rows(settings: StagedSettings) -> None:
    _quarantined(settings.journal, "q1", 100.0)
    result = CliRunner().invoke(app, ["audits", "show", "q1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "attempt q1 of db.orders (WRITTEN): quarantined",
        "audit non_negative [row, fail]: FAILED, 2 failing",
        "    {'amount': '-4', 'id': '1'}",  # the journal keeps JSON with sorted keys
        "    {'amount': '-3', 'id': '2'}",
        "audit id_unique [table, fail]: passed, value 0",
    ]


def test_publish_refuses_what_is_not_quarantined(settings: StagedSettings) -> None:
    settings.journal.create(_record("c1", 100.0, AttemptState.COMMITTED))
    fails_with(["publish", "c1"], "attempt c1 of db.orders is not quarantined: it is COMMITTED")


def test_publish_refuses_when_a_newer_commit_of_the_same_data_exists(settings: StagedSettings) -> None:
    _quarantined(settings.journal, "q1", 100.0)
    settings.journal.create(_record("c2", 200.0, AttemptState.COMMITTED))
    fails_with(["publish", "q1"], "db.orders moved on since attempt q1 began: attempt c2 committed after it")


def test_commits_of_other_partitions_do_not_count_as_moved_on(settings: StagedSettings) -> None:
    def partition(attempt_id: str, day: str, state: AttemptState) -> AttemptRecord:
        return _record(attempt_id, 100.0, state, kind="hive_partitions",
                       catalog={"partition_columns": ["ds"], "partition_spec": {"ds": day}})

    quarantined = partition("q1", "d1", AttemptState.WRITTEN)
    for record in (quarantined, partition("c2", "d2", AttemptState.COMMITTED),
                   partition("c3", "d1", AttemptState.COMMITTED)):
        settings.journal.create(record)
    assert [r.attempt_id for r in newer_commits(settings, quarantined)] == ["c3"]


def test_attempts_shows_the_audit_verdict(settings: StagedSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from airflow_provider_staged.cli import main

    monkeypatch.setattr(main, "connection_settings", lambda conn: settings)
    _quarantined(settings.journal, "q1", 100.0)
    result = CliRunner().invoke(app, ["attempts", "--output", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["outcome"] == "WRITTEN (audits: quarantined)"
