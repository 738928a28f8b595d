"""``StagedCreateTableAsOperator``: CTAS / RTAS on Spark that readers see all-or-nothing.

The task lifecycle is the job-status hook: begin when ``execute`` starts, commit at the end
of ``execute`` (before Airflow records success, so a failed commit fails the task), abort on
failure inside ``execute``, in ``on_failure_callback`` / ``on_retry_callback`` (zombies,
timeouts) and on ``on_kill`` (SIGTERM), after which the task is made to fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, conf
from airflow.sdk import Asset, Context

from airflow_provider_staged.airflow.callbacks import task_ref
from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.airflow.operators.staged_attempt import StagedAttemptOperator
from airflow_provider_staged.airflow.operators.targets import is_jdbc, resolve_sink, target_asset
from airflow_provider_staged.engine.base import Engine
from airflow_provider_staged.engine.execution import execute_staged
from airflow_provider_staged.engine.runners import check_engine, make_engine
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.audits import AuditFailedError, AuditSuite, Expectation, coerce_audits
from airflow_provider_staged.staging.identifiers import TableIdentifier, validate_name
from airflow_provider_staged.staging.kinds.hive_partitions import staged_hive_table
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_ttl import TTL_OPTIONS, parse_ttl
from airflow_provider_staged.staging.settings import StagedSettings, parse_bool


class StagedCreateTableAsOperator(StagedAttemptOperator):
    """Build ``target`` from ``sql`` atomically.

    :param target: ``database.table`` in the Hive Metastore, or ``jdbc://<conn id>/<schema>.<table>``.
    :param sql: a Spark SQL query (or a ``.sql`` file) producing the table's rows.
    :param purpose: ``create`` | ``create_if_not_exists`` | ``replace`` | ``create_or_replace``.
    :param atomic: stage and commit (default: the connection's ``atomic`` extra, else
        ``[staged] atomicity_enabled``); False runs the plain create-then-insert path.
    :param engine: ``embedded`` (in-process Spark), ``spark_submit`` (a cluster through
        the Spark provider's ``SparkSubmitHook`` and ``spark_conn_id``, default
        ``spark_default``) or ``connect`` (a Spark Connect server, e.g. the gateway: the
        ``spark_connect`` connection ``spark_conn_id``, else ``STAGED_GATEWAY_URL``, else the
        local ``staged gateway``); staging, manifest and commit stay in the task.
    :param partition_by: partition columns of a Hive target.
    :param spark_conf: Spark settings for this build.
    :param jdbc_options: for a JDBC target, ``JdbcWriteOptions`` by name, e.g.
        ``{"batch_size": 5000, "num_partitions": 4, "count_rows": True}``.
    :param table_options: partition TTL of a partitioned Hive target, with Paimon's names
        (``{"partition.expiration-time": "30 d"}``, see ``partition_ttl``), stored as table
        parameters; such a table's partitions are tracked by the catalog, so that an expired
        one is dropped in one metastore call.
    :param openlineage_inject_parent_job_info: with ``engine="spark_submit"``, pass this task's
        OpenLineage job and run to the job (``spark.openlineage.parentJobName``, ``parentRunId``,
        ``parentJobNamespace`` and the root's) so that openlineage-spark's events name the task
        as their parent; default ``[openlineage] spark_inject_parent_job_info``, as for the Spark
        provider's ``SparkSubmitOperator``. Settings already in ``spark_conf`` win.
    :param audits: expectations checked on the staged version before it is published
        (``staging.audits``): ``RowExpectation``, ``TableExpectation``, ``RowCountChange``,
        ``unique`` objects, or the common SQL provider's check vocabulary as dicts
        (``{"column_mapping": {...}}`` as ``SQLColumnCheckOperator`` takes it, ``{"checks": {...}}``
        as ``SQLTableCheckOperator``; optional ``"mode"``). Checked when the DAG file is parsed.
        A failed ``fail`` audit fails the task and keeps the version quarantined
        (``staged audits show``/``staged publish``); Hive targets only.
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
        spark_conn_id: str | None = None,
        partition_by: Sequence[str] | None = None,
        spark_conf: dict[str, str] | None = None,
        jdbc_options: Mapping[str, Any] | None = None,
        table_options: Mapping[str, str] | None = None,
        openlineage_inject_parent_job_info: bool | None = None,
        audits: Sequence[Expectation | Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        self.purpose = StagingPurpose.parse(purpose).value
        suite = coerce_audits(audits)  # a bad audit fails the DAG file, naming it and the position
        if suite and is_jdbc(target):
            raise ValueError(f"audits are for Hive targets (not yet wired for jdbc://), not {target!r}")
        # Plain dicts: what Airflow keeps of an operator serializes and copies without our classes.
        self.audits = suite.to_list()
        check_engine(engine)
        partition_by = [validate_name(column, "partition column") for column in partition_by or []]
        self.table_options = _checked_table_options(table_options, target, partition_by)
        if jdbc_options:
            if "{{" not in target and not is_jdbc(target):
                raise ValueError(f"jdbc_options are for jdbc:// targets, not {target!r}")
            from airflow_provider_staged.staging.kinds.jdbc_table import JdbcWriteOptions

            JdbcWriteOptions.from_mapping(jdbc_options)  # a bad option fails the DAG file, naming it
        if "{{" not in target and "outlets" not in kwargs:
            kwargs["outlets"] = [target_asset(target, staged_conn_id)]
        super().__init__(staged_conn_id=staged_conn_id, **kwargs)
        self.target = target
        self.sql = sql
        self.atomic = atomic
        self.engine = engine
        self.spark_conn_id = spark_conn_id
        self.partition_by = partition_by
        self.spark_conf = spark_conf or {}
        self.jdbc_options = dict(jdbc_options or {})
        if openlineage_inject_parent_job_info is None:
            openlineage_inject_parent_job_info = conf.getboolean(
                "openlineage", "spark_inject_parent_job_info", fallback=False
            )
        self.openlineage_inject_parent_job_info = openlineage_inject_parent_job_info

    def _is_atomic(self, settings: StagedSettings) -> bool:
        if self.atomic is not None:
            return parse_bool(self.atomic, "atomic")
        if not settings.atomic:
            return False
        return conf.getboolean("staged", "atomicity_enabled", fallback=True)

    def _make_engine(self, settings: StagedSettings, context: Context) -> Engine:
        kwargs: dict[str, Any] = {"spark_conf": self.spark_conf}
        if self.engine == "spark_submit":
            kwargs["spark_conn_id"] = self.spark_conn_id or "spark_default"
            if self.openlineage_inject_parent_job_info:
                from airflow.providers.common.compat.openlineage.utils.spark import (
                    inject_parent_job_information_into_spark_properties,
                )

                merged = {**settings.spark_conf, **self.spark_conf}
                kwargs["spark_conf"] = inject_parent_job_information_into_spark_properties(merged, context)
        elif self.engine == "connect":
            kwargs["spark_conn_id"] = self.spark_conn_id
        return make_engine(self.engine, settings, **kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        settings = StagedTableHook(self.staged_conn_id).get_settings()
        self._engine = self._make_engine(settings, context)
        try:
            return self._build(context, settings)
        finally:
            self._engine.close()

    def _build(self, context: Context, settings: StagedSettings) -> dict[str, Any]:
        if not self._is_atomic(settings):
            return self._execute_non_atomic()
        if self.partition_by and is_jdbc(self.target):
            raise ValueError(f"partition_by={self.partition_by!r} is for Hive targets, not {self.target}")
        task, purpose = task_ref(context), StagingPurpose.parse(self.purpose)
        if not is_jdbc(self.target):
            options = self.table_options or None  # none: the table keeps its own
            self._staged = staged_hive_table(TableIdentifier.parse(self.target), purpose, settings, task,
                                             self.partition_by, options, self.staged_conn_id)
            self._staged.audits = AuditSuite.from_list(self.audits)
        else:
            sink = resolve_sink(self.target, settings, task, self.jdbc_options, self.staged_conn_id)
            self._staged = sink.apply_staging(StagingContext(purpose))
        try:
            manifest = execute_staged(
                self._staged,
                self._engine,
                self.sql,
                {"partition_by": self.partition_by},
                settings.attempt_ttl_seconds,
                self._killed,
            )
        except AuditFailedError as failed:
            # The same data fails the same audits again: a retry would only quarantine another copy.
            raise AirflowFailException(str(failed)) from failed
        if manifest is None:
            return {"target": self.target, "skipped": True}
        return self._report(context, self._staged, manifest)

    def _report(self, context: Context, staged: JournaledStagedTable, manifest: Manifest) -> dict[str, Any]:
        result = {
            "target": self.target,
            "version": staged.attempt_id,
            "location": staged.location,
            # None for a JDBC build that did not count (JdbcWriteOptions.count_rows).
            "rows": manifest.rows,
            "bytes": manifest.bytes,
            "files": len(manifest.files),
        }
        record = staged.journal.get(staged.attempt_id)
        audited = (record.audits or {}).get("results") if record is not None else None
        if audited:
            # Outcomes only: sample rows stay in the journal (`staged audits show`), out of events.
            shown = ("name", "kind", "mode", "passed", "failing", "value")
            result["audits"] = [{key: item[key] for key in shown} for item in audited]
            result["dropped_rows"] = manifest.dropped_rows
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(result)
        self.log.info("committed %s: %s", self.target, result)
        return result

    def lineage_sql(self) -> str | None:
        return self.sql

    def lineage_target(self) -> str:
        return self.target

    def _execute_non_atomic(self) -> dict[str, Any]:
        if is_jdbc(self.target):
            raise ValueError(f"atomic=False is only implemented for Hive targets, not {self.target}")
        if self.audits:
            raise ValueError(f"audits need an atomic build of {self.target}: atomic=False stages nothing")
        identifier = TableIdentifier.parse(self.target)
        self.log.warning("atomicity disabled: %s is created first and then filled (not atomic)", identifier)
        spec = {"format": "table", "table": identifier.quoted, "table_name": identifier.name,
                "purpose": self.purpose}
        assert self._engine is not None
        return {"target": self.target, **self._engine.run(self.sql, spec, {}), "atomic": False}


def _checked_table_options(
    options: Mapping[str, str] | None, target: str, partition_by: Sequence[str] | None
) -> dict[str, str]:
    """``table_options`` checked when the DAG file is parsed: a bad one names itself."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(TTL_OPTIONS))
    if unknown:
        raise ValueError(f"unknown table option(s) {unknown}: known {list(TTL_OPTIONS)}")
    if options and is_jdbc(target):
        raise ValueError(f"table_options are for Hive targets, not {target!r}")
    parse_ttl(options, partition_by or [])
    return options
