"""``staged up|down|status|run-dag`` error paths and output, with no server started.

Each error: one ``error:`` line on stderr, exit code ≠ 0, nothing created or changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from airflow_provider_staged.cli import main as cli
from airflow_provider_staged.cli.main import app
from airflow_provider_staged.staging.errors import ServiceError

STAGED = Path(sys.executable).with_name("staged")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "staged-home"  # not created: a failing command must not create it
    monkeypatch.setenv("STAGED_HOME", str(home))
    for name in ("STAGED_DEBUG", "STAGED_DAGS_FOLDER", "STAGED_AIRFLOW_ENDPOINT",
                 "STAGED_MT_DEFINITIONS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


def one_error(args: list[str], code: int, *expected: str) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == "" and "Traceback" not in result.output
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_up_without_a_dags_folder_changes_nothing(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no-dags"
    empty.mkdir()
    one_error(["up", "--dags-folder", str(empty)], 1, str(empty), "materialized_tables.py", "--dags-folder")
    assert not home.exists()


def test_status_and_down_when_nothing_runs(home: Path) -> None:
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 1
    assert "metastore   not running" in result.stdout and "staged up" in result.stdout
    result = CliRunner().invoke(app, ["down"])
    assert result.exit_code == 0 and f"nothing ran under {home}" in result.stdout
    assert not home.exists()


def test_run_dag_needs_the_local_airflow(home: Path) -> None:
    one_error(["run-dag", "example_staged_ctas"], 1, f"no local Airflow runs under {home}", "staged up")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["status", "--output", "yaml"], "'yaml'"),
        (["show"], "Missing argument"),
        (["show", "db.t", "--limit", "-1"], "--limit"),
        (["no-such-command"], "no-such-command"),
        (["run-dag", "d", "--wait", "0"], "--wait"),
    ],
)
def test_usage_errors_are_one_line_with_code_2(home: Path, args: list[str], expected: str) -> None:
    line = one_error(args, 2, expected)
    assert "--help" in line


def test_mt_names_flags_not_configuration_keys(home: Path, tmp_path: Path) -> None:
    line = one_error(["mt", "--endpoint", "localhost:8080", "--definitions-dir", str(tmp_path), "list"], 1,
                     "invalid --endpoint (STAGED_AIRFLOW_ENDPOINT) 'localhost:8080'")
    assert "workflow-scheduler." not in line
    # Given as a configuration key, the key is what the message names.
    one_error(["mt", "--conf", "workflow-scheduler.airflow.endpoint=ftp://x", "--definitions-dir",
               str(tmp_path), "list"], 1, "invalid workflow-scheduler.airflow.endpoint 'ftp://x'")


def test_an_unexpected_error_is_one_line_and_debug_shows_it(home: Path) -> None:
    @app.command("fail-for-test", hidden=True)
    def _fail() -> None:
        raise KeyError("boom")

    try:
        one_error(["fail-for-test"], 1, "unexpected KeyError: 'boom'", "--debug")
        result = CliRunner().invoke(app, ["--debug", "fail-for-test"])
        assert isinstance(result.exception, KeyError)
    finally:
        app.registered_commands = [c for c in app.registered_commands if c.name != "fail-for-test"]


def test_debug_after_the_command_raises(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["staged", "run-dag", "x", "--debug"])
    with pytest.raises(ServiceError, match="no local Airflow"):
        cli.main()
    monkeypatch.setattr(sys, "argv", ["staged", "run-dag", "x"])
    with pytest.raises(SystemExit) as exited:  # without it: the one line and exit code 1
        cli.main()
    assert exited.value.code == 1


def test_flags_show_no_value_in_help() -> None:
    for args in (["--help"], ["reconcile", "--help"], ["mt", "refresh", "--help"]):
        result = CliRunner().invoke(app, args, env={"COLUMNS": "150"})
        assert result.exit_code == 0
        assert "<bool>" not in result.stdout and "--help" in result.stdout
    assert "--airflow" in CliRunner().invoke(app, ["reconcile", "--help"]).stdout


def test_piped_output_is_never_cut(tmp_path: Path) -> None:
    """Through a pipe (not a TTY) rich would cut a wide table at 80 columns with "…"."""
    long_value = "x" * 300
    script = ("from airflow_provider_staged.cli.output import Output, print_rows; "
              f"print_rows([{{'table': {long_value!r}, 'n': 1}}], Output.text, '')")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert long_value in out and "…" not in out
    home = tmp_path.joinpath(*["deep"] * 60)
    status = subprocess.run([str(STAGED), "status"], capture_output=True, text=True,
                            env={"STAGED_HOME": str(home), "PATH": "/usr/bin:/bin", "COLUMNS": "40"})
    assert status.returncode == 1 and f"home        {home}" in status.stdout


def test_the_click_exception_type_is_typers() -> None:
    """typer vendors click: the group must catch typer's exception classes, not click's."""
    assert issubclass(typer.BadParameter, typer.TyperException)
