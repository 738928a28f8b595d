"""`staged` imports a sub-command's module only when it runs or is listed, and keeps every help."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli.main import LAZY_COMMANDS, app
from airflow_provider_staged.cli.sql import loading_modules

PROBE = """
import sys
from typer.testing import CliRunner
from airflow_provider_staged.cli.main import app
result = CliRunner().invoke(app, ["sql", "--help"])
assert result.exit_code == 0 and "TBLPROPERTIES" in result.output, result.output
print(sorted(name for name in ("httpx", "airflow_client", "airflow_provider_staged.cli.materialized",
                               "airflow_provider_staged.cli.gateway", "pyspark") if name in sys.modules))
"""


def test_sql_starts_without_the_other_commands_modules() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# What `staged sql -e "SELECT 1"` on a gateway imports of ours: the statement's path only (the
# journal, the engines, the settings and lineage come with a CTAS or a streaming query).
STATEMENT_PROBE = """
import sys
import airflow_provider_staged.cli.main
import airflow_provider_staged.cli.sql, airflow_provider_staged.sql.session
ours = (
    "staging.settings", "staging.journal", "engine.runners", "lineage.datasets", "sql.session_engine"
)
names = ("airflow", "psutil", *(f"airflow_provider_staged.{name}" for name in ours))
print(sorted(name for name in names if name in sys.modules))
"""


def test_a_statement_starts_without_the_journal_or_the_engines() -> None:
    done = subprocess.run([sys.executable, "-c", STATEMENT_PROBE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_lazy_command_is_listed_and_has_its_help() -> None:
    runner = CliRunner()
    listing = runner.invoke(app, ["--help"])
    assert listing.exit_code == 0
    for name in LAZY_COMMANDS:
        assert f" {name} " in listing.output, listing.output
        assert runner.invoke(app, [name, "--help"]).exit_code == 0
    assert "refresh" in runner.invoke(app, ["mt", "--help"]).output
    assert "start" in runner.invoke(app, ["gateway", "--help"]).output


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_modules_pauses_the_collector_and_freezes_what_loaded(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    frozen = gc.get_freeze_count()
    try:
        with loading_modules():
            assert not gc.isenabled()
            built = [[] for _ in range(1000)]  # stands for a library's long-lived objects
        assert gc.isenabled() is enabled  # as it was before
        assert gc.get_freeze_count() - frozen >= len(built)  # no collection walks them again
    finally:
        gc.unfreeze()  # the test process's heap goes back to the collector
        (gc.enable if was else gc.disable)()
