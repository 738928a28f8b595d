"""``MaterializedTableRefreshOperator``: the refresh task of a generated materialized-table DAG.

A refresh is a staged attempt like any other: it gets the same lifecycle binding as the CTAS
operator (commit at the end of ``execute``, abort from the failure/retry callbacks and on
kill), on the catalog of its own staged connection.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, Context

from airflow_provider_staged.callbacks import task_ref
from airflow_provider_staged.hooks.staged_table import StagedTableHook
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.operators.staged_attempt import StagedAttemptOperator


class MaterializedTableRefreshOperator(StagedAttemptOperator):
    """Refresh ``definition`` as the run's params (FLIP-448's refresh call) say.

    :param definition: the parsed definition (the DAG factory passes it).
    :param zone: time zone of ``scheduleTime`` and of the schedule.
    :param staged_conn_id: the staged connection whose catalog holds the table.
    """

    ui_color = "#e0ecf8"

    def __init__(
        self,
        *,
        definition: MaterializedTableDefinition,
        zone: str = "UTC",
        staged_conn_id: str = StagedTableHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(staged_conn_id=staged_conn_id, **kwargs)
        self.definition = definition
        self.zone = zone

    def execute(self, context: Context) -> dict[str, Any]:
        # Imported when the task runs: DAG parsing must not load the refresh engine (Spark).
        from airflow_provider_staged.engine.runners import EmbeddedEngine
        from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh

        run_time = context.get("logical_date") or context["dag_run"].run_after
        request = parse_refresh_request(context["params"], self.definition, run_time, self.zone)
        settings = StagedTableHook(self.staged_conn_id).get_settings()
        self._engine = EmbeddedEngine(settings)
        task = task_ref(context)
        self._staged = staged_refresh(self.definition, request, settings, task, self.staged_conn_id)
        result = run_refresh(self.definition, request, settings, self._staged, self._engine, self._killed)
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(result)
        return result
