"""Python API of materialized-table workflows: the workflow scheduler plus the catalog status.

What Flink's materialized-table manager does around a ``WorkflowScheduler``: every operation
changes the workflow in Airflow and then records the refresh status and handler with the table
(:mod:`.catalog_status`). Used by ``staged mt ...``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.materialized.catalog_status import (
    REFRESH_STATUS_KEY,
    CatalogStatus,
    CatalogStatusStore,
)
from airflow_provider_staged.materialized.continuous_run import (
    Progress,
    drop_continuous_state,
    read_progress,
    table_root,
)
from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    MaterializedTableDefinition,
    load_definition,
    parse_definition,
    read_identifier,
)
from airflow_provider_staged.materialized.failure_streak import FailureStreak
from airflow_provider_staged.materialized.freshness import RefreshMode
from airflow_provider_staged.materialized.graph import GraphError, TableGraph, followed_inputs
from airflow_provider_staged.materialized.lag import lag_text, table_lag
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB, dag_id_for
from airflow_provider_staged.materialized.params import RefreshRequestError, check_refresh_call
from airflow_provider_staged.materialized.propagation import downstream_spec, missed_keys
from airflow_provider_staged.materialized.query_change import (
    Column,
    QueryChangeError,
    check_definition_change,
)
from airflow_provider_staged.materialized.workflow.airflow_scheduler import (
    AirflowRefreshHandler,
    AirflowWorkflowScheduler,
)
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreatePeriodicRefreshWorkflow,
    ModifyRefreshWorkflowCronExpr,
    ModifyRefreshWorkflowDefinition,
    RefreshStatus,
    RefreshTrigger,
    ResumeRefreshWorkflow,
    SuspendRefreshWorkflow,
    WorkflowException,
)
from airflow_provider_staged.staging.errors import TableNotFoundError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.partition_paths import spec_text

log = logging.getLogger(__name__)


def _is_view(table: Any) -> bool:
    """Whether the catalog's ``table`` is a view (Hive's or a materialized view of another engine)."""
    return (table.tableType or "").upper() in ("VIRTUAL_VIEW", "MATERIALIZED_VIEW")


def _is_continuous(path: Path) -> bool:
    try:
        return load_definition(path).refresh_mode is RefreshMode.CONTINUOUS
    except DefinitionError:
        return False


def _follower(path: Path) -> MaterializedTableDefinition | None:
    """The definition when it is a FRESHNESS = DOWNSTREAM table's, else None."""
    try:
        definition = load_definition(path)
    except DefinitionError:
        return None
    return definition if definition.follows_inputs else None


@dataclass(frozen=True)
class TableDescription:
    """Everything ``describe`` shows about one materialized table."""

    identifier: TableIdentifier
    dag_id: str
    definition_path: Path
    definition: str
    freshness: str
    schedule: str | None  # as Airflow has parsed it; None when the DAG is missing
    paused: bool | None
    status: CatalogStatus
    handler_summary: str  # the refresh handler, as Flink's ``asSummaryString`` says it
    last_runs: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    table_exists: bool = False
    refresh_mode: str = "FULL"
    progress: Progress | None = None  # a CONTINUOUS table's last reported micro-batch
    # Every table the query reads, said of what kind (``TableGraph.described_inputs``), and the
    # materialized tables that read this one.
    inputs: tuple[str, ...] = ()
    dependents: tuple[TableIdentifier, ...] = ()
    # The materialized tables it reads that are suspended (auto-suspended upstream shows here).
    suspended_inputs: tuple[str, ...] = ()
    # The EXPECT constraints as written (``CONSTRAINT c EXPECT (...) [ON VIOLATION ...]``).
    expectations: tuple[str, ...] = ()
    # Per Flink's freshness (``materialized.lag.table_lag``): None when nothing is committed.
    lag: timedelta | None = None
    lag_text: str = "-"  # the lag for a person, late when more than the freshness


class MaterializedTables:
    """Create, suspend, resume, re-schedule, refresh, drop and describe refresh workflows."""

    def __init__(
        self, scheduler: AirflowWorkflowScheduler, metastore_uri: str | None, stop_timeout: float = 180.0
    ) -> None:
        self.scheduler = scheduler
        self.stop_timeout = stop_timeout
        self.store = CatalogStatusStore(metastore_uri)
        self.metastore_uri = metastore_uri
        self._graph: tuple[object, TableGraph] | None = None  # (the folder's stamp, its graph)

    def create(
        self,
        definition_text: str,
        cron: str | None = None,
        dynamic_options: Mapping[str, str] | None = None,
        execution_config: Mapping[str, str] | None = None,
    ) -> AirflowRefreshHandler:
        try:
            definition = parse_definition(definition_text)
        except DefinitionError as err:
            raise WorkflowException(str(err)) from None
        identifier = definition.identifier
        self.check_graph(definition)
        self.check_name_free(identifier)
        path = self.scheduler.definition_path_for(identifier)
        handler = self.scheduler.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(
                identifier, definition_text, cron, dict(dynamic_options or {}), dict(execution_config or {})
            )
        )
        serialized = self._serialize(handler)

        def activated(current: CatalogStatus) -> CatalogStatus:
            # The workflow runs from its unpause on: a first scheduled run may already have
            # failed and counted (or suspended the table) before this write; what it recorded
            # stays (resetting the streak here lost that count).
            return replace(current, refresh_status=current.refresh_status or RefreshStatus.ACTIVATED,
                           refresh_handler=serialized)

        self.store.update(identifier, path, activated)
        return handler

    def graph(self) -> TableGraph:
        """The dependency graph of the definitions folder, read again only when a file changed:
        reading it parses every query (sqlglot), and DESCRIBE of each table asks for it."""
        folder = self.scheduler.definitions_dir
        stamp = []
        for path in sorted(folder.glob(DEFINITION_GLOB)):
            try:
                found = path.stat()
            except FileNotFoundError:  # removed since the glob: not part of the graph either
                continue
            stamp.append((path.name, found.st_mtime_ns, found.st_size))
        if self._graph is None or self._graph[0] != stamp:
            self._graph = (stamp, TableGraph.from_folder(folder))
        return self._graph[1]

    def check_graph(self, definition: MaterializedTableDefinition) -> None:
        """Refuse a definition with which its table would read itself through other materialized
        tables, or a FRESHNESS = DOWNSTREAM one that reads none (checked on the folder alone:
        before the catalog, Spark or Airflow)."""
        try:
            graph = self.graph()
            graph.refuse_cycle(definition)
            if definition.follows_inputs:
                followed_inputs(definition, graph.nodes)
        except GraphError as err:
            raise WorkflowException(str(err)) from None

    def unrefreshed_upstream(
        self, definition: MaterializedTableDefinition, exists: Callable[[TableIdentifier], bool]
    ) -> list[TableIdentifier]:
        """The materialized tables ``definition`` reads that are not in the catalog yet (a table
        is from its first refresh on; ``exists`` asks the catalog): Spark's analysis of the query
        says only that no such table exists."""
        upstream = self.graph().with_definition(definition).upstream(definition.identifier)
        return [table for table in upstream if not exists(table)]

    def check_name_free(self, identifier: TableIdentifier) -> None:
        """Refuse to create ``identifier`` over a table or view that is not a materialized table.

        Flink refuses a CREATE whose identifier exists ("Table (or view) ... already exists");
        here adopting it would write the status into the user's table and let the first refresh
        replace its data. A materialized table is one whose parameters hold the refresh status
        (a table ``drop`` left behind has none: its data is the user's now), or one whose
        definition is in the folder (its status may still wait in the state file; the scheduler
        then reports the existing workflow). A database the catalog lacks is refused too, as
        Flink does: every refresh would fail on it. Without a metastore there is no catalog to ask.
        """
        if self.metastore_uri is None:
            return
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(identifier.database, identifier.table)
            if table is None:
                try:
                    client.database_location(identifier.database)
                except TableNotFoundError:
                    raise WorkflowException(
                        f"{identifier} not created: database {identifier.database!r} does not exist "
                        f"(create it first: `staged create-database {identifier.database}`)"
                    ) from None
        if table is None:
            return
        view = _is_view(table)
        if not view and REFRESH_STATUS_KEY in (table.parameters or {}):
            return
        if not view and self.scheduler.definition_file(dag_id_for(identifier)) is not None:
            return
        raise WorkflowException(
            f"{identifier} not created: {'view' if view else 'table'} {identifier} already exists in the "
            "catalog and is not a materialized table (drop it first or choose another name)"
        )

    def alter(
        self,
        definition_text: str,
        table_columns: Callable[[TableIdentifier], Sequence[Column] | None],
        query_columns: Callable[[str], Sequence[Column]],
    ) -> AirflowRefreshHandler:
        """``CREATE OR ALTER`` of an existing table: its workflow refreshes the new definition.

        The table keeps its data, refresh status and handler; the new query may only append
        columns (:mod:`.query_change`). ``table_columns``: the table's columns in the catalog,
        None when it was never refreshed; ``query_columns``: a query's output columns (Spark).
        """
        try:
            new = parse_definition(definition_text)
        except DefinitionError as err:
            raise WorkflowException(str(err)) from None
        handler, path = self._locate(new.identifier)
        self.check_graph(new)
        try:
            old = load_definition(path)
            check_definition_change(old, new, table_columns(new.identifier), query_columns(new.query))
        except (DefinitionError, QueryChangeError) as err:
            # Flink's message has two lines; clients print one: keep the column that differs.
            raise WorkflowException(" ".join(str(err).splitlines())) from None
        self.scheduler.modify_refresh_workflow(ModifyRefreshWorkflowDefinition(handler, definition_text))
        # Rewriting the status stores the new definition with the table (as Flink's catalog does).
        self.store.update(new.identifier, path, lambda current: current)
        return handler

    def suspend(
        self, identifier: TableIdentifier, reason: str | None = None, cascade: bool = False
    ) -> list[TableIdentifier]:
        """Pause the workflow; ``reason`` (e.g. ``SUSPENDED_DUE_TO_ERRORS``) is kept with the status.

        A CONTINUOUS table's running task sees the pause, stops its streaming query (the
        checkpoint stays for RESUME) and ends its run: this waits for that. ``cascade``: first
        every materialized table downstream that is not suspended yet, downstream-first, so no
        table refreshes while a table it reads no longer does. Returns the tables suspended.
        """
        handler, path = self._locate(identifier)
        if reason is None:  # a person's SUSPEND; auto-suspend records its reason regardless
            self._refuse_repeated(identifier, path, handler, RefreshStatus.SUSPENDED)
        done = []
        for table in self._cascade(identifier) if cascade else []:
            if self._suspend_one(table, *self._locate(table), None, skip_repeated=True):
                done.append(table)
        self._suspend_one(identifier, handler, path, reason)
        return [*done, identifier]

    def _suspend_one(
        self, identifier: TableIdentifier, handler: AirflowRefreshHandler, path: Path, reason: str | None,
        skip_repeated: bool = False,
    ) -> bool:
        """Suspend one table; False (nothing done) for an already suspended one if ``skip_repeated``."""
        if skip_repeated and self._repeated(identifier, path, handler, RefreshStatus.SUSPENDED):
            return False
        self.scheduler.modify_refresh_workflow(SuspendRefreshWorkflow(handler))
        self.store.save(identifier, path, RefreshStatus.SUSPENDED, self._serialize(handler), reason)
        if _is_continuous(path):
            self._wait_until_stopped(handler)
        return True

    def resume(
        self,
        identifier: TableIdentifier,
        dynamic_options: Mapping[str, str] | None = None,
        execution_config: Mapping[str, str] | None = None,
        cascade: bool = False,
    ) -> list[TableIdentifier]:
        """Unpause the workflow; ``cascade``: then every suspended materialized table downstream,
        upstream-first (each after the tables it reads; they keep their own options). Returns the
        tables resumed."""
        handler, path = self._locate(identifier)
        self._refuse_repeated(identifier, path, handler, RefreshStatus.ACTIVATED)
        downstream = self._cascade(identifier) if cascade else []
        self._resume_one(identifier, handler, path, dynamic_options, execution_config)
        done = [identifier]
        for table in reversed(downstream):
            table_handler, table_path = self._locate(table)
            if not self._repeated(table, table_path, table_handler, RefreshStatus.ACTIVATED):
                self._resume_one(table, table_handler, table_path)
                done.append(table)
        return done

    def _resume_one(
        self,
        identifier: TableIdentifier,
        handler: AirflowRefreshHandler,
        path: Path,
        dynamic_options: Mapping[str, str] | None = None,
        execution_config: Mapping[str, str] | None = None,
    ) -> None:
        follower = _follower(path)
        since = self._paused_since(handler) if follower is not None else None
        self.scheduler.modify_refresh_workflow(
            ResumeRefreshWorkflow(handler, dict(dynamic_options or {}), dict(execution_config or {}))
        )
        # RESUME clears an auto-suspension: its reason and the failure count.
        self.store.save(identifier, path, RefreshStatus.ACTIVATED, self._serialize(handler),
                        failures=FailureStreak())
        if follower is not None and since is not None:
            self._catch_up(handler, follower, since)
        if _is_continuous(path):
            self._restart_stream(handler)

    def _paused_since(self, handler: AirflowRefreshHandler) -> datetime | None:
        """When the DAG was paused; None (no catch-up) when Airflow does not let this user read
        its audit log: that must not keep the table from being resumed."""
        try:
            return self.scheduler.paused_since(handler)
        except WorkflowException as err:
            log.warning("%s: no catch-up of what it missed while suspended: %s", handler.dag_id, err)
            return None

    def _catch_up(self, handler: AirflowRefreshHandler, definition: MaterializedTableDefinition,
                  since: datetime) -> None:
        """Refresh what a FRESHNESS = DOWNSTREAM table's inputs committed while it was suspended:
        Airflow queued no run of a paused DAG for those events. Each such refresh propagates, as
        the run the event would have started."""
        try:
            events = self.scheduler.input_events(handler)
        except WorkflowException as err:  # resumed all the same: say what was not caught up
            log.warning("%s resumed without catching up what it missed while suspended: %s",
                        definition.identifier, err)
            return
        specs = []
        for key in missed_keys(events, since):
            spec = downstream_spec(key, definition.partition_by)
            if spec not in specs:
                specs.append(spec)
        for spec in specs:
            run_id = self.scheduler.trigger_refresh(
                handler, RefreshTrigger(static_partitions=spec, refresh_downstream=True))
            log.info("%s missed %s while suspended: refresh %s triggered", definition.identifier,
                     spec_text(spec) or "the whole table", run_id)

    def _cascade(self, identifier: TableIdentifier) -> list[TableIdentifier]:
        """The materialized tables downstream of ``identifier``, downstream-first, each located
        (its definition found) before any is changed."""
        tables = self.graph().dependents(identifier)
        for table in tables:
            self._locate(table)
        return tables

    def _refuse_repeated(
        self, identifier: TableIdentifier, path: Path, handler: AirflowRefreshHandler, wanted: RefreshStatus
    ) -> None:
        repeated = self._repeated(identifier, path, handler, wanted)
        if repeated:
            raise WorkflowException(repeated)

    def _repeated(
        self, identifier: TableIdentifier, path: Path, handler: AirflowRefreshHandler, wanted: RefreshStatus
    ) -> str | None:
        """Why a SUSPEND (``wanted``) or RESUME of ``identifier`` would repeat what is already so;
        None when it would not.

        Flink refuses a SUSPEND of a suspended table and a RESUME of an active one, naming the
        table (MaterializedTableStatementITCase.testAlterMaterializedTableWithRepeatedSuspendAnd
        ResumeIn{Full,Continuous}Mode): a repeated one would say it did what was already so, and a
        RESUME WITH (...) would change the options of a running table. The stored status decides
        when the DAG agrees (a DAG unpaused in Airflow's own UI is not suspended, whatever the
        status says); a CONTINUOUS table without a queued or running run may be resumed again,
        which restarts its stream from the checkpoint."""
        if self.store.load(identifier, path).refresh_status is not wanted:
            return None
        dag = self.scheduler.get_dag(handler)
        suspended = wanted is RefreshStatus.SUSPENDED
        if dag is None or bool(dag.is_paused) is not suspended:
            return None
        if not _is_continuous(path):
            what = "refresh workflow"
        elif suspended or any(run.state.value in ("queued", "running")
                              for run in self.scheduler.last_runs(handler, 5)):
            what = "continuous refresh job"
        else:
            return None
        return f"Materialized table {identifier} {what} has been {'suspended' if suspended else 'resumed'}."

    def reschedule(self, identifier: TableIdentifier, cron: str) -> None:
        handler, _ = self._locate(identifier)
        self.scheduler.modify_refresh_workflow(ModifyRefreshWorkflowCronExpr(handler, cron))

    def refresh(self, identifier: TableIdentifier, trigger: RefreshTrigger) -> str:
        """Validate the refresh call here (nothing is triggered if it is bad), then run it."""
        handler, path = self._locate(identifier)
        try:
            check_refresh_call(trigger.as_conf(), load_definition(path), datetime.now(timezone.utc))
        except (DefinitionError, RefreshRequestError) as err:
            raise WorkflowException(f"refresh of {identifier} not triggered: {err}") from None
        return self.scheduler.trigger_refresh(handler, trigger)

    def wait_for_refresh(self, identifier: TableIdentifier, run_id: str, timeout: float) -> str:
        """The final state of a refresh run (``success`` or ``failed``)."""
        handler, _ = self._locate(identifier)
        return self.scheduler.wait_for_run(handler, run_id, timeout).state.value

    def drop(self, identifier: TableIdentifier, cascade: bool = False) -> list[TableIdentifier]:
        """Delete the workflow and forget its status; the table's data stays in the catalog.

        A table that materialized tables read is refused, unless ``cascade``: then they are
        dropped too, downstream-first (streams stopped and statuses forgotten in that order; the
        workflows go together, one parse for all). A CONTINUOUS table's streaming query is
        stopped first (as SUSPEND does), then its checkpoint is deleted with the workflow.
        Returns the tables dropped, in order.
        """
        if cascade:
            order = [*self._cascade(identifier), identifier]
        else:
            try:
                self.graph().refuse_drop(identifier)
            except GraphError as err:
                raise WorkflowException(str(err)) from None
            order = [identifier]
        located = [(table, *self._locate(table)) for table in order]
        self.scheduler.connect()  # the status is forgotten only once Airflow can delete the workflow
        continuous = [(table, handler) for table, handler, path in located if _is_continuous(path)]
        for _, handler in continuous:  # stopped as SUSPEND stops it
            self.scheduler.modify_refresh_workflow(SuspendRefreshWorkflow(handler))
            self._wait_until_stopped(handler)
        for table, _, path in located:
            self.store.clear(table, path)
        self.scheduler.delete_refresh_workflows([handler for _, handler, _ in located])
        if self.metastore_uri is not None:
            for table, _ in continuous:
                drop_continuous_state(table_root(table, self.metastore_uri))
        return order

    def definition(self, identifier: TableIdentifier) -> MaterializedTableDefinition:
        """The table's definition, from its file in the definitions folder."""
        return self._definition(self._locate(identifier)[1])

    @staticmethod
    def _definition(path: Path) -> MaterializedTableDefinition:
        try:
            return load_definition(path)
        except DefinitionError as err:
            raise WorkflowException(str(err)) from None

    def describe(self, identifier: TableIdentifier, runs: int = 5) -> TableDescription:
        handler, path = self._locate(identifier)
        definition = self._definition(path)
        dag = self.scheduler.get_dag(handler)
        last_runs = [
            {"run_id": run.dag_run_id, "state": run.state.value, "run_after": run.run_after,
             "end_date": run.end_date, "conf": run.conf}
            for run in (self.scheduler.last_runs(handler, runs) if dag is not None and runs else [])
        ]
        exists, partitions, specs, committed_at = self._table_partitions(identifier)
        # A partition commit leaves the table's committed_at alone: a successful run's end counts too.
        ended = [_aware(run["end_date"]) for run in last_runs
                 if run["state"] == "success" and run["end_date"] is not None]
        last_commit = max([*ended, *([committed_at] if committed_at else [])], default=None)
        lag = table_lag(definition, datetime.now(timezone.utc), specs, last_commit) if exists else None
        continuous = definition.refresh_mode is RefreshMode.CONTINUOUS
        graph = self.graph()
        return TableDescription(
            identifier=identifier,
            dag_id=handler.dag_id,
            definition_path=path,
            definition=definition.text,
            freshness=definition.freshness_text,
            schedule=dag.timetable_summary if dag is not None else None,
            paused=dag.is_paused if dag is not None else None,
            status=self.store.load(identifier, path),
            handler_summary=handler.as_summary_string(),
            last_runs=last_runs,
            partitions=partitions,
            table_exists=exists,
            refresh_mode=definition.refresh_mode.value,
            progress=read_progress(table_root(identifier, self.metastore_uri))
            if continuous and self.metastore_uri is not None else None,
            inputs=graph.described_inputs(identifier),
            dependents=graph.downstream(identifier),
            suspended_inputs=self._suspended_inputs(graph, identifier),
            expectations=tuple(map(str, definition.constraints)),
            lag=lag,
            lag_text=lag_text(lag, definition.freshness.as_timedelta()),
        )

    def _suspended_inputs(self, graph: TableGraph, identifier: TableIdentifier) -> tuple[str, ...]:
        """``db.t: SUSPENDED (why)`` of each suspended materialized table ``identifier`` reads."""
        found = []
        for upstream in graph.upstream(identifier):
            status = self.store.load(upstream, graph.nodes[upstream].paths[0])
            if status.refresh_status is RefreshStatus.SUSPENDED:
                found.append(f"{upstream}: {status.status_text()}")
        return tuple(found)

    def list(self) -> list[tuple[TableIdentifier, Path]]:
        """Every definition in the folder with its table (broken files are left out)."""
        tables = []
        for path in sorted(self.scheduler.definitions_dir.glob(DEFINITION_GLOB)):
            try:
                tables.append((read_identifier(path), path))
            except DefinitionError:
                continue
        return tables

    def _restart_stream(self, handler: AirflowRefreshHandler) -> None:
        """Make sure a resumed CONTINUOUS table gets a run.

        Airflow 3.3 finishes the run of a paused DAG in a side loop
        (``_update_dag_run_state_for_paused_dags``) that does not clear the DAG's
        ``exceeds_max_non_backfill``: after the unpause the scheduler never makes the next
        ``@continuous`` run. A run triggered here streams from the checkpoint; its normal end
        resets the flag.
        """
        deadline = time.monotonic() + 2 * self.scheduler.poll_interval + 5
        while time.monotonic() < deadline:
            if any(run.state.value in ("queued", "running") for run in self.scheduler.last_runs(handler, 5)):
                return
            time.sleep(self.scheduler.poll_interval)
        self.scheduler.trigger_refresh(handler, RefreshTrigger(is_periodic=True))

    def _wait_until_stopped(self, handler: AirflowRefreshHandler) -> None:
        """Wait until no run of ``handler``'s DAG is running (its task noticed the pause)."""
        deadline = time.monotonic() + self.stop_timeout
        while any(run.state.value == "running" for run in self.scheduler.last_runs(handler, 5)):
            if time.monotonic() > deadline:
                raise WorkflowException(
                    f"the streaming refresh of {handler.dag_id} still runs {self.stop_timeout:.0f}s after "
                    "its DAG was paused"
                )
            time.sleep(self.scheduler.poll_interval)

    def _locate(self, identifier: TableIdentifier) -> tuple[AirflowRefreshHandler, Path]:
        """The handler recorded with the table, else the one its definition file implies."""
        dag_id = dag_id_for(identifier)
        path = self.scheduler.definition_file(dag_id)
        if path is None:
            raise WorkflowException(f"no materialized table {identifier}: {self._why_missing(identifier)}")
        stored = self.store.load(identifier, path).refresh_handler
        if stored is not None:
            handler = self.scheduler.get_refresh_handler_serializer().deserialize(stored)
        else:  # a definition dropped into the folder by hand: its DAG is still ours to manage
            handler = AirflowRefreshHandler(dag_id, self.scheduler.endpoint)
        return handler, path

    def _why_missing(self, identifier: TableIdentifier) -> str:
        """Why ``identifier`` has no workflow; an ordinary table or view of that name is named, as
        Flink names it ("Table ... is not a materialized table, does not support materialized table
        related operation", MaterializedTableStatementITCase.testDropMaterializedTableInContinuousMode)."""
        where = f"no definition in {self.scheduler.definitions_dir}"
        kind = self.ordinary_kind(identifier)
        return f"{kind} {identifier} of the catalog is not a materialized table ({where})" if kind else where

    def ordinary_kind(self, identifier: TableIdentifier) -> str | None:
        """``"table"`` or ``"view"`` when the catalog holds ``identifier`` without a materialized
        table's status; None otherwise, or when the catalog cannot be asked (this only words errors)."""
        if self.metastore_uri is None:
            return None
        try:
            with MetastoreClient(self.metastore_uri) as client:
                table = client.get_table(identifier.database, identifier.table)
        except Exception:
            return None
        if table is None or REFRESH_STATUS_KEY in (table.parameters or {}):
            return None
        return "view" if _is_view(table) else "table"

    def _serialize(self, handler: AirflowRefreshHandler) -> str:
        return self.scheduler.get_refresh_handler_serializer().serialize(handler).decode("utf-8")

    def _table_partitions(
        self, identifier: TableIdentifier
    ) -> tuple[bool, list[str], list[dict[str, str]], datetime | None]:
        """Whether the table exists, its partitions (``k=v/k=v`` and as column -> value) and
        when its last whole-table commit was (``staged.committed_at``)."""
        if self.metastore_uri is None:
            return False, [], [], None
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(identifier.database, identifier.table)
            if table is None:
                return False, [], [], None
            parts = client.partitions(identifier.database, identifier.table)
        keys = [column.name for column in table.partitionKeys or []]
        specs = [dict(zip(keys, part.values, strict=False)) for part in parts]
        committed = (table.parameters or {}).get("staged.committed_at", "")
        committed_at = datetime.fromtimestamp(int(committed), timezone.utc) if committed.isdigit() else None
        names = sorted("/".join(f"{k}={v}" for k, v in spec.items()) for spec in specs)
        return True, names, specs, committed_at


def _aware(moment: datetime) -> datetime:
    """A run's time from the REST API (aware), or as UTC when a client gives it naive."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
