"""``staged mt ...``: refresh workflows of materialized tables (FLIP-448, Airflow as scheduler).

The scheduler is configured FLIP-style (``--conf workflow-scheduler.airflow.endpoint=...``) or
by the shorthand options / environment variables below; with neither, the local Airflow that
``airflow_local`` started under ``$STAGED_HOME/airflow`` is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from airflow_provider_staged.identifiers import InvalidIdentifierError, TableIdentifier
from airflow_provider_staged.materialized.scheduler import (
    WORKFLOW_SCHEDULER_TYPE,
    RefreshTrigger,
    WorkflowException,
    create_workflow_scheduler,
)
from airflow_provider_staged.services.airflow_local import airflow_status
from airflow_provider_staged.services.metastore import metastore_status, staged_home

if TYPE_CHECKING:
    from airflow_provider_staged.materialized.manager import MaterializedTables

app = typer.Typer(help="Materialized tables: refresh workflows in Airflow.", no_args_is_help=True)
console = Console()

_PREFIX = "workflow-scheduler.airflow."
DynamicOptions = Annotated[list[str] | None, typer.Option(
    metavar="KEY=VALUE", show_default=False, help="option of the table's writes (repeatable)")]
ExecutionConfig = Annotated[list[str] | None, typer.Option(
    metavar="KEY=VALUE", show_default=False, help="Spark conf of the refresh job (repeatable)")]
TableArg = Annotated[str, typer.Argument(help="table or database.table")]


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    pairs = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{what} {item!r}: expected KEY=VALUE")
        pairs[key.strip()] = value
    return pairs


@app.callback()
def configure(
    ctx: typer.Context,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", metavar="KEY=VALUE", help="workflow-scheduler.* option (FLIP-448 style)")] = None,
    endpoint: Annotated[str | None, typer.Option(envvar="STAGED_AIRFLOW_ENDPOINT",
                                                 help="Airflow API, http://host:port")] = None,
    definitions_dir: Annotated[Path | None, typer.Option(
        envvar="STAGED_MT_DEFINITIONS_DIR", help="folder the DAG factory reads *.sql from")] = None,
    username: Annotated[str | None, typer.Option(envvar="STAGED_AIRFLOW_USERNAME")] = None,
    password: Annotated[str | None, typer.Option(envvar="STAGED_AIRFLOW_PASSWORD")] = None,
    metastore_uri: Annotated[str | None, typer.Option(
        envvar="STAGED_METASTORE_URI", help="thrift://host:port (default: the local metastore)")] = None,
) -> None:
    config = {WORKFLOW_SCHEDULER_TYPE: "airflow", **_pairs(conf, "--conf")}
    shorthand = {"endpoint": endpoint, "definitions-dir": definitions_dir, "username": username,
                 "password": password}
    config.update({_PREFIX + key: str(value) for key, value in shorthand.items() if value is not None})
    local = airflow_status(staged_home() / "airflow")
    if local is not None:
        config.setdefault(_PREFIX + "endpoint", local.endpoint)
        config.setdefault(_PREFIX + "definitions-dir", str(Path(local.dags_folder) / "materialized"))
    if metastore_uri is None:
        running = metastore_status()
        metastore_uri = running.uri if running is not None else None
    ctx.obj = (config, metastore_uri)


@contextmanager
def _tables(ctx: typer.Context) -> Iterator[MaterializedTables]:
    """An open ``MaterializedTables``; workflow and input errors end the command with code 1."""
    from airflow_provider_staged.materialized.manager import MaterializedTables  # loads Airflow

    config, metastore_uri = ctx.obj
    try:
        with create_workflow_scheduler(config) as scheduler:
            yield MaterializedTables(scheduler, metastore_uri)
    except (WorkflowException, InvalidIdentifierError) as err:
        console.print(f"[red]error:[/] {err}", soft_wrap=True)
        raise typer.Exit(1) from None


def _table(name: str) -> TableIdentifier:
    try:
        return TableIdentifier.parse(name)
    except InvalidIdentifierError as err:
        raise typer.BadParameter(str(err)) from None


@app.command()
def create(
    ctx: typer.Context,
    definition: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="a .sql definition")],
    cron: Annotated[str | None, typer.Option(help="override the schedule derived from FRESHNESS")] = None,
    dynamic_option: DynamicOptions = None,
    execution_config: ExecutionConfig = None,
) -> None:
    """Create the refresh workflow: install the definition and wait for its DAG."""
    text = definition.read_text(encoding="utf-8")
    with _tables(ctx) as tables:
        handler = tables.create(text, cron, _pairs(dynamic_option, "--dynamic-option"),
                                _pairs(execution_config, "--execution-config"))
        console.print(f"created {handler.as_summary_string()} (ACTIVATED)")


@app.command()
def suspend(ctx: typer.Context, table: TableArg) -> None:
    """Pause the table's refresh DAG (status SUSPENDED)."""
    with _tables(ctx) as tables:
        tables.suspend(_table(table))
        console.print(f"{table}: SUSPENDED")


@app.command()
def resume(
    ctx: typer.Context,
    table: TableArg,
    dynamic_option: DynamicOptions = None,
    execution_config: ExecutionConfig = None,
) -> None:
    """Unpause the refresh DAG; given options become the defaults of later refreshes."""
    with _tables(ctx) as tables:
        tables.resume(_table(table), _pairs(dynamic_option, "--dynamic-option"),
                      _pairs(execution_config, "--execution-config"))
        console.print(f"{table}: ACTIVATED")


@app.command()
def reschedule(ctx: typer.Context, table: TableArg, cron: Annotated[str, typer.Argument()]) -> None:
    """Replace the refresh schedule with a five-field cron expression."""
    with _tables(ctx) as tables:
        tables.reschedule(_table(table), cron)
        console.print(f"{table}: schedule {cron}")


@app.command()
def refresh(
    ctx: typer.Context,
    table: TableArg,
    partition: Annotated[list[str] | None, typer.Option(
        metavar="COL=VALUE", help="refresh these partitions (one-time refresh)")] = None,
    schedule_time: Annotated[str | None, typer.Option(
        help="'yyyy-MM-dd HH:mm:ss': refresh the partition this periodic time is responsible for")] = None,
    dynamic_option: DynamicOptions = None,
    execution_config: ExecutionConfig = None,
    wait: Annotated[float, typer.Option(help="seconds to wait for the run; 0 returns at once")] = 0,
) -> None:
    """Trigger a refresh now (a DAG run with the FLIP-448 refresh conf); print the run id."""
    trigger = RefreshTrigger(
        is_periodic=schedule_time is not None and not partition,
        schedule_time=schedule_time,
        dynamic_options=_pairs(dynamic_option, "--dynamic-option"),
        static_partitions=_pairs(partition, "--partition"),
        execution_config=_pairs(execution_config, "--execution-config"),
    )
    with _tables(ctx) as tables:
        run_id = tables.refresh(_table(table), trigger)
        console.print(f"run {run_id}")
        if wait > 0:
            state = tables.wait_for_refresh(_table(table), run_id, wait)
            console.print(f"run {run_id}: {state}")
            if state != "success":
                raise typer.Exit(1)


@app.command()
def drop(ctx: typer.Context, table: TableArg) -> None:
    """Delete the refresh workflow and its status (the table's data stays)."""
    with _tables(ctx) as tables:
        tables.drop(_table(table))
        console.print(f"{table}: workflow deleted")


@app.command()
def describe(ctx: typer.Context, table: TableArg) -> None:
    """Definition, freshness, schedule, status, last refreshes and partitions."""
    with _tables(ctx) as tables:
        info = tables.describe(_table(table))
    status = info.status
    facts = Table(show_header=False)
    for key, value in [
        ("table", f"{info.identifier} ({'exists' if info.table_exists else 'not refreshed yet'})"),
        ("definition", str(info.definition_path)),
        ("freshness", info.freshness),
        ("schedule", info.schedule or "DAG not found in Airflow"),
        ("refresh status", f"{status.refresh_status.value if status.refresh_status else '-'}"
                           f" (stored in {status.stored_in})"),
        ("paused", str(info.paused)),
        ("refresh handler", status.refresh_handler or "-"),
        ("dynamic options", json.dumps(dict(status.dynamic_options))),
        ("execution config", json.dumps(dict(status.execution_config))),
        ("partitions", ", ".join(info.partitions) or "-"),
    ]:
        facts.add_row(key, value)
    console.print(facts)
    runs = Table("run", "state", "run after", "ended", "conf", title="last refreshes")
    for run in info.last_runs:
        runs.add_row(run["run_id"], run["state"], str(run["run_after"]), str(run["end_date"] or "-"),
                     json.dumps(run["conf"]))
    console.print(runs)
    console.print(info.definition)


@app.command("list")
def list_tables(ctx: typer.Context) -> None:
    """Every materialized table in the definitions folder with its status and schedule."""
    with _tables(ctx) as tables:
        out = Table("table", "dag", "status", "paused", "schedule", "definition")
        for identifier, path in tables.list():
            info = tables.describe(identifier, runs=0)
            status = info.status.refresh_status
            out.add_row(str(identifier), info.dag_id, status.value if status else "-", str(info.paused),
                        info.schedule or "-", path.name)
    console.print(out)
