"""``MaterializedTableRefreshOperator``: the refresh task of a generated materialized-table DAG.

A refresh is a staged attempt like any other: it gets the same lifecycle binding as the CTAS
operator (commit at the end of ``execute``, abort from the failure/retry callbacks and on
kill), on the catalog of its own staged connection.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException, conf
from airflow.sdk import Asset, Context

from airflow_provider_staged.airflow.callbacks import task_ref
from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.airflow.operators.staged_attempt import StagedAttemptOperator
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.partitions import PartitionNotEndedError
from airflow_provider_staged.materialized.workflow.auto_suspend import SCHEDULER_CONN_ID
from airflow_provider_staged.staging.audits import AuditFailedError


class MaterializedTableRefreshOperator(StagedAttemptOperator):
    """Refresh ``definition`` as the run's params (FLIP-448's refresh call) say.

    :param definition: the parsed definition (the DAG factory passes it); its option
        ``'engine'`` (``embedded`` | ``connect``, default ``[staged] refresh_engine``) says where
        the refresh's Spark runs (``connect``: see ``engine/connect.py``).
    :param zone: time zone of ``scheduleTime`` and of the schedule.
    :param staged_conn_id: the staged connection whose catalog holds the table.
    :param scheduler_conn_id: the Airflow REST API login an auto-suspend uses
        (:mod:`~airflow_provider_staged.materialized.workflow.auto_suspend`).
    """

    ui_color = "#e0ecf8"

    def __init__(
        self,
        *,
        definition: MaterializedTableDefinition,
        zone: str = "UTC",
        staged_conn_id: str = StagedTableHook.default_conn_name,
        scheduler_conn_id: str = SCHEDULER_CONN_ID,
        **kwargs: Any,
    ) -> None:
        # Runs after the abort callback that the base class puts first.
        existing = kwargs.get("on_failure_callback")
        kwargs["on_failure_callback"] = [
            *(existing if isinstance(existing, list) else [existing] if existing else []),
            functools.partial(_count_failure, definition, staged_conn_id, scheduler_conn_id),
        ]
        super().__init__(staged_conn_id=staged_conn_id, **kwargs)
        self.definition = definition
        self.zone = zone

    def execute(self, context: Context) -> dict[str, Any]:
        # Imported when the task runs: DAG parsing must not load the refresh engine (Spark).
        from airflow_provider_staged.engine.runners import make_engine
        from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
        from airflow_provider_staged.materialized.workflow.auto_suspend import record_success

        run_time = context.get("logical_date") or context["dag_run"].run_after
        try:
            request = parse_refresh_request(context["params"], self.definition, run_time, self.zone)
        except PartitionNotEndedError as err:  # the repeated hour of autumn: the next run has it
            raise AirflowSkipException(str(err)) from None
        settings = StagedTableHook(self.staged_conn_id).get_settings()
        # The definition's 'engine' option, else [staged] refresh_engine; engine connect runs on
        # the spark_connect connection [staged] spark_connect_conn_id, else the gateway.
        engine = self.definition.options.get("engine") or conf.get("staged", "refresh_engine",
                                                                   fallback="embedded")
        extra = {"spark_conn_id": conf.get("staged", "spark_connect_conn_id", fallback=None) or None}
        self._engine = make_engine(engine, settings, **(extra if engine == "connect" else {}))
        task = task_ref(context)
        self._staged = staged_refresh(self.definition, request, settings, task, self.staged_conn_id)
        try:
            result = run_refresh(self.definition, request, settings, self._staged, self._engine,
                                 self._killed)
        except AuditFailedError as failed:
            # The same data fails the same EXPECT again: a retry would only quarantine another copy.
            # Failed for good, the failure callback counts it toward auto-suspend as any failure.
            raise AirflowFailException(str(failed)) from failed
        finally:
            self._engine.close()
        try:
            record_success(self.definition, settings.metastore_uri)
        except Exception:  # committed: a failed reset must not fail (and so count) the refresh
            self.log.exception("auto-suspend: cannot reset the failure count of %s",
                               self.definition.identifier)
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(result)
        return result

    def lineage_sql(self) -> str | None:
        return self.definition.query

    def lineage_target(self) -> str:
        return self.definition.identifier.name


def _count_failure(
    definition: MaterializedTableDefinition, staged_conn_id: str, scheduler_conn_id: str, context: Context
) -> None:
    """Final-failure callback: count a failed scheduled refresh, auto-suspend at the limit."""
    from airflow_provider_staged.airflow.callbacks import staged_settings
    from airflow_provider_staged.materialized.workflow.auto_suspend import record_failure

    record_failure(definition, context, staged_settings(staged_conn_id).metastore_uri, scheduler_conn_id)
