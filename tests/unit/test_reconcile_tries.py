"""Reconcile of a task's tries when the task-state lookup knows no try numbers (the Task SDK's,
inside the maintenance DAG): a success commits the WRITTEN attempt of the try that had it, never
an earlier try's whose task a later try finished."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_staged.staging.attempts import commit_written
from airflow_provider_staged.staging.journal import AttemptState, TaskRef
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from tests.unit.test_commit_group import PointerTable, _write


def _written(settings: StagedSettings, root: Path, target: str, try_number: int, run: str = "run-1"
             ) -> PointerTable:
    staged = PointerTable(target, settings.journal, root)
    staged.task = TaskRef("nightly", "build", run, try_number)
    staged.begin()
    staged.written(_write(staged, staged.write_spec()))
    return staged


def test_a_success_commits_only_the_latest_tries_attempt(tmp_path: Path) -> None:
    settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "wh"), str(tmp_path / "journal"))
    first = _written(settings, tmp_path, "db.t", 1)  # its worker died after the write
    second = _written(settings, tmp_path, "db.t", 2)
    commit_written(second)  # the retry built and committed the table
    assert {a.attempt_id: a.action for a in reconcile(settings, lambda task: "success")} == {
        first.attempt_id: "aborted"}
    assert settings.journal.require(first.attempt_id).state is AttemptState.ABORTED
    assert second.is_published(settings.journal.require(second.attempt_id))
    alone = _written(settings, tmp_path, "db.t", 1, "run-2")  # no later try: its success commits it
    assert {a.attempt_id: a.action for a in reconcile(settings, lambda task: "success")} == {
        alone.attempt_id: "committed"}
