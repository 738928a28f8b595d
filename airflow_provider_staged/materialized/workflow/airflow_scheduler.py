"""FLIP-448 workflow scheduler implemented by Airflow (REST API v2, apache-airflow-client).

A refresh workflow is the DAG the factory (``dags/materialized_tables.py``) builds from a
definition file in the definitions folder, ``<db>__<table>.sql``:

- create: validate the definition, write it atomically, wait until the DAG is parsed, unpause it;
- suspend / resume: ``PATCH /api/v2/dags/{id}`` ``{"is_paused": ...}``; resume may replace the
  default ``dynamicOptions`` / ``executionConfig``, kept in the state file beside the definition
  (:mod:`.catalog_status`), which every later refresh reads;
- modify cron: rewrite the definition with ``'schedule.cron'`` in its WITH clause (the header is
  written in canonical form, the query is kept verbatim) and wait for the new schedule;
- modify definition (CREATE OR ALTER): rewrite the definition file atomically and wait until
  Airflow shows the DAG parsed from it (its docs carry the definition's text);
- delete: remove the definition, wait until the DAG processor marks the DAG stale, then
  ``DELETE /api/v2/dags/{id}`` until it stays gone;
- refresh: ``POST /api/v2/dags/{id}/dagRuns`` with the five FLIP-448 keys as ``conf``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

import httpx
from airflow_client.client import ApiClient, Configuration
from airflow_client.client.api.asset_api import AssetApi
from airflow_client.client.api.dag_api import DAGApi
from airflow_client.client.api.dag_run_api import DagRunApi
from airflow_client.client.api.event_log_api import EventLogApi
from airflow_client.client.api.import_error_api import ImportErrorApi
from airflow_client.client.api.version_api import VersionApi
from airflow_client.client.exceptions import ApiException
from airflow_client.client.models.dag_patch_body import DAGPatchBody
from airflow_client.client.models.dag_response import DAGResponse
from airflow_client.client.models.dag_run_patch_body import DAGRunPatchBody
from airflow_client.client.models.dag_run_response import DAGRunResponse
from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

from airflow_provider_staged.materialized.catalog_status import (
    remove_state,
    set_workflow_options,
    write_text_atomically,
)
from airflow_provider_staged.materialized.continuous import NotStreamableError, query_shape
from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    MaterializedTableDefinition,
    check_query,
    load_definition,
    parse_definition,
    read_identifier,
    render_definition,
)
from airflow_provider_staged.materialized.freshness import RefreshMode
from airflow_provider_staged.materialized.naming import (
    DEFINITION_GLOB,
    broken_dag_id,
    dag_id_for,
    manual_run_fields,
)
from airflow_provider_staged.materialized.workflow.airflow_reparse import ParseRequests
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreatePeriodicRefreshWorkflow,
    CreateRefreshWorkflow,
    DeleteRefreshWorkflow,
    ModifyRefreshWorkflow,
    ModifyRefreshWorkflowCronExpr,
    ModifyRefreshWorkflowDefinition,
    RefreshHandler,
    RefreshHandlerSerializer,
    RefreshTrigger,
    ResumeRefreshWorkflow,
    SuspendRefreshWorkflow,
    WorkflowException,
    WorkflowScheduler,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier

CRON_OPTION = "schedule.cron"
TERMINAL_RUN_STATES = frozenset({"success", "failed"})
_HANDLER_TYPE = "airflow"
_HANDLER_VERSION = 1


def fetch_token(endpoint: str, username: str | None = None, password: str | None = None) -> str:
    """JWT for REST API v2: ``POST /auth/token`` with credentials, else ``GET /auth/token``.

    httpx, not apache-airflow-client: the client has no call for the auth manager's token route.
    """
    url = f"{endpoint.rstrip('/')}/auth/token"
    if username is not None:
        response = httpx.post(url, json={"username": username, "password": password or ""}, timeout=120)
    else:
        response = httpx.get(url, timeout=120)
    if response.status_code >= 400:
        how = f"as user {username!r}" if username is not None else "without credentials"
        raise PermissionError(
            f"cannot get an Airflow API token from {url} {how}: HTTP {response.status_code} "
            f"{response.text[:300]}"
        )
    return response.json()["access_token"]



@dataclass(frozen=True)
class AirflowRefreshHandler(RefreshHandler):
    """Locates a refresh workflow: the DAG ``dag_id`` in the Airflow at ``endpoint``."""

    dag_id: str
    endpoint: str

    def as_summary_string(self) -> str:
        return f"Airflow DAG {self.dag_id} at {self.endpoint}"


class AirflowRefreshHandlerSerializer(RefreshHandlerSerializer[AirflowRefreshHandler]):
    """JSON: ``{"type": "airflow", "version": 1, "dag_id": ..., "endpoint": ...}``."""

    def serialize(self, handler: AirflowRefreshHandler) -> bytes:
        data = {"type": _HANDLER_TYPE, "version": _HANDLER_VERSION,
                "dag_id": handler.dag_id, "endpoint": handler.endpoint}
        return json.dumps(data, sort_keys=True).encode("utf-8")

    def deserialize(self, data: bytes | str) -> AirflowRefreshHandler:
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise WorkflowException(f"not a serialized Airflow refresh handler: {err}") from None
        if not isinstance(value, dict) or value.get("type") != _HANDLER_TYPE:
            raise WorkflowException(f"not a serialized Airflow refresh handler: {str(data)[:200]!r}")
        if value.get("version") != _HANDLER_VERSION:
            raise WorkflowException(f"unsupported Airflow refresh handler version {value.get('version')!r}")
        dag_id, endpoint = value.get("dag_id"), value.get("endpoint")
        if not (isinstance(dag_id, str) and dag_id and isinstance(endpoint, str) and endpoint):
            raise WorkflowException(f"Airflow refresh handler without dag_id/endpoint: {value!r}")
        return AirflowRefreshHandler(dag_id, endpoint)


class AirflowWorkflowScheduler(WorkflowScheduler[AirflowRefreshHandler]):
    """Refresh workflows as factory-built DAGs of one Airflow deployment."""

    required_options: ClassVar[frozenset[str]] = frozenset({"endpoint", "definitions-dir"})
    optional_options: ClassVar[frozenset[str]] = frozenset({"username", "password", "parse-timeout"})

    def __init__(
        self,
        endpoint: str,
        definitions_dir: str | Path,
        username: str | None = None,
        password: str | None = None,
        parse_timeout: float = 120.0,
        poll_interval: float = 1.0,
        token: str | None = None,
    ) -> None:
        """``token``: act with this API token (e.g. a UI user's own) instead of logging in."""
        self.token = token
        self.endpoint = endpoint.rstrip("/")
        self.definitions_dir = Path(definitions_dir)
        self.username = username
        self.password = password
        self.parse_timeout = parse_timeout
        self.poll_interval = poll_interval
        self._client: ApiClient | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> AirflowWorkflowScheduler:
        endpoint = options["endpoint"].strip()
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise WorkflowException(
                f"invalid workflow-scheduler.airflow.endpoint {endpoint!r}: expected http(s)://host:port"
            )
        if ("password" in options) and ("username" not in options):
            raise WorkflowException("workflow-scheduler.airflow.password is set without a username")
        try:
            parse_timeout = float(options.get("parse-timeout", "120"))
        except ValueError:
            parse_timeout = -1.0
        if parse_timeout <= 0:
            raise WorkflowException(
                f"invalid workflow-scheduler.airflow.parse-timeout {options['parse-timeout']!r}: "
                "expected a positive number of seconds"
            )
        return cls(endpoint, options["definitions-dir"], options.get("username"),
                   options.get("password"), parse_timeout)

    # -- lifecycle --------------------------------------------------------------------------
    def open(self) -> None:
        """Check the definitions folder. Airflow is reached on the first call that needs it
        (:attr:`client`): a statement or command checks its values, and the ones that only read
        the definitions (SHOW, SHOW CREATE) run, without it."""
        if not self.definitions_dir.is_dir():
            raise WorkflowException(f"definitions folder {self.definitions_dir} does not exist")

    def _connect(self) -> ApiClient:
        try:
            token = self.token or fetch_token(self.endpoint, self.username, self.password)
        except Exception as err:  # connection refused, bad credentials, ...
            raise WorkflowException(f"cannot authenticate to Airflow at {self.endpoint}: {err}") from err
        client = ApiClient(Configuration(host=self.endpoint, access_token=token))
        try:
            VersionApi(client).get_version()
        except Exception as err:
            _close(client)
            raise WorkflowException(f"Airflow REST API at {self.endpoint} does not answer: {err}") from err
        return client

    def close(self) -> None:
        if self._client is not None:
            _close(self._client)
            self._client = None

    def get_refresh_handler_serializer(self) -> AirflowRefreshHandlerSerializer:
        return AirflowRefreshHandlerSerializer()

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def connect(self) -> None:
        """Reach Airflow now: a change begins with it, so an Airflow that cannot be reached leaves
        the definitions folder, the stored options and the catalog's status as they were."""
        self.client  # noqa: B018  (connects on first use)

    # -- FLIP-448 operations ----------------------------------------------------------------
    def create_refresh_workflow(self, workflow: CreateRefreshWorkflow) -> AirflowRefreshHandler:
        if not isinstance(workflow, CreatePeriodicRefreshWorkflow):
            raise WorkflowException(f"unsupported create operation {type(workflow).__name__}")
        identifier = workflow.identifier
        path = self.definition_path_for(identifier)
        definition = self._validated(workflow.definition_text, path, identifier)
        text = workflow.definition_text
        if workflow.cron_expression is not None:
            text = self._with_cron(definition, workflow.cron_expression)
        dag_id = dag_id_for(identifier)
        existing = self.definition_file(dag_id)
        if existing is not None:
            raise WorkflowException(f"a refresh workflow for {identifier} already exists ({existing})")
        handler = AirflowRefreshHandler(dag_id, self.endpoint)
        self.connect()
        set_workflow_options(path, workflow.dynamic_options, workflow.execution_config)
        write_text_atomically(path, text)
        try:
            # A stale DAG of the same id (its file removed by hand) is not the new one.
            self._wait_for_dag(dag_id, path, f"the new DAG {dag_id}", lambda dag: not dag.is_stale,
                               identifier)
            self._set_paused(handler, False)
        except BaseException:
            # Nothing half-created: the definition goes, and with it the DAG at the next parse.
            path.unlink(missing_ok=True)
            remove_state(path)
            raise
        return handler

    def modify_refresh_workflow(self, workflow: ModifyRefreshWorkflow[AirflowRefreshHandler]) -> None:
        handler = workflow.refresh_handler
        if isinstance(workflow, SuspendRefreshWorkflow):
            self._set_paused(handler, True)
        elif isinstance(workflow, ResumeRefreshWorkflow):
            self.connect()  # the other changes read the DAG before they write
            if workflow.dynamic_options or workflow.execution_config:
                set_workflow_options(
                    self._required_file(handler),
                    workflow.dynamic_options or None,
                    workflow.execution_config or None,
                )
            self._set_paused(handler, False)
        elif isinstance(workflow, ModifyRefreshWorkflowCronExpr):
            path = self._required_file(handler)
            try:
                definition = load_definition(path)
            except DefinitionError as err:
                raise WorkflowException(f"cannot modify {handler.dag_id}: {err}") from None
            cron = workflow.cron_expression.strip()
            text = self._with_cron(definition, cron)
            self._dag(handler.dag_id)  # fail before rewriting anything if the DAG is unknown
            write_text_atomically(path, text)
            self._wait_for_dag(handler.dag_id, path, f"the schedule {cron!r} of {handler.dag_id}",
                               lambda dag: dag.timetable_summary == cron, definition.identifier)
        elif isinstance(workflow, ModifyRefreshWorkflowDefinition):
            self._replace_definition(handler, workflow.definition_text)
        else:
            raise WorkflowException(f"unsupported modify operation {type(workflow).__name__}")

    def _replace_definition(self, handler: AirflowRefreshHandler, text: str) -> None:
        path = self._required_file(handler)
        definition = self._validated(text, path, read_identifier(path))
        self._dag(handler.dag_id)  # fail before rewriting anything if the DAG is unknown
        write_text_atomically(path, text)
        # A parse that began before the write still shows the old text: wait for the new one.
        expected = definition.text.strip()
        self._wait_for_dag(handler.dag_id, path, f"the new definition of {handler.dag_id}",
                           lambda dag: expected in (self._dag_doc(handler) or ""), definition.identifier)

    def _dag_doc(self, handler: AirflowRefreshHandler) -> str | None:
        try:
            return DAGApi(self.client).get_dag_details(handler.dag_id).doc_md
        except ApiException as err:
            raise _api_failure(f"cannot read DAG {handler.dag_id}", err) from None

    def delete_refresh_workflow(self, workflow: DeleteRefreshWorkflow[AirflowRefreshHandler]) -> None:
        self.delete_refresh_workflows([workflow.refresh_handler])

    def delete_refresh_workflows(self, handlers: Sequence[AirflowRefreshHandler]) -> None:
        """Delete several workflows together (DROP ... CASCADE): their files go at once, so one
        parse makes every DAG stale, and the DELETEs settle together; one by one, each waited for
        a parse and a settling of its own."""
        dag_ids = [handler.dag_id for handler in handlers]
        removed = []
        for dag_id in dag_ids:
            self._end_runs(dag_id)
            path = self.definition_file(dag_id)
            if path is not None:
                removed.append(read_identifier(path))
                path.unlink(missing_ok=True)
                remove_state(path)
        api = DAGApi(self.client)
        deadline = time.monotonic() + self.parse_timeout
        parses = ParseRequests(self.client, removed, self.definitions_dir)
        for dag_id in dag_ids:
            self._wait_until_stale(api, dag_id, deadline, parses)
        # A parse that started before the file went away can write the DAG back after our
        # DELETE: delete until it has stayed gone for longer than such a parse takes.
        gone_since: dict[str, float | None] = dict.fromkeys(dag_ids)
        last_error = ""
        while time.monotonic() < deadline:
            for dag_id in list(gone_since):
                try:
                    api.delete_dag(dag_id)
                    gone_since[dag_id] = None
                except ApiException as err:
                    if err.status != 404:  # e.g. 409 while a task of the DAG is still running
                        last_error = _api_error(err)
                        gone_since[dag_id] = None
                    elif gone_since[dag_id] is None:
                        gone_since[dag_id] = time.monotonic()
                    elif time.monotonic() - gone_since[dag_id] >= self._settle_seconds:
                        del gone_since[dag_id]
            if not gone_since:
                return
            time.sleep(self.poll_interval)
        raise WorkflowException(
            f"DAG {', '.join(gone_since)} still exists {self.parse_timeout:.0f}s after deleting it"
            + (f": {last_error}" if last_error else "")
        )

    def _wait_until_stale(self, api: DAGApi, dag_id: str, deadline: float, parses: ParseRequests) -> None:
        """Until the DAG processor marks ``dag_id`` stale (its file no longer defines it) or it is gone.

        A DELETE that lands while the processor writes a parse that still had the DAG fails that
        write, and Airflow 3.3's DAG processor then exits for good (its retry reuses the failed
        session: apache/airflow#68263); once the DAG is stale no parse writes it any more.
        """
        while time.monotonic() < deadline:
            parses.when_due()
            try:
                if api.get_dag(dag_id).is_stale:
                    return
            except ApiException as err:
                if err.status == 404:
                    return
                raise _api_failure(f"cannot read DAG {dag_id}", err) from None
            time.sleep(self.poll_interval)
        raise WorkflowException(
            f"DAG {dag_id} was not marked stale {self.parse_timeout:.0f}s after its definition was "
            "removed: is the DAG processor running?"
        )

    def trigger_refresh(self, handler: AirflowRefreshHandler, trigger: RefreshTrigger) -> str:
        fields = manual_run_fields(datetime.now(timezone.utc), trigger.is_periodic, trigger.schedule_time)
        body = TriggerDAGRunPostBody(logical_date=None, conf=trigger.as_conf(), **fields)
        try:
            run = DagRunApi(self.client).trigger_dag_run(handler.dag_id, body)
        except ApiException as err:
            raise _api_failure(f"cannot trigger a refresh of {handler.dag_id}", err) from None
        return run.dag_run_id

    # -- queries (CLI, tests) ---------------------------------------------------------------
    def get_dag(self, handler: AirflowRefreshHandler) -> DAGResponse | None:
        try:
            return DAGApi(self.client).get_dag(handler.dag_id)
        except ApiException as err:
            if err.status == 404:
                return None
            raise _api_failure(f"cannot read DAG {handler.dag_id}", err) from None

    def paused_since(self, handler: AirflowRefreshHandler) -> datetime | None:
        """When the DAG was paused, by this client, auto-suspend or a person in Airflow's UI (all
        pause through ``PATCH /dags/{id}``, which Airflow's audit log records); None when its last
        pause or unpause there was an unpause, or none is logged."""
        try:
            logs = EventLogApi(self.client).get_event_logs(
                dag_id=handler.dag_id, included_events=["patch_dag", "patch_dags"], order_by=["-when"],
                limit=50).event_logs
        except ApiException as err:
            raise _api_failure(f"cannot read the audit log of {handler.dag_id}", err) from None
        for entry in logs:
            with contextlib.suppress(ValueError, TypeError):
                paused = json.loads(entry.extra or "{}").get("is_paused")
                if paused is not None:
                    return entry.when if str(paused).lower() == "true" else None
        return None

    def input_events(
        self, handler: AirflowRefreshHandler, limit: int = 1000
    ) -> dict[str, list[tuple[str, datetime]]]:
        """The keyed events (key, time) of each asset the DAG is scheduled on, newest first (at
        most ``limit`` an asset); empty for a DAG not scheduled on assets."""
        try:
            expression = DAGApi(self.client).get_dag_details(handler.dag_id).asset_expression
            assets = AssetApi(self.client)
            found = {}
            for uri in _asset_uris(expression):
                asset = asset_id(assets, uri)
                events = assets.get_asset_events(asset_id=asset, order_by=["-timestamp"],
                                                 limit=limit).asset_events if asset is not None else []
                found[uri] = [(e.partition_key, e.timestamp) for e in events if e.partition_key]
        except ApiException as err:
            raise _api_failure(f"cannot read the events of what {handler.dag_id} follows", err) from None
        return found

    def get_run(self, handler: AirflowRefreshHandler, run_id: str) -> DAGRunResponse:
        try:
            return DagRunApi(self.client).get_dag_run(handler.dag_id, run_id)
        except ApiException as err:
            raise _api_failure(f"cannot read run {run_id} of {handler.dag_id}", err) from None

    def last_runs(self, handler: AirflowRefreshHandler, limit: int = 5) -> list[DAGRunResponse]:
        try:
            runs = DagRunApi(self.client).get_dag_runs(handler.dag_id, limit=limit, order_by=["-run_after"])
        except ApiException as err:
            raise _api_failure(f"cannot list runs of {handler.dag_id}", err) from None
        return list(runs.dag_runs)

    def wait_for_run(self, handler: AirflowRefreshHandler, run_id: str, timeout: float) -> DAGRunResponse:
        """Poll the run until it is ``success`` or ``failed``."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get_run(handler, run_id)
            if run.state.value in TERMINAL_RUN_STATES:
                return run
            if time.monotonic() > deadline:
                raise WorkflowException(
                    f"run {run_id} of {handler.dag_id} still {run.state.value} after {timeout:.0f}s"
                )
            time.sleep(self.poll_interval)

    def definition_path_for(self, identifier: TableIdentifier) -> Path:
        """Where :meth:`create_refresh_workflow` writes the definition of ``identifier``."""
        # Named like the dag_id's tail, which the factory tries first when building one DAG.
        return self.definitions_dir / f"{identifier.database}__{identifier.table}.sql"

    def definition_file(self, dag_id: str) -> Path | None:
        """The definition file of ``dag_id`` in the definitions folder, if any."""
        for path in sorted(self.definitions_dir.glob(DEFINITION_GLOB)):
            try:
                if dag_id_for(read_identifier(path)) == dag_id:
                    return path
            except DefinitionError:
                continue  # a broken file is its own (broken) DAG, not this one
        return None

    # -- helpers ----------------------------------------------------------------------------
    def _validated(self, text: str, path: Path, identifier: TableIdentifier) -> MaterializedTableDefinition:
        try:
            definition = parse_definition(text, path)
            check_query(definition)
        except DefinitionError as err:
            raise WorkflowException(str(err)) from None
        if definition.identifier != identifier:
            raise WorkflowException(
                f"the definition creates {definition.identifier}, not {identifier}"
            )
        if definition.refresh_mode is RefreshMode.CONTINUOUS:
            try:
                query_shape(identifier, definition.query)
            except NotStreamableError as err:
                raise WorkflowException(str(err)) from None
        return definition

    def _with_cron(self, definition: MaterializedTableDefinition, cron: str) -> str:
        text = render_definition(definition, {**definition.options, CRON_OPTION: cron})
        try:
            rendered = parse_definition(text, definition.source_path)
        except DefinitionError as err:
            raise WorkflowException(f"invalid cron expression for {definition.identifier}: {err}") from None
        if (rendered.identifier, rendered.query, rendered.partition_by, rendered.refresh_mode,
                rendered.columns, rendered.primary_key, rendered.primary_key_name) != (
            definition.identifier, definition.query, definition.partition_by, definition.refresh_mode,
            definition.columns, definition.primary_key, definition.primary_key_name,
        ):  # the renderer must never change what the table is
            raise WorkflowException(f"rewriting the definition of {definition.identifier} changed it")
        return text

    def _required_file(self, handler: AirflowRefreshHandler) -> Path:
        path = self.definition_file(handler.dag_id)
        if path is None:
            raise WorkflowException(
                f"no definition for DAG {handler.dag_id} in {self.definitions_dir}"
            )
        return path

    @property
    def _settle_seconds(self) -> float:
        """How long Airflow's own loops (a parse, a scheduling pass) may still act on old state."""
        return min(5.0, self.parse_timeout / 4)

    def _end_runs(self, dag_id: str) -> None:
        """Pause ``dag_id`` and fail its queued and running runs, before it is deleted.

        Airflow 3.3's scheduler dies (``ObjectDeletedError`` in its loop) when a run it is
        scheduling is deleted under it, and then no DAG runs at all. A paused DAG gets no new run
        (a new one would be the latest past slot at once), and ended runs are left alone.
        """
        try:
            DAGApi(self.client).patch_dag(dag_id, DAGPatchBody(is_paused=True))
            runs_api = DagRunApi(self.client)
            active = runs_api.get_dag_runs(dag_id, state=["queued", "running"], limit=100).dag_runs
            for run in active:
                runs_api.patch_dag_run(dag_id, run.dag_run_id, DAGRunPatchBody(state="failed"))
        except ApiException as err:
            if err.status == 404:  # already gone
                return
            raise _api_failure(f"cannot end the runs of {dag_id} before deleting it", err) from None
        if active:  # a scheduler loop that loaded a run before the PATCH finishes meanwhile
            time.sleep(self._settle_seconds)

    def _dag(self, dag_id: str) -> DAGResponse:
        dag = self.get_dag(AirflowRefreshHandler(dag_id, self.endpoint))
        if dag is None:
            raise WorkflowException(f"refresh workflow DAG {dag_id} does not exist in {self.endpoint}")
        return dag

    def _set_paused(self, handler: AirflowRefreshHandler, paused: bool) -> None:
        try:
            dag = DAGApi(self.client).patch_dag(handler.dag_id, DAGPatchBody(is_paused=paused))
        except ApiException as err:
            what = "suspend" if paused else "resume"
            raise _api_failure(f"cannot {what} {handler.dag_id}", err) from None
        if dag.is_paused is not paused:
            raise WorkflowException(f"DAG {handler.dag_id} is_paused={dag.is_paused} after the PATCH")

    def _wait_for_dag(
        self, dag_id: str, path: Path, what: str, ready: Callable[[DAGResponse], bool],
        table: TableIdentifier,
    ) -> None:
        """Ask for parses of ``table``'s DAG file (:class:`.ParseRequests`) until Airflow has parsed
        ``dag_id`` and ``ready(dag)``; else explain why not."""
        handler = AirflowRefreshHandler(dag_id, self.endpoint)
        deadline = time.monotonic() + self.parse_timeout
        parses = ParseRequests(self.client, [table], self.definitions_dir)
        while time.monotonic() < deadline:
            parses.when_due()
            dag = self.get_dag(handler)
            if dag is not None and ready(dag):
                return
            time.sleep(self.poll_interval)
        raise WorkflowException(
            f"Airflow at {self.endpoint} did not show {what} within {self.parse_timeout:.0f}s "
            f"after writing {path}{self._parse_problems(path)}"
        )

    def _parse_problems(self, path: Path) -> str:
        """Import errors and the factory's broken-definition DAG for ``path``, as text."""
        problems = []
        try:
            errors = ImportErrorApi(self.client).get_import_errors(limit=20).import_errors
            problems += [f"import error in {e.filename}: {e.stack_trace.strip()[-500:]}" for e in errors]
        except ApiException as err:
            problems.append(f"(cannot list import errors: {_api_error(err)})")
        broken = self.get_dag(AirflowRefreshHandler(broken_dag_id(path), self.endpoint))
        if broken is not None:
            problems.append(broken.description or f"DAG {broken.dag_id}")
        return "; " + "; ".join(problems) if problems else "; no import error reported (is the DAG "\
            "factory file dags/materialized_tables.py in the DAGs folder, reading this folder?)"


def asset_id(assets: AssetApi, uri: str) -> int | None:
    """Airflow's id of the asset ``uri`` (the API matches a pattern: the exact one is kept)."""
    return next((a.id for a in assets.get_assets(uri_pattern=uri, limit=100).assets if a.uri == uri), None)


def _asset_uris(expression: Any) -> list[str]:
    """The URIs of the assets in a DAG's ``asset_expression`` (``{"all": [{"asset": {...}}]}``...)."""
    if isinstance(expression, dict):
        asset = expression.get("asset")
        if isinstance(asset, dict) and isinstance(asset.get("uri"), str):
            return [asset["uri"]]
        return [uri for value in expression.values() for uri in _asset_uris(value)]
    if isinstance(expression, list):
        return [uri for value in expression for uri in _asset_uris(value)]
    return []


def _close(client: ApiClient) -> None:
    # The generated client has no close(): its urllib3 pool holds the connections.
    client.rest_client.pool_manager.clear()


def _api_error(err: ApiException) -> str:
    """``HTTP <status>: <detail>`` with the detail Airflow put in its JSON error body."""
    detail: Any = err.body
    with contextlib.suppress(ValueError, AttributeError):
        detail = json.loads(err.body or "").get("detail", err.body)
    return f"HTTP {err.status}: {detail if isinstance(detail, str) else json.dumps(detail)[:500]}"


def _api_failure(action: str, err: ApiException) -> WorkflowException:
    return WorkflowException(f"{action}: {_api_error(err)}")
