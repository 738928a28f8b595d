"""The gateway: a Spark Connect server from the pyspark wheel, shared by SQL clients and tasks.

It listens on 127.0.0.1 only and accepts only clients presenting its token (a bearer token
kept in a 0600 file under ``$STAGED_HOME``; given to the server through its environment, so
it is not on a command line). Its Spark uses the same metastore and warehouse settings as the
embedded engine, and runs Python (UDFs, Python data sources) with this interpreter, so the
project's package is importable there.

Clients connect to ``sc://localhost:PORT/;token=...``: pyspark (and the Spark provider's
``SparkConnectHook``) send a token over plain gRPC only when the host is literally
``localhost`` (local channel credentials); any other host name switches to TLS, which this
loopback server does not speak.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from airflow_provider_staged.discovery.embedded import (
    GatewayInfo,
    gateway_pid_file,
    gateway_state_file,
    gateway_status,
    read_pid,
    staged_home,
    token_file,
)
from airflow_provider_staged.engine.session import (
    hive_conf,
    jars_conf,
    master_on_this_host,
    spark_submit_env,
)
from airflow_provider_staged.local.metastore import spark_home
from airflow_provider_staged.local.processes import (
    free_port,
    start_background,
    stop_pid,
    wait_for_port,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# The server reads its token from this variable (Spark's Connect.CONNECT_AUTHENTICATE_TOKEN_ENV).
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
# A loaded machine needs ~25 s for the server's JVM and SparkContext.
START_TIMEOUT_SECONDS = 180.0


def log_file(home: Path) -> Path:
    return home / "logs" / "gateway.log"


def _new_token(home: Path) -> str:
    """A fresh token in a file only its owner can read (created 0600, never world-readable)."""
    token = secrets.token_urlsafe(32)
    path = token_file(home)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    return token


def server_conf(port: int, metastore_uri: str, warehouse: str, master: str) -> dict[str, str]:
    """The server's Spark conf: loopback only, the metastore, and this interpreter for Python."""
    return {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **jars_conf(master_on_this_host(master)),
        **hive_conf(metastore_uri, warehouse),
    }


def gateway_command(port: int, metastore_uri: str, warehouse: str, master: str,
                    spark_conf: dict[str, str] | None = None) -> list[str]:
    """``spark-submit`` of the Connect server class (the 4.2 wheel has no start script)."""
    conf = {**server_conf(port, metastore_uri, warehouse, master), **(spark_conf or {})}
    return [
        str(spark_home() / "bin" / "spark-submit"),
        "--class", SERVER_CLASS,
        "--name", "staged gateway",
        "--master", master,
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
    ]


def start_gateway(
    metastore_uri: str,
    warehouse: str,
    home: Path | None = None,
    port: int | None = None,
    master: str = "local[*]",
    spark_conf: dict[str, str] | None = None,
) -> GatewayInfo:
    """Start the gateway unless one recorded under ``home`` runs; wait until it accepts clients."""
    return launch_gateway(metastore_uri, warehouse, home, port, master, spark_conf).wait()


@dataclass
class LaunchedGateway:
    """A gateway whose process runs but may not answer yet: ``wait`` until it does.

    Lets ``staged up`` start the server's JVM and then Airflow, so that the two starts overlap.
    """

    home: Path
    port: int
    pid: int
    token: str
    metastore_uri: str
    warehouse: str
    running: GatewayInfo | None = None  # one that already ran under ``home``: nothing to wait for

    def wait(self) -> GatewayInfo:
        """Until a client has run a query through the metastore on it; stopped if it fails."""
        if self.running is not None:
            return self.running
        try:
            wait_for_port(self.port, self.pid, timeout=START_TIMEOUT_SECONDS, log_file=log_file(self.home))
            info = GatewayInfo(self.port, self.pid, self.token, self.metastore_uri, self.warehouse,
                               str(self.home))
            _warm_up(info)
        except BaseException:
            self.stop()
            raise
        state = {key: value for key, value in asdict(info).items() if key != "token"}
        gateway_state_file(self.home).write_text(json.dumps(state))
        return info

    def stop(self) -> None:
        """Stop the process (a failed start, or what started alongside it failed)."""
        if self.running is None:
            stop_gateway(self.home)


def launch_gateway(
    metastore_uri: str,
    warehouse: str,
    home: Path | None = None,
    port: int | None = None,
    master: str = "local[*]",
    spark_conf: dict[str, str] | None = None,
) -> LaunchedGateway:
    """Start the gateway's process (unless one recorded under ``home`` runs) without waiting."""
    home = (home or staged_home()).resolve()
    running = gateway_status(home)
    if running is not None:
        return LaunchedGateway(home, running.port, running.pid, running.token, running.metastore_uri,
                               running.warehouse, running)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"invalid gateway port {port!r}: expected 1-65535")
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    token = _new_token(home)
    env = {
        **os.environ,
        **spark_submit_env(),
        TOKEN_ENV: token,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",  # loopback only, whatever the environment says
        "PYSPARK_PYTHON": sys.executable,
        "HADOOP_USER_NAME": os.environ.get("HADOOP_USER_NAME", "staged"),
    }
    command = gateway_command(port, metastore_uri, warehouse, master, spark_conf)
    pid = start_background(command, gateway_pid_file(home), log_file(home), env, home)
    return LaunchedGateway(home, port, pid, token, metastore_uri, warehouse)


def _warm_up(info: GatewayInfo) -> None:
    """One client round trip with the token: the server's first query connects it to the
    metastore (~20 s on a loaded machine), which no client should wait for."""
    # Connect's own builder: pyspark's generic one switches this whole process to Connect mode
    # (SPARK_CONNECT_MODE_ENABLED), after which no in-process session can start.
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(info.url).create()
    try:
        session.sql("SHOW DATABASES").collect()
    finally:
        session.stop()


def stop_gateway(home: Path | None = None) -> bool:
    """Stop the gateway recorded under ``home`` (SIGTERM, then SIGKILL); whether one ran."""
    home = (home or staged_home()).resolve()
    pid = read_pid(gateway_pid_file(home))
    gateway_state_file(home).unlink(missing_ok=True)
    token_file(home).unlink(missing_ok=True)
    if pid is None:
        return False
    stop_pid(pid)
    gateway_pid_file(home).unlink(missing_ok=True)
    return True
