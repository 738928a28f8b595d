"""The FastAPI app of the Materialized tables page, mounted by the api-server (see ``plugin``).

- ``GET /``: the page (plain HTML + JS, shown in the UI's navigation as an external view);
- ``GET /api/tables``: every table's row, read in batches (``get_table_objects_by_name_req`` per
  database in chunks of 250, three metadatabase queries), with its calls and stage times in
  ``stats``;
- ``GET /api/tables/{table}/history``: the newest runs of the table's refresh DAG (one query)
  joined with the journal's attempts: trigger, partition, duration, rows, outcome, error;
- ``POST /api/tables/{table}/suspend|resume|refresh``: through the workflow scheduler
  (``MaterializedTables`` on ``AirflowWorkflowScheduler``), acting with the user's own token,
  for users whom the auth manager lets edit the DAG; a refresh is validated as the CLI does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.configuration import conf
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from airflow_provider_staged.airflow.ui.airflow_reads import read_airflow, read_run_history
from airflow_provider_staged.airflow.ui.history import history_rows
from airflow_provider_staged.airflow.ui.rows import note_inputs, page_row, refresh_from_table
from airflow_provider_staged.airflow.ui.sources import (
    CatalogReads,
    read_entries,
    read_state_file,
    table_graph,
)
from airflow_provider_staged.discovery.embedded import definitions_folder, metastore_status
from airflow_provider_staged.materialized.catalog_status import status_from
from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger, WorkflowException
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier

PAGE = Path(__file__).with_name("page.html")

app = FastAPI(title="Materialized tables", docs_url=None, redoc_url=None, openapi_url=None)


@dataclass(frozen=True)
class PageConfig:
    """Where the page finds the definitions, the catalog and the REST API it acts through."""

    definitions_dir: Path
    metastore_uri: str | None
    endpoint: str

    @classmethod
    def current(cls) -> PageConfig:
        """From the environment the ``staged mt`` CLI reads, else this Airflow's own settings."""
        definitions = definitions_folder(conf.get("core", "dags_folder"))  # as the DAG files read it
        metastore_uri = os.environ.get("STAGED_METASTORE_URI")
        if not metastore_uri:
            running = metastore_status()  # the embedded default under $STAGED_HOME
            metastore_uri = running.uri if running is not None else None
        endpoint = os.environ.get("STAGED_AIRFLOW_ENDPOINT") or _own_endpoint()
        return cls(definitions, metastore_uri, endpoint)


def _own_endpoint() -> str:
    """This api-server, as a process on the same machine reaches it."""
    host = conf.get("api", "host", fallback="127.0.0.1")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{conf.getint('api', 'port', fallback=8080)}"


@app.get("/", response_class=HTMLResponse, include_in_schema=False)
def page() -> HTMLResponse:
    # Static: the data comes from /api/tables with the user's own credentials.
    return HTMLResponse(PAGE.read_text(encoding="utf-8"))


@app.get("/api/tables")
def list_tables(user: GetUserDep, session: SessionDep) -> JSONResponse:
    """Every materialized table the user may see, with what the page shows of it."""
    clock = _Stages()
    config = PageConfig.current()
    entries, broken = read_entries(config.definitions_dir)
    dag_ids = {entry.identifier: dag_id_for(entry.identifier) for entry in entries}
    clock.lap("definitions")
    airflow = read_airflow(session, set(dag_ids.values()))
    clock.lap("airflow")
    auth = get_auth_manager()
    readable = auth.filter_authorized_dag_ids(dag_ids=set(airflow.dags), user=user, method="GET")
    # A table whose DAG Airflow has not parsed yet is shown to those who may read DAGs at all.
    sees_unparsed = auth.is_authorized_dag(method="GET", user=user)
    editable = auth.filter_authorized_dag_ids(dag_ids=readable, user=user, method="PUT")
    clock.lap("authorization")
    states = {entry.identifier: read_state_file(entry.path) for entry in entries}
    # Without a metastore it reads nothing: its counts stay 0.
    catalog_error, tables, reads = None, {}, CatalogReads(config.metastore_uri or "")
    if config.metastore_uri is None:
        catalog_error = ("no metastore: start the local one (`staged up`) or set "
                         "STAGED_METASTORE_URI for the api-server")
    else:
        try:
            tables = reads.cached_tables(entries, states, airflow.dags, airflow.runs)
        except StagingError as err:
            catalog_error = str(err)
    clock.lap("catalog")
    now = datetime.now(timezone.utc)
    rows = []
    for entry in entries:
        dag_id = dag_ids[entry.identifier]
        dag = airflow.dags.get(dag_id)
        visible = dag_id in readable if dag is not None else sees_unparsed
        if not visible:
            continue
        table = tables.get(entry.identifier)
        params = dict(table.parameters or {}) if table is not None else None
        state = states[entry.identifier]
        if state.error is not None:  # an unreadable state file: show the row, say why
            broken.append({"definition": entry.path.name, "error": state.error})
            continue
        status = status_from(params, state.state, entry.path)
        last_refresh = airflow.refreshes.get(dag_id) or refresh_from_table(params)
        rows.append(page_row(entry, status, table is not None, dag, airflow.runs.get(dag_id),
                             last_refresh, dag_id in editable, now))
    note_inputs(rows, table_graph(entries))
    clock.lap("rows")
    # Plain JSON types already: JSONResponse skips FastAPI's encoder walking every value again.
    return JSONResponse({
        "tables": rows,
        "broken": broken,
        "catalog_error": catalog_error,
        "definitions_dir": str(config.definitions_dir),
        "user": user.get_name(),
        "stats": {
            "tables": len(rows),
            "metastore_calls": reads.calls,
            # Tables read from the metastore by this request, and served from the page's cache.
            "catalog_reread": reads.reread,
            "catalog_cached": reads.cached,
            "catalog_revalidating": reads.revalidating,
            "airflow_queries": airflow.queries,
            "seconds": clock.total(),
            "stage_seconds": clock.stages,
        },
    })


@app.get("/api/tables/{table}/history")
def table_history(
    table: str, user: GetUserDep, session: SessionDep, limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> dict[str, Any]:
    """The newest ``limit`` refreshes of ``table``, newest first, for users who may read its DAG."""
    identifier = _identifier(table)
    dag_id = dag_id_for(identifier)
    if not get_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=dag_id), user=user):
        raise HTTPException(403, f"user {user.get_name()!r} may not read DAG {dag_id}, so not {identifier}")
    runs = read_run_history(session, dag_id, limit)
    records, journal_error = [], None
    try:
        from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook

        journal = StagedTableHook().get_settings().journal
        records = [record for record in journal.records() if record.target == identifier.name]
    except Exception as err:  # the runs still show; say why their attempts do not
        journal_error = f"journal not read: {err}"
    return {"table": identifier.name, "dag_id": dag_id, "runs": history_rows(dag_id, runs, records),
            "journal_error": journal_error}


def _identifier(table: str) -> TableIdentifier:
    try:
        return TableIdentifier.parse(table)
    except InvalidIdentifierError as err:
        raise HTTPException(400, str(err)) from None


class _Stages:
    """Seconds spent per stage of one request, for the page's ``stats``."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter()
        self.stages: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = round(now - self.last, 4)
        self.last = now

    def total(self) -> float:
        return round(time.perf_counter() - self.started, 4)


class RefreshBody(BaseModel):
    """Partition column -> value, as typed in the page; whether the tables downstream follow."""

    partitions: dict[str, str] = {}
    downstream: bool = False


def _json_only(request: Request) -> None:
    """Actions come from the page's fetch() with a JSON body: a cross-site form cannot send
    one without a CORS preflight, which this app never grants."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise HTTPException(415, "send actions as application/json")


def user_token(request: Request) -> str:
    """The request's token: its bearer header, else the UI's cookie (empty: none)."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN, "")


@contextmanager
def _acting(request: Request, table: str, user: Any) -> Iterator[tuple[Any, TableIdentifier, Any]]:
    """``(MaterializedTables, identifier, definition)`` for an action by ``user`` on ``table``."""
    # Imported per action: the REST client takes a second to import and the page needs none.
    from airflow_provider_staged.materialized.definition import DefinitionError, load_definition
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables

    identifier = _identifier(table)
    config = PageConfig.current()
    # The user's own token: Airflow checks each REST call of the action against them too.
    scheduler = AirflowWorkflowScheduler(config.endpoint, config.definitions_dir, token=user_token(request))
    dag_id = dag_id_for(identifier)
    path = scheduler.definition_file(dag_id)
    if path is None:
        raise HTTPException(404, f"no materialized table {identifier} in {config.definitions_dir}")
    if not get_auth_manager().is_authorized_dag(method="PUT", details=DagDetails(id=dag_id), user=user):
        raise HTTPException(403, f"user {user.get_name()!r} may not edit DAG {dag_id}, so not {identifier}")
    try:
        definition = load_definition(path)
    except DefinitionError as err:
        raise HTTPException(409, str(err)) from None
    try:
        with scheduler:
            yield MaterializedTables(scheduler, config.metastore_uri), identifier, definition
    except WorkflowException as err:
        raise HTTPException(409, str(err)) from None


Acting = Annotated[None, Depends(_json_only)]


@app.post("/api/tables/{table}/suspend")
def suspend(table: str, request: Request, user: GetUserDep, _: Acting) -> dict[str, str]:
    with _acting(request, table, user) as (tables, identifier, _definition):
        tables.suspend(identifier)
    return {"table": identifier.name, "status": "SUSPENDED"}


@app.post("/api/tables/{table}/resume")
def resume(table: str, request: Request, user: GetUserDep, _: Acting) -> dict[str, str]:
    with _acting(request, table, user) as (tables, identifier, _definition):
        tables.resume(identifier)
    return {"table": identifier.name, "status": "ACTIVATED"}


@app.post("/api/tables/{table}/refresh")
def refresh(table: str, body: RefreshBody, request: Request, user: GetUserDep, _: Acting) -> dict[str, str]:
    """A one-time refresh of the typed partitions; a bad value is refused before any run."""
    from airflow_provider_staged.materialized.params import RefreshRequestError, check_refresh_call

    with _acting(request, table, user) as (tables, identifier, definition):
        partitions = dict(body.partitions)
        if definition.partition_by and not partitions:
            # The page refreshes partitions; the whole table is the Trigger form's or the CLI's.
            raise HTTPException(422, f"refresh of {identifier} not triggered: type a value for "
                                     f"{', '.join(definition.partition_by)}")
        trigger = RefreshTrigger(is_periodic=False, static_partitions=partitions,
                                 refresh_downstream=body.downstream)
        try:
            # The same check as `staged mt refresh` and the Trigger form (trigger_check).
            check_refresh_call(trigger.as_conf(), definition, datetime.now(timezone.utc))
        except RefreshRequestError as err:
            raise HTTPException(422, f"refresh of {identifier} not triggered: {err}") from None
        run_id = tables.refresh(identifier, trigger)
    return {"table": identifier.name, "run_id": run_id}
