"""``StagedRollbackOperator``: make a kept version of a table current from a DAG.

The rollback is a staged attempt of its own on the one commit path (``staging.rollback``); the
task emits the table's asset event, as a build does, carrying the version it restored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context

from airflow_provider_staged.airflow.callbacks import task_ref
from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.airflow.operators.targets import target_asset
from airflow_provider_staged.staging.identifiers import TableIdentifier


class StagedRollbackOperator(BaseOperator):
    """Roll ``target`` (``database.table``) back to kept ``version`` (see ``staged versions``).

    For a partition-refreshed table, the version's partitions inside ``partition_spec`` (all
    of them when it is empty). An unknown or swept version fails the task and changes nothing.
    """

    template_fields: Sequence[str] = ("target", "version", "partition_spec")
    ui_color = "#f8ece0"

    def __init__(
        self,
        *,
        target: str,
        version: str,
        partition_spec: dict[str, str] | None = None,
        staged_conn_id: str = StagedTableHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        if "{{" not in target and "outlets" not in kwargs:
            kwargs["outlets"] = [target_asset(target, staged_conn_id)]
        super().__init__(**kwargs)
        self.target = target
        self.version = version
        self.partition_spec = partition_spec or {}
        self.staged_conn_id = staged_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_staged.staging.rollback import rollback

        settings = StagedTableHook(self.staged_conn_id).get_settings()
        record = rollback(
            settings,
            TableIdentifier.parse(self.target),
            self.version,
            task_ref(context),
            self.staged_conn_id,
            partition_spec=self.partition_spec,
        )
        manifest = record.manifest or {}
        result = {
            "target": self.target,
            "version": self.version,
            "rollback": record.attempt_id,
            "location": record.location,
            "partitions": sorted(record.catalog.get("partitions") or {}),
            "rows": manifest.get("rows"),
            "bytes": manifest.get("bytes"),
        }
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(result)
        self.log.info("rolled back %s: %s", self.target, result)
        return result
