"""``StagedCreateTableAsOperator``: CTAS / RTAS on Spark that readers see all-or-nothing.

The task lifecycle is the job-status hook: begin when ``execute`` starts, commit at the end
of ``execute`` (before Airflow records success, so a failed commit fails the task), abort on
failure inside ``execute``, in ``on_failure_callback`` / ``on_retry_callback`` (zombies,
timeouts) and on ``on_kill`` (SIGTERM), after which the task is made to fail.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context, conf
from airflow.sdk.exceptions import AirflowException

from airflow_provider_staged.engine.runners import Engine, make_engine
from airflow_provider_staged.hooks.staged_table import StagedTableHook
from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.lifecycle import abort_task_attempts, task_ref
from airflow_provider_staged.settings import StagedSettings, parse_bool
from airflow_provider_staged.staging.api import StagingContext, StagingJobStatusHook, StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.targets import asset_uri, is_jdbc, resolve_sink


class TaskKilledError(AirflowException):
    """The task was killed (SIGTERM, timeout, mark-failed) while the staged job ran."""


class StagedCreateTableAsOperator(BaseOperator):
    """Build ``target`` from ``sql`` atomically.

    :param target: ``database.table`` in the Hive Metastore, or ``jdbc://<conn id>/<schema>.<table>``.
    :param sql: a Spark SQL query (or a ``.sql`` file) producing the table's rows.
    :param purpose: ``create`` | ``create_if_not_exists`` | ``replace`` | ``create_or_replace``.
    :param atomic: stage and commit (default: the connection's ``atomic`` extra, else
        ``[staged] atomicity_enabled``); False runs the plain create-then-insert path.
    :param engine: ``embedded`` (in-process Spark) or ``spark_submit`` (a cluster through
        the Spark provider's ``SparkSubmitHook`` and ``spark_conn_id``).
    :param partition_by: partition columns of a Hive target.
    :param spark_conf: Spark settings for this build.
    """

    template_fields: Sequence[str] = ("target", "sql", "spark_conf")
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers = {"sql": "sql", "spark_conf": "json"}
    ui_color = "#e8f4e0"

    def __init__(
        self,
        *,
        target: str,
        sql: str,
        purpose: str = "create",
        atomic: bool | None = None,
        engine: str = "embedded",
        staged_conn_id: str = StagedTableHook.default_conn_name,
        spark_conn_id: str = "spark_default",
        partition_by: Sequence[str] | None = None,
        spark_conf: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.purpose = StagingPurpose.parse(purpose).value
        if "{{" not in target and "outlets" not in kwargs:
            kwargs["outlets"] = [Asset(uri=asset_uri(target, staged_conn_id), name=target)]
        kwargs["on_failure_callback"] = _prepend(abort_task_attempts, kwargs.get("on_failure_callback"))
        kwargs["on_retry_callback"] = _prepend(abort_task_attempts, kwargs.get("on_retry_callback"))
        super().__init__(**kwargs)
        self.target = target
        self.sql = sql
        self.atomic = atomic
        self.engine = engine
        self.staged_conn_id = staged_conn_id
        self.spark_conn_id = spark_conn_id
        self.partition_by = list(partition_by or [])
        self.spark_conf = spark_conf or {}
        self._engine: Engine | None = None
        self._staged: JournaledStagedTable | None = None
        self._killed = threading.Event()

    def _is_atomic(self, settings: StagedSettings) -> bool:
        if self.atomic is not None:
            return parse_bool(self.atomic, "atomic")
        if not settings.atomic:
            return False
        return conf.getboolean("staged", "atomicity_enabled", fallback=True)

    def _make_engine(self, settings: StagedSettings) -> Engine:
        kwargs: dict[str, Any] = {"spark_conf": self.spark_conf}
        if self.engine == "spark_submit":
            kwargs["spark_conn_id"] = self.spark_conn_id
        return make_engine(self.engine, settings, **kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        settings = StagedTableHook(self.staged_conn_id).get_settings()
        self._engine = self._make_engine(settings)
        if not self._is_atomic(settings):
            return self._execute_non_atomic()
        sink = resolve_sink(self.target, settings, task_ref(context))
        staged = sink.apply_staging(StagingContext(StagingPurpose.parse(self.purpose)))
        if self.partition_by and is_jdbc(self.target):
            raise ValueError(f"partition_by={self.partition_by!r} is for Hive targets, not {self.target}")
        self._staged = staged
        status = StagingJobStatusHook(staged)
        job_id = staged.attempt_id
        status.on_created(job_id)
        if staged.skipped:
            self.log.info("%s exists and purpose is create_if_not_exists: nothing to do", self.target)
            return {"target": self.target, "skipped": True}
        spec = {**staged.write_spec(), "partition_by": self.partition_by}
        self.log.info("staged attempt %s writes into %s", job_id, staged.location)
        try:
            with _Heartbeat(staged, settings.attempt_ttl_seconds):
                manifest = self._engine.run(self.sql, spec, staged.job_env())
                self._raise_if_killed()
                staged.written(manifest)
                self._raise_if_killed()
                status.on_finished(job_id)
        except BaseException as error:
            if self._killed.is_set():
                status.on_canceled(job_id)
            else:
                self._abort_quietly(status, job_id, error)
            raise
        if staged.skipped:
            return {"target": self.target, "skipped": True}
        return self._report(context, staged, manifest)

    def _abort_quietly(self, status: StagingJobStatusHook, job_id: str, error: BaseException) -> None:
        try:
            status.on_failed(job_id, error)
        except Exception:
            # Keep the original error; the callbacks, reconcile or the TTL sweep retry the abort.
            self.log.exception("abort of %s failed; left to the sweep", job_id)

    def _raise_if_killed(self) -> None:
        if self._killed.is_set():
            raise TaskKilledError(f"task was killed while building {self.target}")

    def _report(
        self, context: Context, staged: JournaledStagedTable, manifest: dict[str, Any]
    ) -> dict[str, Any]:
        files = manifest.get("files", [])
        result = {
            "target": self.target,
            "version": staged.attempt_id,
            "location": staged.location,
            "rows": manifest.get("rows", sum(f["rows"] for f in files)),
            "bytes": manifest.get("bytes", sum(f["bytes"] for f in files)),
            "files": len(files),
        }
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(result)
        self.log.info("committed %s: %s", self.target, result)
        return result

    def _execute_non_atomic(self) -> dict[str, Any]:
        if is_jdbc(self.target):
            raise ValueError(f"atomic=False is only implemented for Hive targets, not {self.target}")
        identifier = TableIdentifier.parse(self.target)
        self.log.warning("atomicity disabled: %s is created first and then filled (not atomic)", identifier)
        spec = {"format": "table", "table": identifier.quoted, "table_name": identifier.name,
                "purpose": self.purpose}
        assert self._engine is not None
        return {"target": self.target, **self._engine.run(self.sql, spec, {}), "atomic": False}

    def on_kill(self) -> None:
        self._killed.set()
        if self._engine is not None:
            self._engine.cancel()
        if self._staged is not None:
            try:
                self._staged.abort("task killed")
            except Exception:
                self.log.exception("abort on kill failed; left to the sweep")


class _Heartbeat:
    """Refresh the attempt's heartbeat while the job runs, so only dead attempts expire."""

    def __init__(self, staged: JournaledStagedTable, ttl_seconds: float) -> None:
        self.staged = staged
        self.interval = max(1.0, min(30.0, ttl_seconds / 4))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="staged-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            self.staged.journal.heartbeat(self.staged.attempt_id)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _prepend(callback: Any, existing: Any) -> list[Any]:
    if existing is None:
        return [callback]
    return [callback, *(existing if isinstance(existing, list) else [existing])]
