"""The Airflow plugin of the Materialized tables page (entry point ``airflow.plugins``).

Every Airflow process loads plugins (scheduler, dag-processor, task runners), but only the
api-server asks for ``fastapi_apps``: the app and its imports (about a second) load then.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/materialized-tables"


class MaterializedTablesPlugin(AirflowPlugin):
    """Mounts the page's FastAPI app, puts the page in the UI's Browse menu and checks the
    refresh calls that trigger refresh DAGs (``trigger_check``)."""

    name = "staged_materialized_tables"
    external_views = [
        {
            "name": "Materialized tables",
            # url_route set: the UI shows href in a frame at /plugin/materialized-tables.
            "href": f"{URL_PREFIX}/",
            "url_route": "materialized-tables",
            "destination": "nav",
            "category": "browse",
        }
    ]

    @property  # type: ignore[override]
    def fastapi_apps(self) -> list[dict[str, Any]]:
        from airflow_provider_staged.airflow.ui.app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "Materialized tables"}]

    @property  # type: ignore[override]
    def fastapi_root_middlewares(self) -> list[dict[str, Any]]:
        # The Trigger form's and REST triggers of refresh DAGs get the refresh task's own check.
        from airflow_provider_staged.airflow.ui.trigger_check import TriggerConfCheck

        return [{"middleware": TriggerConfCheck, "name": "Refresh call check"}]
