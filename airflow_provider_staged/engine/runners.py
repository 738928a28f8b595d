"""Run the staged write job in-process (embedded), through spark-submit (a cluster) or over
Spark Connect (a gateway, ``engine/connect.py``)."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from airflow_provider_staged.engine import spark_job
from airflow_provider_staged.engine.base import Engine, job_env
from airflow_provider_staged.engine.session import (
    build_session,
    hive_conf,
    jars_conf,
    s3_conf,
    spark_submit_env,
)
from airflow_provider_staged.staging.manifest import MANIFEST_NAME
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import warehouse_s3_env

log = logging.getLogger(__name__)


class EmbeddedEngine(Engine):
    """An in-process SparkSession (``local[*]`` by default), reused across tasks of a process."""

    def __init__(
        self,
        settings: StagedSettings,
        spark_conf: dict[str, str] | None = None,
        master: str | None = None,
    ) -> None:
        super().__init__(settings, spark_conf)
        self.master = master or os.environ.get("STAGED_SPARK_MASTER", "local[*]")
        self._group: str | None = None
        self._session: Any = None

    def session(self) -> Any:
        if self._session is None:
            self._session = build_session(
                self.settings.metastore_uri, self.settings.warehouse, self.master, "staged", self.spark_conf
            )
        return self._session

    def run(self, sql: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        spark = self.session()
        self._group = f"staged-{uuid.uuid4().hex[:12]}"
        spark.sparkContext.setJobGroup(self._group, "staged write", interruptOnCancel=True)
        try:
            with job_env(env):
                return spark_job.run_staged_write(spark, sql, spec)
        finally:
            self._group = None

    def cancel(self) -> None:
        if self._session is not None and self._group is not None:
            log.info("cancelling Spark job group %s", self._group)
            self._session.sparkContext.cancelJobGroup(self._group)


class SparkSubmitEngine(Engine):
    """spark-submit of the shipped job script through the Spark provider's ``SparkSubmitHook``.

    The driver runs in client mode next to this task, so the job writes its manifest to a
    local file that this side reads after the submit returns.
    """

    def __init__(
        self,
        settings: StagedSettings,
        spark_conf: dict[str, str] | None = None,
        spark_conn_id: str = "spark_default",
        submit_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(settings, spark_conf)
        self.spark_conn_id = spark_conn_id
        self.submit_kwargs = submit_kwargs or {}
        self._hook: Any = None

    def run(self, sql: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        with tempfile.TemporaryDirectory(prefix="staged-submit-") as workdir:
            manifest_path = Path(workdir) / MANIFEST_NAME
            spec_path = Path(workdir) / "spec.json"
            spec_path.write_text(json.dumps({**spec, "sql": sql, "manifest_path": str(manifest_path)}))
            conf = {
                **jars_conf(),
                **s3_conf(),
                **hive_conf(self.settings.metastore_uri, self.settings.warehouse),
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
                **self.spark_conf,
            }
            self._hook = SparkSubmitHook(
                conn_id=self.spark_conn_id,
                conf=conf,
                name="staged-write",
                application_args=["--spec", str(spec_path)],
                # The warehouse bucket's S3 keys in the job's environment, never on its command line.
                env_vars={**spark_submit_env(), **warehouse_s3_env(self.settings.warehouse), **env},
                **self.submit_kwargs,
            )
            self._hook.submit(application=spark_job.__file__)
            return json.loads(manifest_path.read_text())

    def cancel(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


ENGINES = ("embedded", "spark_submit", "connect")


def check_engine(name: str) -> None:
    """Refuse an engine name that ``make_engine`` would not know (e.g. when a DAG is parsed)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")


def make_engine(name: str, settings: StagedSettings, **kwargs: Any) -> Engine:
    check_engine(name)
    if name == "connect":  # imported on use: Spark Connect's client is slow to import
        from airflow_provider_staged.engine.connect import ConnectEngine

        return ConnectEngine(settings, **kwargs)
    return (EmbeddedEngine if name == "embedded" else SparkSubmitEngine)(settings, **kwargs)
