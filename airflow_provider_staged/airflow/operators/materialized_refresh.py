"""``MaterializedTableRefreshOperator``: the refresh task of a generated materialized-table DAG.

A refresh is a staged attempt like any other: it gets the same lifecycle binding as the CTAS
operator (commit at the end of ``execute``, abort from the failure/retry callbacks and on
kill), on the catalog of its own staged connection.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException, conf
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import Asset, Context

from airflow_provider_staged.airflow.callbacks import task_ref
from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.airflow.operators.staged_attempt import StagedAttemptOperator
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.params import REFRESH_DOWNSTREAM, parse_refresh_request
from airflow_provider_staged.materialized.partitions import PartitionNotEndedError
from airflow_provider_staged.materialized.propagation import (
    conf_for_key,
    event_keys,
    next_input_check,
    not_committed,
)
from airflow_provider_staged.materialized.workflow.auto_suspend import SCHEDULER_CONN_ID
from airflow_provider_staged.staging.audits import AuditFailedError


class UpstreamNotCommittedError(RuntimeError):
    """A periodic refresh's inputs did not commit its partition within 'upstream.wait-timeout'."""


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

    def execute(
        self, context: Context, upstream_deadline: float | None = None, event: Any = None
    ) -> dict[str, Any]:
        """Refresh; ``upstream_deadline`` (epoch seconds) when it resumes from waiting for its
        inputs (deferred: no worker slot held meanwhile), ``event`` the trigger's."""
        # Imported when the task runs: DAG parsing must not load the refresh engine (Spark).
        from airflow_provider_staged.engine.runners import make_engine
        from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
        from airflow_provider_staged.materialized.workflow.auto_suspend import record_success

        dag_run = context["dag_run"]
        run_time = context.get("logical_date") or dag_run.run_after
        params = context["params"]
        # Airflow 3.3: a run that an upstream table's commit started carries that partition.
        upstream_key = getattr(dag_run, "partition_key", None)
        if upstream_key is not None:
            params = conf_for_key(params, upstream_key, self.definition.partition_by)
        try:
            request = parse_refresh_request(params, self.definition, run_time, self.zone)
        except PartitionNotEndedError as err:  # the repeated hour of autumn: the next run has it
            raise AirflowSkipException(str(err)) from None
        settings = StagedTableHook(self.staged_conn_id).get_settings()
        if request.is_periodic and request.partition_spec and upstream_key is None:
            self._wait_for_inputs(request.partition_spec, settings.metastore_uri, upstream_deadline)
        # The definition's 'engine' option, else [staged] refresh_engine; engine connect runs on
        # the spark_connect connection [staged] spark_connect_conn_id, else the gateway.
        engine = self.definition.options.get("engine")
        source = "the definition's 'engine' option"
        if not engine:
            engine = conf.get("staged", "refresh_engine", fallback="embedded")
            source = "[staged] refresh_engine"
        self.log.info("refresh engine %s (from %s)", engine, source)
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
        keys = event_keys(self.definition.partition_by, request.partition_spec,
                          periodic=request.is_periodic, refresh_downstream=request.refresh_downstream,
                          triggered_by_inputs=upstream_key is not None)
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                accessor = context["outlet_events"][outlet]
                accessor.extra = dict(result)
                self._tell_downstream(accessor, keys)
        return result

    def _wait_for_inputs(self, spec: Mapping[str, str], metastore_uri: str, deadline: float | None) -> None:
        """A table with a schedule of its own refreshes a period once the materialized tables it
        reads have committed it: wait (bounded), then fail or skip the period, before any
        attempt begins or Spark starts. A long wait is deferred (a timer in the triggerer: no
        worker slot held); its last minute is polled here (``propagation.next_input_check``)."""
        from airflow_provider_staged.materialized.refresh import uncommitted_inputs

        missing = uncommitted_inputs(self.definition, spec, metastore_uri)
        timeout = self.definition.upstream_wait.total_seconds()
        while (left := missing() if missing is not None else []):
            now = time.time()
            if deadline is None:
                deadline = now + timeout
                self.log.info("The materialized tables %s reads have not committed %s (%s): waiting up "
                              "to %gs", self.definition.identifier, dict(spec), ", ".join(left), timeout)
            if now >= deadline:
                why = not_committed(self.definition.identifier.name, spec, left, timeout,
                                    self.definition.skip_missing_upstream)
                if self.definition.skip_missing_upstream:
                    raise AirflowSkipException(why)
                raise UpstreamNotCommittedError(why)
            deferred, seconds = next_input_check(deadline - now)
            if deferred:
                self.log.info("Deferred for %gs (no worker slot held), then checking again", seconds)
                moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
                self.defer(trigger=DateTimeTrigger(moment=moment), method_name="execute",
                           kwargs={"upstream_deadline": deadline})
            time.sleep(seconds)

    def _tell_downstream(self, accessor: Any, keys: list[str]) -> None:
        """Put the committed partition on the asset event, as the key the FRESHNESS = DOWNSTREAM
        tables reading this one are scheduled on (:mod:`...materialized.propagation`)."""
        add_partitions = getattr(accessor, "add_partitions", None)  # Airflow 3.3
        if keys and add_partitions is not None:
            add_partitions(keys)
            self.log.info("Tables downstream follow: the asset event carries partition key %s", keys[0])
        else:
            self.log.info("Tables downstream do not follow this refresh (a one-time refresh without "
                          "%s, or an Airflow without partitioned asset events)", REFRESH_DOWNSTREAM)

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
