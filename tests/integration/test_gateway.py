"""The gateway: a Spark Connect server on loopback with a token, reaching the test metastore."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_staged.discovery.embedded import GatewayInfo, MetastoreInfo, gateway_status, token_file
from airflow_provider_staged.local.processes import listening_sockets, pid_alive


def remote(url: str):
    from pyspark.sql.connect.session import SparkSession

    return SparkSession.builder.remote(url).create()


def test_gateway_serves_the_metastore_on_loopback_with_a_token(spark_gateway: GatewayInfo,
                                                               staged_home: Path) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    session = remote(spark_gateway.url)
    try:
        session.sql("CREATE DATABASE IF NOT EXISTS gw_probe").collect()
        databases = {row[0] for row in session.sql("SHOW DATABASES").collect()}
    finally:
        session.stop()
    assert "gw_probe" in databases
    from airflow_provider_staged.catalogs.metastore.client import MetastoreClient

    with MetastoreClient(spark_gateway.metastore_uri) as client:  # the same metastore, seen directly
        assert "gw_probe" in client.thrift.get_all_databases()
    sockets = listening_sockets(spark_gateway.pid)
    assert ("127.0.0.1", spark_gateway.port) in {(a.removeprefix("::ffff:"), p) for a, p in sockets}
    assert all(a.removeprefix("::ffff:") == "127.0.0.1" for a, _ in sockets), sockets
    assert stat.S_IMODE(token_file(staged_home).stat().st_mode) == 0o600
    assert gateway_status(staged_home) == spark_gateway

    intruder = remote(f"{spark_gateway.public_url}/;token=not-the-token")
    try:
        with pytest.raises(SparkConnectGrpcException, match="Invalid authentication token"):
            intruder.sql("SELECT 1").collect()
    finally:
        with contextlib.suppress(SparkConnectGrpcException):  # its release is refused too
            intruder.stop()


def test_server_python_imports_the_project_package(spark_gateway: GatewayInfo) -> None:
    """Python UDFs and data sources (the unified sink) run on the server with this interpreter."""
    # Connect's own udf, and a type object: pyspark.sql's pick (and parse a type string) by the
    # process's mode, which an in-process session in this process makes classic.
    from pyspark.sql.connect.functions import udf
    from pyspark.sql.types import StringType

    import airflow_provider_staged

    session = remote(spark_gateway.url)  # the active session, which the UDF is made on

    @udf(returnType=StringType())
    def package_file(_: int) -> str:
        import airflow_provider_staged as package

        return package.__file__

    try:
        found = session.range(1).select(package_file("id")).collect()[0][0]
    finally:
        session.stop()
    assert found == airflow_provider_staged.__file__


def test_cli_start_status_stop(metastore: MetastoreInfo, tmp_path: Path) -> None:
    """``staged gateway start|status|stop`` in a home of its own, on the session's metastore."""
    home = tmp_path / "home"
    staged_conn = {"conn_type": "staged_hive", "host": metastore.host, "port": metastore.port,
                   "extra": {"warehouse": metastore.warehouse}}
    env = {**os.environ, "STAGED_HOME": str(home), "AIRFLOW_CONN_STAGED_DEFAULT": json.dumps(staged_conn)}

    def staged(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).parent / "staged"), "gateway", *args], env=env,
                              capture_output=True, text=True, timeout=300)

    assert staged("status").returncode == 1
    started = staged("start", "--master", "local[1]")
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        info = gateway_status(home)
        assert info is not None and info.metastore_uri == metastore.uri
        assert f"gateway {info.public_url} pid {info.pid}" in started.stdout
        assert info.token not in started.stdout + started.stderr
        status = staged("status", "--output", "json")
        assert status.returncode == 0 and json.loads(status.stdout)["url"] == info.public_url
        again = staged("start")  # a running gateway is reported, not started twice
        assert again.returncode == 0 and f"pid {info.pid}" in again.stdout
        session = remote(info.url)
        try:
            assert session.sql("SELECT 1 AS one").collect()[0][0] == 1
        finally:
            session.stop()
    finally:
        stopped = staged("stop")
    assert stopped.stdout.strip() == "gateway stopped"
    assert not pid_alive(info.pid)
    assert not token_file(home).exists()
    assert staged("status").returncode == 1
    assert staged("stop").stdout.strip() == "gateway was not running"
