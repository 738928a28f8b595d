"""``MaterializedTableContinuousOperator``: the task of a CONTINUOUS materialized table's DAG.

The DAG is ``@continuous`` with one active run: its task runs the table's streaming refresh
(:mod:`airflow_provider_staged.materialized.continuous_run`) for as long as the table is active
and reports every micro-batch (batch id, rows, rows/s, lag) in its log. Airflow's supervisor
heartbeats the task; the task itself watches, every ``poll_seconds``:

- the query: if it dies, the task fails and the next run (``@continuous`` starts one at once)
  resumes from the checkpoint;
- SUSPEND: Airflow 3.3 leaves a running task alone when its DAG is paused, so the task reads
  the DAG's ``is_paused`` through the REST API (the login auto-suspend uses) and stops the
  query gracefully, keeping the checkpoint; the run succeeds and the paused DAG starts no
  other. RESUME unpauses: the next run continues from the checkpoint;
- a one-time refresh queued behind it (``staticPartitions``: Flink's batch overwrite of those
  partitions; ``max_active_runs=1`` keeps it queued): the stream stops (checkpoint kept), the
  run ends, the queued run overwrites the partitions (the base class's staged refresh, reading
  the source files the stream has committed: ``staging.kinds.continuous_partitions``) and
  queues the stream's next run, which resumes from the checkpoint (seen on Airflow 3.3: after a
  manual run that was queued while the stream's run ended, no next ``@continuous`` run came
  within 2 minutes, as after a pause: ``MaterializedTables._restart_stream``);
- ``on_kill`` (DROP fails the run, a timeout or a user marks it): the query stops gracefully.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk import Context

from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.airflow.operators.materialized_refresh import MaterializedTableRefreshOperator
from airflow_provider_staged.materialized.continuous import one_time_refresh_refused
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.workflow.auto_suspend import SCHEDULER_CONN_ID

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings


class MaterializedTableContinuousOperator(MaterializedTableRefreshOperator):
    """Run ``definition``'s streaming refresh until the table is suspended or dropped; a run
    with partition values is a one-time batch overwrite of those partitions instead.

    :param poll_seconds: how often the task checks the query, the pause and queued refreshes.
    """

    ui_color = "#d7f0e0"

    def __init__(
        self, *, poll_seconds: float = 5.0, scheduler_conn_id: str = SCHEDULER_CONN_ID, **kwargs: Any
    ) -> None:
        super().__init__(scheduler_conn_id=scheduler_conn_id, **kwargs)
        self.scheduler_conn_id = scheduler_conn_id
        self.poll_seconds = poll_seconds
        self._refresh: Any = None

    def execute(self, context: Context) -> dict[str, Any]:
        run_time = context.get("logical_date") or context["dag_run"].run_after
        request = parse_refresh_request(context["params"], self.definition, run_time, self.zone)
        if not request.is_periodic:
            why = one_time_refresh_refused(self.definition.identifier, self.definition.query,
                                           request.partition_spec)
            if why:
                raise AirflowFailException(why)
            self.log.info("one-time refresh of %s (partitions %s): a batch overwrite beside the stream",
                          self.definition.identifier, dict(request.partition_spec))
            try:
                return super().execute(context)
            finally:
                self._watcher(context, StagedTableHook(self.staged_conn_id).get_settings()).queue_stream()
        return self._stream(context)

    def _watcher(self, context: Context, settings: StagedSettings) -> _Watcher:
        from airflow_provider_staged.materialized.catalog_status import CatalogStatusStore

        status = CatalogStatusStore(settings.metastore_uri).load(self.definition.identifier,
                                                                 self.definition.source_path)
        return _Watcher(self, self.definition, status, context["dag_run"].dag_id)

    def _stream(self, context: Context) -> dict[str, Any]:
        # Imported when the task runs: DAG parsing must not load Spark.
        from airflow_provider_staged.engine.runners import EmbeddedEngine
        from airflow_provider_staged.materialized.continuous_run import ContinuousRefresh

        settings = StagedTableHook(self.staged_conn_id).get_settings()
        definition = self.definition
        watcher = self._watcher(context, settings)
        self._engine = EmbeddedEngine(settings)
        refresh = ContinuousRefresh(definition, settings, self._engine.session())
        self._refresh = refresh
        refresh.start()
        try:
            while True:
                if self._killed.wait(self.poll_seconds):
                    raise AirflowException(f"continuous refresh of {definition.identifier} killed")
                progress = refresh.report()
                why = watcher.reason_to_stop()
                if why:
                    break
        except BaseException:
            refresh.stop("failed")
            raise
        refresh.stop()
        self.log.info("continuous refresh of %s stopped: %s; the next run continues from the checkpoint",
                      definition.identifier, why)
        return {"target": definition.identifier.name, "stopped": why, "last_batch": progress.batch_id,
                "lag_seconds": progress.lag_seconds()}

    def on_kill(self) -> None:
        """Stop the query gracefully (the checkpoint stays); ``execute`` then raises."""
        self._killed.set()
        if self._refresh is not None:
            worker = threading.Thread(target=self._refresh.stop, args=("stopped",), name="stream-stop",
                                      daemon=True)
            worker.start()
            worker.join(timeout=30)
        else:
            super().on_kill()


class _Watcher:
    """The REST API checks of the running task: DAG paused (or gone)? a one-time refresh queued
    behind it?

    A REST failure is logged and the stream goes on: a flaky API must not stop a healthy query.
    """

    def __init__(
        self, operator: MaterializedTableContinuousOperator, definition: Any, status: Any, dag_id: str
    ) -> None:
        from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowRefreshHandler
        from airflow_provider_staged.materialized.workflow.auto_suspend import api_scheduler

        self.log = operator.log
        self.definition = definition
        self.zone = operator.zone
        self.scheduler = api_scheduler(definition, status, operator.scheduler_conn_id)
        self.handler = AirflowRefreshHandler(dag_id, self.scheduler.endpoint)
        self.opened = False

    def reason_to_stop(self) -> str | None:
        from airflow_client.client.api.dag_run_api import DagRunApi

        try:
            if not self.opened:
                self.scheduler.open()
                self.opened = True
            dag = self.scheduler.get_dag(self.handler)
            if dag is None or dag.is_paused:
                return "the table is suspended (DAG paused)" if dag else "the DAG is gone"
            runs = DagRunApi(self.scheduler.client)
            for run in runs.get_dag_runs(self.handler.dag_id, state=["queued"], limit=5).dag_runs:
                if self._one_time(run.conf):
                    return f"one-time refresh {run.dag_run_id} is queued behind this run"
        except Exception as err:  # any API trouble: keep streaming, try again at the next poll
            self.log.warning("cannot check the state of %s through the REST API: %s",
                             self.handler.dag_id, err)
            self.scheduler.close()
            self.opened = False
        return None

    def queue_stream(self) -> None:
        """After a one-time run: trigger a periodic run (the stream) unless the table is suspended
        or one is queued already. A REST failure is logged: RESUME or a trigger restarts it."""
        from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger

        try:
            self.scheduler.open()
            dag = self.scheduler.get_dag(self.handler)
            if dag is None or dag.is_paused:
                return
            runs = self.scheduler.last_runs(self.handler, 5)
            if not any(run.state.value == "queued" and not self._one_time(run.conf) for run in runs):
                run_id = self.scheduler.trigger_refresh(self.handler, RefreshTrigger(is_periodic=True))
                self.log.info("queued run %s: the stream resumes from its checkpoint after this one", run_id)
        except Exception as err:
            self.log.warning("cannot queue the next streaming run of %s through the REST API: %s",
                             self.handler.dag_id, err)
        finally:
            self.scheduler.close()

    def _one_time(self, conf: Any) -> bool:
        """A queued run that refreshes partitions once; another periodic run waits its turn."""
        try:
            return not parse_refresh_request(conf or {}, self.definition, datetime.now(timezone.utc),
                                             self.zone).is_periodic
        except ValueError:  # a bad request fails in its own run, it does not stop this one
            return False
