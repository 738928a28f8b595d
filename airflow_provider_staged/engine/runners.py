"""Run the staged write job in-process (embedded), through spark-submit (a cluster) or over
Spark Connect (a gateway, ``engine/connect.py``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from airflow_provider_staged.engine import spark_job
from airflow_provider_staged.engine.base import Engine, job_env
from airflow_provider_staged.engine.session import (
    build_session,
    hive_conf,
    jars_conf,
    master_on_this_host,
    s3_conf,
    spark_submit_env,
)
from airflow_provider_staged.staging.manifest import MANIFEST_NAME
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.storage_paths import JOBS_DIR
from airflow_provider_staged.storage import files
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

    The job's spec and its manifest travel through the warehouse (``<warehouse>/_staged_jobs/
    <attempt id>/``), never through this host's disk, so the driver may run anywhere: client
    or cluster deploy mode, as the Spark connection says. Where Python runs and which address
    the driver binds also come from the connection (extras ``pyspark_python``,
    ``pyspark_driver_python``); this worker's interpreter and loopback are the defaults only
    where the driver and executors run on this host (a ``local`` or loopback master, client
    mode).
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

        job_dir = files.join(self.settings.warehouse, JOBS_DIR, spec.get("attempt_id") or uuid.uuid4().hex)
        spec_location, manifest_location = f"{job_dir}/spec.json", f"{job_dir}/{MANIFEST_NAME}"
        files.write_text(spec_location, json.dumps({**spec, "sql": sql, "manifest_path": manifest_location}))
        try:
            conf = {
                **s3_conf(),
                **hive_conf(self.settings.metastore_uri, self.settings.warehouse),
                **self.spark_conf,
            }
            self._hook = SparkSubmitHook(
                conn_id=self.spark_conn_id,
                conf=conf,
                name="staged-write",
                application_args=["--spec", spec_location],
                **self.submit_kwargs,
            )
            target = SubmitTarget.of(self._hook)
            self._hook._conf = {**target.python_conf(), **jars_conf(target.on_this_host), **conf}
            # The warehouse bucket's S3 keys go in the environment of a spark-submit process here;
            # on YARN and Kubernetes the hook would put the environment on the command line, and
            # the cluster's own S3 credentials apply.
            on_cluster_manager = self._hook._is_kubernetes or self._hook._is_yarn
            self._hook._env_vars = {
                **(spark_submit_env() if target.on_this_host else {}),
                **({} if on_cluster_manager else warehouse_s3_env(self.settings.warehouse)),
                **env,
            }
            self._hook.submit(application=spark_job.__file__)
            return json.loads(files.read_text(manifest_location))
        finally:
            files.delete_dir(job_dir)

    def cancel(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


@dataclass(frozen=True)
class SubmitTarget:
    """Where a submitted job's driver and executors run, from the hook's resolved connection."""

    master: str
    deploy_mode: str
    extra: dict[str, Any]

    @classmethod
    def of(cls, hook: Any) -> SubmitTarget:
        connection = hook._connection  # what the hook itself resolved from the Spark connection
        extra = {}
        with contextlib.suppress(Exception):  # a connection given only by its master has no extras
            extra = hook.get_connection(hook._conn_id).extra_dejson
        return cls(connection["master"], connection.get("deploy_mode") or "client", extra)

    @property
    def on_this_host(self) -> bool:
        """Driver and executors on this host: this interpreter and loopback are theirs too."""
        if self.deploy_mode == "cluster":
            return False
        return master_on_this_host(self.master)

    def python_conf(self) -> dict[str, str]:
        conf = {
            "spark.pyspark.python": self.extra.get("pyspark_python"),
            "spark.pyspark.driver.python": self.extra.get("pyspark_driver_python"),
        }
        if self.deploy_mode == "client":
            conf["spark.pyspark.driver.python"] = conf["spark.pyspark.driver.python"] or sys.executable
        if self.on_this_host:
            conf["spark.pyspark.python"] = conf["spark.pyspark.python"] or sys.executable
        return {key: value for key, value in conf.items() if value}


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
