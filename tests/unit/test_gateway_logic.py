"""Pure logic of the gateway and the connect engine: URLs, settings, the server's command line."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from unittest.mock import Mock

import pytest

from airflow_provider_staged.discovery.embedded import gateway_status
from airflow_provider_staged.engine.connect import (
    GATEWAY_URL_ENV,
    check_reachable,
    public_url,
    resolve_url,
    server_address,
    session_conf,
)
from airflow_provider_staged.engine.runners import make_engine
from airflow_provider_staged.engine.spark_job import leading_keyword, query_frame
from airflow_provider_staged.local.gateway import TOKEN_ENV, gateway_command
from airflow_provider_staged.materialized.definition import DefinitionError, parse_definition
from airflow_provider_staged.staging.errors import ServiceError
from airflow_provider_staged.staging.settings import StagedSettings

SETTINGS = StagedSettings("thrift://127.0.0.1:9083", "/tmp/wh", "/tmp/journal")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sc://localhost:15010/;token=abc", ("localhost", 15010)),
        ("sc://127.0.0.1:7", ("127.0.0.1", 7)),
        ("sc://gateway.example", ("gateway.example", 15002)),
    ],
)
def test_server_address(url: str, expected: tuple[str, int]) -> None:
    assert server_address(url) == expected


@pytest.mark.parametrize("url", ["http://localhost:1/;token=secret", "sc://:15002/;token=secret",
                                 "sc://localhost:notaport/;token=secret", "localhost:15002"])
def test_bad_url_is_named_without_its_token(url: str) -> None:
    with pytest.raises(ValueError, match="invalid Spark Connect URL") as err:
        server_address(url)
    assert "secret" not in str(err.value)
    assert url.split(";")[0] in str(err.value)


def test_public_url_drops_the_token() -> None:
    assert public_url("sc://localhost:1/;token=secret;user_id=x") == "sc://localhost:1"


def test_unreachable_server_is_a_clear_error_at_once() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServiceError, match=rf"sc://localhost:{port} is not reachable") as err:
        check_reachable(f"sc://localhost:{port}/;token=secret", timeout=2)
    assert "secret" not in str(err.value)


def test_url_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STAGED_HOME", str(tmp_path))
    monkeypatch.delenv(GATEWAY_URL_ENV, raising=False)
    with pytest.raises(ServiceError, match=r"no gateway runs under .*staged gateway start"):
        resolve_url()
    monkeypatch.setenv(GATEWAY_URL_ENV, "sc://localhost:2/;token=t")
    assert resolve_url() == "sc://localhost:2/;token=t"
    assert resolve_url(url="sc://localhost:3") == "sc://localhost:3"
    assert gateway_status(tmp_path) is None


def test_spark_submit_settings_are_left_out_of_a_remote_session(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        kept = session_conf({"spark.sql.shuffle.partitions": "2", "spark.executor.memory": "2g"})
    assert kept == {"spark.sql.shuffle.partitions": "2"}
    assert "spark.executor.memory" in caplog.text


def test_unknown_engine_is_named() -> None:
    with pytest.raises(ValueError, match="unknown engine 'remote'"):
        make_engine("remote", SETTINGS)


def test_gateway_command_binds_loopback_reaches_the_metastore_and_hides_the_token() -> None:
    command = gateway_command(15999, SETTINGS.metastore_uri, SETTINGS.warehouse, "local[2]")
    joined = " ".join(command)
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in command
    assert "spark.connect.grpc.binding.address=127.0.0.1" in joined
    assert "spark.connect.grpc.binding.port=15999" in joined
    assert "spark.hadoop.hive.metastore.uris=thrift://127.0.0.1:9083" in joined
    assert "spark.sql.catalogImplementation=hive" in joined
    assert "token" not in joined.lower()  # given through TOKEN_ENV, never on a command line
    assert TOKEN_ENV == "SPARK_CONNECT_AUTHENTICATE_TOKEN"


DEFINITION = """CREATE MATERIALIZED TABLE mart.daily
WITH ('engine' = '{engine}')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT 1 AS x
"""


def test_definition_engine_option() -> None:
    assert parse_definition(DEFINITION.format(engine="connect")).options["engine"] == "connect"
    with pytest.raises(DefinitionError, match=r"option 'engine' = 'gpu' is not supported.*'connect'"):
        parse_definition(DEFINITION.format(engine="gpu"))


@pytest.mark.parametrize(
    ("sql", "keyword"),
    [
        ("SELECT 1", "SELECT"),
        ("  -- a comment\n /* one /* nested */ still */ ((select id FROM t))", "SELECT"),
        ("WITH s AS (SELECT 1) INSERT INTO t SELECT * FROM s", "WITH"),
        ("drop_table", "DROP_TABLE"),
        ("/* never closed SELECT", ""),
        ("`t`", ""),
        ("", ""),
    ],
)
def test_leading_keyword(sql: str, keyword: str) -> None:
    assert leading_keyword(sql) == keyword


def test_a_classic_session_builds_the_query_with_spark_sql() -> None:
    spark = Mock()
    assert query_frame(spark, "SELECT 1") is spark.sql.return_value
    spark.sql.assert_called_once_with("SELECT 1")
