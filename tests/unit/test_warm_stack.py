"""Warm by default: the local stack's gateway in its status, the refresh engine it sets, and the
SQL client's choice of mode and its prompt (pure logic, no server)."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import Mock

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli.main import app
from airflow_provider_staged.cli.sql import Mode, current_database, default_mode, prompt_text
from airflow_provider_staged.discovery.embedded import AirflowInfo, GatewayInfo, MetastoreInfo
from airflow_provider_staged.get_provider_info import get_provider_info
from airflow_provider_staged.local.stack import (
    REFRESH_ENGINE_ENV,
    StackEngine,
    StackStatus,
    engine_line,
    stack_env,
)

REPO = Path(__file__).resolve().parents[2]
METASTORE = MetastoreInfo("127.0.0.1", 9083, 11, "/wh", "/home")
GATEWAY = GatewayInfo(15002, 12, "secret-token", METASTORE.uri, "/wh", "/home")


def airflow(engine: str | None) -> AirflowInfo:
    env = {REFRESH_ENGINE_ENV: engine} if engine else {}
    return AirflowInfo("/home/airflow", 8080, "/dags", {"scheduler": 13}, env)


def test_the_stack_sets_the_providers_refresh_engine_option(tmp_path: Path) -> None:
    section, option = REFRESH_ENGINE_ENV.removeprefix("AIRFLOW__").lower().split("__")
    declared = get_provider_info()["config"][section]["options"][option]
    assert declared["default"] == StackEngine.embedded.value  # the provider's own default stays
    env = stack_env(tmp_path, tmp_path / "materialized", StackEngine.connect)
    assert env[REFRESH_ENGINE_ENV] == "connect" and env["STAGED_HOME"] == str(tmp_path)
    # Tasks find the gateway (and its token file) through STAGED_HOME: no token in the env,
    # which the stack's state file records.
    assert not any("token" in key.lower() or "sc://" in value for key, value in env.items())


def test_status_of_a_warm_stack_names_the_gateway_and_needs_it() -> None:
    warm = StackStatus(Path("/home"), METASTORE, airflow("connect"), GATEWAY)
    assert warm.engine == "connect" and warm.running
    assert warm.pids() == {"metastore": 11, "gateway": 12, "scheduler": 13}
    shown = warm.as_dict()
    assert shown["refresh_engine"] == "connect"
    assert shown["gateway"] == {"url": "sc://localhost:15002", "pid": 12, "token_file": "/home/gateway.token"}
    assert "secret-token" not in repr(shown)
    assert engine_line(warm) == "refreshes   engine connect: on the gateway sc://localhost:15002"
    gone = StackStatus(Path("/home"), METASTORE, airflow("connect"), None)
    assert not gone.running and "NOT running" in engine_line(gone)


def test_status_of_an_embedded_stack_runs_without_a_gateway() -> None:
    for engine in ("embedded", None):  # None: a stack started before the gateway was part of it
        cold = StackStatus(Path("/home"), METASTORE, airflow(engine), None)
        assert cold.engine == "embedded" and cold.running
        assert engine_line(cold).startswith("refreshes   engine embedded: in a Spark of each task")
    assert StackStatus(Path("/home"), None, None).engine is None


@pytest.mark.parametrize(
    ("url", "conn", "metastore_uri", "gateway", "expected"),
    [
        ("sc://localhost:1/", None, None, None, Mode.gateway),  # --gateway / STAGED_GATEWAY_URL
        (None, None, None, GATEWAY, Mode.gateway),  # the local stack's gateway runs
        (None, None, METASTORE.uri, GATEWAY, Mode.gateway),  # ... on the configured metastore
        (None, None, "thrift://elsewhere:9083", GATEWAY, Mode.embedded),  # another catalog
        (None, "prod", None, GATEWAY, Mode.embedded),  # --conn: another catalog
        (None, None, None, None, Mode.embedded),  # no gateway: Spark in the client
    ],
)
def test_the_sql_clients_default_mode(url: str | None, conn: str | None, metastore_uri: str | None,
                                      gateway: GatewayInfo | None, expected: Mode) -> None:
    assert default_mode(url, conn, metastore_uri, gateway) is expected


def test_the_prompt_names_the_current_database() -> None:
    assert prompt_text("analytics") == "staged:analytics> "
    spark = Mock()
    spark.catalog.currentDatabase.return_value = "analytics"
    assert current_database(spark, "default") == "analytics"
    spark.catalog.currentDatabase.side_effect = RuntimeError("gateway gone")
    assert current_database(spark, "analytics") == "analytics"  # the prompt never fails


def test_up_refuses_an_unknown_engine_changing_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("STAGED_HOME", str(home))
    result = CliRunner().invoke(app, ["up", "--engine", "spark", "--dags-folder", str(REPO / "dags")])
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: invalid --engine 'spark': expected connect or embedded"
    assert not home.exists()
