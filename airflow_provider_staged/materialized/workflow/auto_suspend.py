"""Auto-suspend, run by the refresh task: count failed scheduled refreshes, suspend at the limit.

Counting (:mod:`.failure_streak`) happens where the facts are: the refresh task's final-failure
callback counts a failed scheduled refresh, the task's ``execute`` ends the streak after its
commit. The count lives with the table's refresh status (:mod:`.catalog_status`, written under
the table's metastore lock), so it survives Airflow's run-history cleanup, ``describe`` shows
it, and RESUME resets it. Airflow's own ``max_consecutive_failed_dag_runs`` was not used: it
counts manual runs too, a RESUME does not reset it and it records no reason with the table.

The callback that reaches the limit suspends the table through the FLIP-448 workflow scheduler
(:class:`.manager.MaterializedTables`), as ``staged mt suspend`` does, with the reason
``SUSPENDED_DUE_TO_ERRORS``. Its identity: an Airflow 3.3 task holds only its execution-API
token, and the Execution API cannot pause a DAG (it has no such route; the public REST API
does not take that token). So the task logs in to the REST API like any API client, with the
Airflow connection ``staged_workflow_scheduler`` (host: the API's URL; login and password of a
user who may pause DAGs); without that connection it uses the endpoint of the refresh handler
stored with the table (else the task's own API server) and logs in without credentials, which
only an Airflow that allows it accepts. The callback runs in the task process (and in the DAG
processor for a task that was lost), so no other component must be up for it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_staged.materialized.catalog_status import CatalogStatus, CatalogStatusStore
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.failure_streak import (
    SUSPENDED_DUE_TO_ERRORS,
    FailureStreak,
    after_failure,
    is_scheduled,
    summarize,
)
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus

if TYPE_CHECKING:
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler

log = logging.getLogger(__name__)

SCHEDULER_CONN_ID = "staged_workflow_scheduler"


def record_failure(
    definition: MaterializedTableDefinition, context: Any, metastore_uri: str | None,
    scheduler_conn_id: str = SCHEDULER_CONN_ID,
) -> CatalogStatus | None:
    """Count a failed scheduled refresh; suspend the table when it reaches its limit.

    Returns the stored status (None for a run that does not count).
    """
    dag_run = context.get("dag_run")
    run_id = str(getattr(dag_run, "run_id", None) or context.get("run_id") or "")
    if not is_scheduled(getattr(dag_run, "run_type", None), run_id):
        log.info("auto-suspend: %s is not a scheduled run; its failure is not counted", run_id)
        return None
    summary = summarize(run_id, context.get("exception"))
    suspend = False

    def count(current: CatalogStatus) -> CatalogStatus:
        nonlocal suspend
        streak, suspend = after_failure(
            current.failures, scheduled=True, summary=summary,
            suspend_after=definition.suspend_after_failures,
            suspended=current.refresh_status is RefreshStatus.SUSPENDED,
        )
        # A definition dropped into the folder by hand has no status yet: its DAG runs.
        return replace(current, refresh_status=current.refresh_status or RefreshStatus.ACTIVATED,
                       failures=streak)

    store = CatalogStatusStore(metastore_uri)
    status = store.update(definition.identifier, definition.source_path, count)
    log.warning("auto-suspend: %s has %d consecutive failed scheduled refresh(es) (suspends at %s)",
                definition.identifier, status.failures.count, definition.suspend_after_failures or "never")
    if suspend:
        _suspend(definition, status, metastore_uri, scheduler_conn_id)
        status = store.load(definition.identifier, definition.source_path)
    return status


def record_success(definition: MaterializedTableDefinition, metastore_uri: str | None) -> None:
    """End the failure streak after a committed refresh (one catalog read when there is none)."""
    store = CatalogStatusStore(metastore_uri)
    if store.load(definition.identifier, definition.source_path).failures == FailureStreak():
        return
    store.update(
        definition.identifier, definition.source_path,
        lambda current: None if current.failures == FailureStreak()
        else replace(current, failures=FailureStreak()),
    )
    log.info("auto-suspend: %s refreshed; the failure count is reset", definition.identifier)


def _suspend(
    definition: MaterializedTableDefinition, status: CatalogStatus, metastore_uri: str | None,
    scheduler_conn_id: str,
) -> None:
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables

    with api_scheduler(definition, status, scheduler_conn_id) as scheduler:
        MaterializedTables(scheduler, metastore_uri).suspend(definition.identifier, SUSPENDED_DUE_TO_ERRORS)
    log.error("auto-suspend: %s SUSPENDED_DUE_TO_ERRORS after %d consecutive failed scheduled "
              "refreshes; `staged mt resume %s` resumes it", definition.identifier,
              status.failures.count, definition.identifier)


def api_scheduler(
    definition: MaterializedTableDefinition, status: CatalogStatus, scheduler_conn_id: str = SCHEDULER_CONN_ID
) -> AirflowWorkflowScheduler:
    """The workflow scheduler a task reaches the REST API with (not opened yet), as described above."""
    # Imported here: only a task that talks to the REST API needs the client.
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import (
        AirflowRefreshHandlerSerializer,
        AirflowWorkflowScheduler,
    )

    endpoint, username, password = _api_login(scheduler_conn_id)
    if endpoint is None and status.refresh_handler is not None:
        endpoint = AirflowRefreshHandlerSerializer().deserialize(status.refresh_handler).endpoint
    if endpoint is None:
        endpoint = _own_api_server()
    return AirflowWorkflowScheduler(endpoint, Path(definition.source_path).parent, username, password)


def _api_login(conn_id: str) -> tuple[str | None, str | None, str | None]:
    """``(endpoint, login, password)`` from the connection; all None when it does not exist."""
    from airflow.providers.common.compat.sdk import AirflowNotFoundException, Connection

    try:
        conn = Connection.get(conn_id)
    except AirflowNotFoundException:
        return None, None, None
    host = conn.host or ""
    if "://" not in host:
        host = f"{conn.schema or 'http'}://{host}" + (f":{conn.port}" if conn.port else "")
    elif conn.port and urlsplit(host).port is None:
        host = f"{host.rstrip('/')}:{conn.port}"
    return host.rstrip("/"), conn.login or None, conn.password or None


def _own_api_server() -> str:
    """The API server this task reports to: it serves the REST API too."""
    from airflow.providers.common.compat.sdk import conf

    url = urlsplit(conf.get("core", "execution_api_server_url"))
    return f"{url.scheme}://{url.netloc}"
