"""``staged attempts``: newest first, each with what it did as asked, its run, partition and outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli import main as cli
from airflow_provider_staged.cli.main import app
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.settings import StagedSettings


def _record(attempt_id: str, created_at: float, **fields: object) -> AttemptRecord:
    defaults: dict[str, object] = {
        "kind": "hive_table", "target": "analytics.orders", "purpose": "create_or_replace",
        "location": f"/w/analytics.db/orders/_v={attempt_id}",
    }
    return AttemptRecord(attempt_id, **{**defaults, **fields}, created_at=created_at)  # type: ignore[arg-type]


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FileJournal:
    settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "warehouse"), str(tmp_path / "journal"))
    monkeypatch.setattr(cli, "connection_settings", lambda conn: settings)
    return settings.journal


def _listed(*args: str) -> list[dict[str, str]]:
    result = CliRunner().invoke(app, ["attempts", "--output", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_newest_first_with_operation_partition_run_and_outcome(journal: FileJournal) -> None:
    refresh = TaskRef("mt__analytics__daily", "refresh", "manual__2024-01-03T00:00:00", 2)
    journal.create(_record("a-old", 100.0))
    journal.create(_record(
        "b-new", 300.0, kind="hive_partitions", purpose="create_or_replace",
        catalog={"partition_columns": ["ds"], "partition_spec": {"ds": "2024-01-03"}}, task=refresh,
        state=AttemptState.ABORTED, error="job failed: AnalysisException\n  at line 1",
    ))
    journal.create(_record("c-mid", 200.0, kind="hive_rollback", purpose="replace",
                           state=AttemptState.COMMITTED))

    rows = _listed()

    assert [row["attempt"] for row in rows] == ["b-new", "c-mid", "a-old"]
    newest = rows[0]
    assert newest["operation"] == "partition refresh"  # not the purpose it was built with
    assert newest["partition"] == "ds=2024-01-03"
    assert (newest["dag_id"], newest["run_id"], newest["try"]) == (
        "mt__analytics__daily", "manual__2024-01-03T00:00:00", 2)
    assert newest["outcome"] == "ABORTED: job failed: AnalysisException at line 1"
    assert [row["operation"] for row in rows[1:]] == ["rollback", "create or replace table as"]
    assert rows[2]["run_id"] is None and rows[2]["outcome"] == "BEGUN" and rows[2]["partition"] == ""

    text = CliRunner().invoke(app, ["attempts"]).output  # piped: every cell whole, one line a row
    lines = [line for line in text.splitlines() if "│" in line]
    assert "partition refresh ds=2024-01-03" in lines[0]
    assert "mt__analytics__daily manual__2024-01-03T00:00:00 #2" in lines[0]
    assert "(no task)" in lines[2]


def test_a_whole_table_build_of_a_partitioned_table_is_named_by_its_purpose(journal: FileJournal) -> None:
    journal.create(_record("a", 1.0, kind="hive_partitions", purpose="replace",
                           catalog={"partition_columns": ["ds"], "partition_spec": {}}))
    assert _listed()[0]["operation"] == "replace table as"


def test_an_empty_journal_says_so(journal: FileJournal) -> None:
    result = CliRunner().invoke(app, ["attempts"])
    assert result.exit_code == 0 and "no attempts in the journal" in result.output


def test_a_narrow_terminal_folds_run_ids_instead_of_cutting_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from rich.console import Console

    from airflow_provider_staged.cli import output

    screen = StringIO()
    monkeypatch.setattr(output, "console", Console(width=60, file=screen))
    ids = ["manual__2024-01-03T10:15:42.123456+00:00", "manual__2024-01-03T10:15:42.654321+00:00"]
    output.print_rows([{"run": run_id, "state": "success", "took": "12 s"} for run_id in ids],
                      output.Output.text, "")
    text = screen.getvalue()
    assert "…" not in text
    cells = [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") >= 3]
    assert "".join(cells) == "".join(ids)  # each id whole, folded onto a second line


def test_a_refresh_reads_as_what_it_refreshed_and_how_long_it_took() -> None:
    from datetime import datetime, timedelta, timezone

    from airflow_provider_staged.cli.materialized import _run_row

    queued = datetime(2024, 1, 3, 10, 0, tzinfo=timezone.utc)
    run = {"run_id": "manual__x", "state": "success", "run_after": queued,
           "end_date": queued + timedelta(seconds=7.4), "conf": {"staticPartitions": {"ds": "2024-01-03"}}}
    assert _run_row(run) == {"run": "manual__x", "state": "success", "refreshed": "ds=2024-01-03",
                             "run after": "2024-01-03 10:00:00", "took": "7 s"}
    periodic = {**run, "end_date": None, "conf": {"isPeriodic": True, "scheduleTime": "2024-01-02 00:00:00"}}
    assert _run_row(periodic)["refreshed"] == "period of 2024-01-02 00:00:00"
    assert _run_row(periodic)["took"] == "-"
    assert _run_row({**run, "conf": None})["refreshed"] == "-"
