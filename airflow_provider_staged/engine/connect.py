"""The ``connect`` engine: the staged write job over Spark Connect, on a warm gateway.

The job's Spark work (the query and the Parquet write into the attempt's staging location)
runs in the server's Spark; everything else stays here, in the task: the staged attempt,
the manifest and the commit, on the same path as the other engines. The manifest is built
from the written files' Parquet footers, read here: the server and this side must share the
staging storage (the local filesystem of one machine here, or a shared filesystem / object
store reachable from both at the same path).

The server is, in this order: the Spark provider's ``spark_connect`` connection
``spark_conn_id`` (``SparkConnectHook``), the URL in ``STAGED_GATEWAY_URL``, or the gateway that
``staged gateway start`` runs under ``$STAGED_HOME``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Any
from urllib.parse import urlparse

from airflow_provider_staged.discovery.embedded import require_gateway
from airflow_provider_staged.engine import spark_job
from airflow_provider_staged.engine.base import Engine, job_env
from airflow_provider_staged.staging.errors import ServiceError
from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

GATEWAY_URL_ENV = "STAGED_GATEWAY_URL"
# How long a cancel waits for the interrupted write to end before the abort deletes its staging
# location. The server stops an interrupted job's tasks within a second or so; when on_kill runs
# in the SIGTERM handler, the thread running the write cannot return before the handler does,
# and this is only that grace period (on_kill's whole budget is 30 s).
CANCEL_WAIT_SECONDS = 5.0


def server_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of an ``sc://host:port/;params`` URL; a clear error naming a bad one."""
    parsed = urlparse(url)
    try:
        port = parsed.port or 15002  # Spark Connect's default port
    except ValueError:
        port = None
    if parsed.scheme != "sc" or not parsed.hostname or port is None:
        shown = url.split(";", 1)[0]  # never show a token
        raise ValueError(f"invalid Spark Connect URL {shown!r}: expected sc://host:port/[;token=...]")
    return parsed.hostname, port


def public_url(url: str) -> str:
    """``url`` without its parameters (a token): what a log line or an error may show."""
    return url.split(";", 1)[0].rstrip("/")


def resolve_url(spark_conn_id: str | None = None, url: str | None = None) -> str:
    """The server's URL: ``url``, the ``spark_connect`` connection, the environment, or the
    local gateway (see the module's docstring)."""
    if url:
        return url
    if spark_conn_id:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkConnectHook(spark_conn_id).get_connection_url()
    if os.environ.get(GATEWAY_URL_ENV):
        return os.environ[GATEWAY_URL_ENV]
    return require_gateway().url


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail at once, naming the server, when nothing listens there (the Connect client itself
    would retry for minutes)."""
    host, port = server_address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as err:
        raise ServiceError(
            f"Spark Connect server {public_url(url)} is not reachable ({err.strerror or err}): "
            "start one with `staged gateway start`, or check the spark_connect connection"
        ) from None


def session_conf(spark_conf: dict[str, str]) -> dict[str, str]:
    """The part of ``spark_conf`` a remote session can take: SQL settings, set per session on
    the server (the job restores them). Others (memory, cores, jars) belong to the server's
    own start and are left out, with a warning naming them."""
    kept = {key: value for key, value in spark_conf.items() if key.startswith("spark.sql.")}
    if len(kept) < len(spark_conf):
        log.warning("engine connect: %s apply to the server's start, not to a build; left out",
                    sorted(set(spark_conf) - set(kept)))
    return kept


class ConnectEngine(Engine):
    """The staged write job on a Spark Connect server; ``cancel`` interrupts it there.

    One remote session per engine (so a warm server answers at once); ``close`` releases it.
    """

    def __init__(
        self,
        settings: StagedSettings,
        spark_conf: dict[str, str] | None = None,
        spark_conn_id: str | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(settings, spark_conf)
        self.url = resolve_url(spark_conn_id, url)
        self._session: Any = None
        self._tag: str | None = None
        self._idle = threading.Event()
        self._idle.set()

    def session(self) -> Any:
        if self._session is None:
            check_reachable(self.url)
            # Connect's own builder: pyspark's generic one would switch the process to Connect.
            from pyspark.sql.connect.session import SparkSession

            log.info("connecting to Spark Connect server %s", public_url(self.url))
            # No call to the server here (asking its version cost a round trip on a trigger's
            # path): the job's first call makes the server's side of the session.
            self._session = SparkSession.builder.remote(self.url).create()
        return self._session

    def run(self, sql: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        spark = self.session()
        tag = f"staged-{uuid.uuid4().hex[:12]}"
        spark.addTag(tag)
        self._tag = tag
        self._idle.clear()
        try:
            sql_conf = {**session_conf(self.spark_conf), **(spec.get("sql_conf") or {})}
            with job_env(env):
                return spark_job.run_staged_write(spark, sql, {**spec, "sql_conf": sql_conf})
        finally:
            self._tag = None
            spark.removeTag(tag)
            self._idle.set()

    def cancel(self) -> None:
        """Interrupt this engine's operations on the server, and wait until the write ended
        there, so that the abort that follows deletes a location nobody writes to."""
        tag, session = self._tag, self._session
        if tag is None or session is None:
            return
        log.info("interrupting Spark Connect operations tagged %s on %s", tag, public_url(self.url))
        interrupted = session.interruptTag(tag)
        log.info("interrupted operations: %s", interrupted)
        if not self._idle.wait(CANCEL_WAIT_SECONDS):
            log.warning("the interrupted write did not end within %.0f s", CANCEL_WAIT_SECONDS)

    def close(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None
