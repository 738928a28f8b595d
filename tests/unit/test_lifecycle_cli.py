"""``staged versions | rollback | expire`` refuse a bad table name in one line, before any server."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli.main import app
from tests.unit.test_cli_errors import fails_with


@pytest.fixture(autouse=True)
def _no_local_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGED_HOME", str(tmp_path / "staged-home"))
    monkeypatch.delenv("STAGED_DEBUG", raising=False)


@pytest.mark.parametrize(
    "args",
    [
        ["versions", "a.b.c"],
        ["rollback", "a.b.c", "--to", "v1"],
        ["expire", "ok.t", "a.b.c", "--dry-run"],
    ],
)
def test_bad_table_name_is_named(args: list[str]) -> None:
    fails_with(args, "'a.b.c'")


def test_without_a_metastore_the_error_says_how_to_get_one() -> None:
    fails_with(["versions", "db.t"], "staged services up")


@pytest.mark.parametrize("command", [["versions", "db.t"], ["rollback", "db.t", "--to", "v1"]])
def test_bad_partition_spec_is_named_before_any_server(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--partition", "ds"])
    assert result.exit_code == 2, result.output  # a usage error, in one line
    assert result.stderr.splitlines() == [
        f"error: Invalid value: --partition 'ds': expected KEY=VALUE (see `root {command[0]} --help`)"
    ]
