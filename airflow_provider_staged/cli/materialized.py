"""``staged mt ...``: refresh workflows of materialized tables (FLIP-448, Airflow as scheduler).

The scheduler is configured FLIP-style (``--conf workflow-scheduler.airflow.endpoint=...``) or
by the shorthand options / environment variables below; with neither, the local Airflow that
``local/airflow_server.py`` started under ``$STAGED_HOME/airflow`` is used. Input is checked before any
server is contacted; errors are reported by the ``staged`` command (one line, exit code 1).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from airflow_provider_staged.cli.context import (
    ENV,
    configured_scheduler,
    open_tables,
    parse_pairs,
    parse_partition_pairs,
    scheduler_setup,
)
from airflow_provider_staged.cli.output import (
    MAX_WAIT_SECONDS,
    Output,
    OutputOption,
    console,
    print_facts,
    print_json,
    print_rows,
)
from airflow_provider_staged.materialized.definition import DefinitionError, load_definition
from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.params import (
    SCHEDULE_TIME,
    STATIC_PARTITIONS,
    RefreshRequestError,
    execution_conf,
    parse_refresh_request,
    writer_options,
)
from airflow_provider_staged.materialized.workflow.scheduler import (
    RefreshTrigger,
    WorkflowException,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.partition_paths import spec_text

if TYPE_CHECKING:
    from airflow_provider_staged.materialized.continuous_run import Progress
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler

app = typer.Typer(help="Materialized tables: refresh workflows in Airflow.", no_args_is_help=True)

DynamicOptions = Annotated[list[str] | None, typer.Option(
    metavar="KEY=VALUE", show_default=False, help="option of the table's writes (repeatable)")]
ExecutionConfig = Annotated[list[str] | None, typer.Option(
    metavar="KEY=VALUE", show_default=False, help="Spark conf of the refresh job (repeatable)")]
TableArg = Annotated[str, typer.Argument(help="table or database.table")]
Cascade = Annotated[bool, typer.Option(
    "--cascade", help="also every materialized table downstream (that reads it, directly or not)")]


def _checked_pairs(
    values: list[str] | None, flag: str, check: Callable[[Mapping[str, str]], dict[str, str]]
) -> dict[str, str]:
    """``KEY=VALUE`` options checked as a refresh checks them, the error naming the flag."""
    try:
        return check(parse_pairs(values, flag))
    except RefreshRequestError as err:
        raise RefreshRequestError(f"{flag}: {err}") from None


def _dynamic_options(values: list[str] | None) -> dict[str, str]:
    return _checked_pairs(values, "--dynamic-option", writer_options)


def _execution_config(values: list[str] | None) -> dict[str, str]:
    return _checked_pairs(values, "--execution-config", execution_conf)


@app.callback()
def configure(
    ctx: typer.Context,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", metavar="KEY=VALUE", help="workflow-scheduler.* option (FLIP-448 style)")] = None,
    endpoint: Annotated[str | None, typer.Option(envvar=ENV["endpoint"],
                                                 help="Airflow API, http://host:port")] = None,
    definitions_dir: Annotated[Path | None, typer.Option(
        envvar=ENV["definitions_dir"], help="folder the DAG factory reads *.sql from")] = None,
    username: Annotated[str | None, typer.Option(envvar=ENV["username"])] = None,
    password: Annotated[str | None, typer.Option(envvar=ENV["password"])] = None,
    metastore_uri: Annotated[str | None, typer.Option(
        envvar=ENV["metastore_uri"], help="thrift://host:port (default: the local metastore)")] = None,
) -> None:
    ctx.obj = scheduler_setup(parse_pairs(conf, "--conf"), endpoint, definitions_dir, username, password,
                              metastore_uri)


def _check_refresh(
    scheduler: AirflowWorkflowScheduler, identifier: TableIdentifier, trigger: RefreshTrigger
) -> None:
    """Refuse a bad refresh call before contacting Airflow: the definition file is local."""
    path = scheduler.definition_file(dag_id_for(identifier))
    if path is None:  # MaterializedTables.refresh reports the missing table
        return
    try:
        # The run time only fills in a missing scheduleTime; this call just validates.
        parse_refresh_request(trigger.as_conf(), load_definition(path), datetime.now(timezone.utc))
    except (DefinitionError, RefreshRequestError) as err:  # worded as MaterializedTables.refresh
        raise WorkflowException(f"refresh of {identifier} not triggered: {err}") from None


@app.command()
def create(
    ctx: typer.Context,
    definition: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="a .sql definition")],
    cron: Annotated[str | None, typer.Option(help="override the schedule derived from FRESHNESS")] = None,
    dynamic_option: DynamicOptions = None,
    execution_config: ExecutionConfig = None,
    check: Annotated[bool, typer.Option(
        "--check/--no-check",
        help="let Spark analyse the query first and refuse a definition that does not fit it, as "
        "CREATE in `staged sql` does; --no-check leaves that to the first refresh")] = True,
) -> None:
    """Create the refresh workflow: install the definition and wait for its DAG."""
    text = definition.read_text(encoding="utf-8")
    options, sql_conf = _dynamic_options(dynamic_option), _execution_config(execution_config)
    scheduler = configured_scheduler(ctx.obj)
    if check:
        _check_definition(text, definition, ctx.obj.metastore_uri, scheduler)
    with open_tables(ctx.obj, scheduler) as tables:
        handler = tables.create(text, cron, options, sql_conf)
        console.print(f"created {handler.as_summary_string()} (ACTIVATED)")


def _check_definition(
    text: str, path: Path, metastore_uri: str | None, scheduler: AirflowWorkflowScheduler
) -> None:
    """Flink's CREATE checks (columns, key, partitions, formatters) against Spark's analysis of
    the query, on the local stack's gateway when it runs on this metastore, else in a Spark
    session of this process: refused before anything exists. A name taken
    by a table that is not a materialized one is refused first, before Spark starts (``create``
    refuses it again, whatever the check)."""
    if metastore_uri is None:  # the refresh tasks know theirs (an Airflow connection); the CLI does not
        typer.echo("not checked against its query: no metastore configured (--metastore-uri); "
                   "the first refresh checks it", err=True)
        return
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
    from airflow_provider_staged.cli.sql import (
        catalog_settings,
        embedded_spark,
        gateway_spark,
        quiet_spark_errors,
    )
    from airflow_provider_staged.discovery.embedded import gateway_status
    from airflow_provider_staged.materialized.definition import parse_definition
    from airflow_provider_staged.materialized.graph import unrefreshed
    from airflow_provider_staged.materialized.output_schema import refresh_query
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables

    try:
        definition = parse_definition(text, path)
    except DefinitionError as err:
        raise WorkflowException(str(err)) from None
    tables = MaterializedTables(scheduler, metastore_uri)
    tables.check_graph(definition)  # a cycle is named before Spark finds a table of it missing
    with MetastoreClient(metastore_uri):  # an unreachable one, named in one line before Spark starts
        pass
    tables.check_name_free(definition.identifier)
    quiet_spark_errors()
    gateway = gateway_status()
    if gateway is not None and gateway.metastore_uri == metastore_uri:  # the local stack's: warm
        started_here, spark = True, gateway_spark(gateway.url)
    else:
        started_here = SparkSession.getActiveSession() is None  # else getOrCreate lends the caller's
        spark = embedded_spark(catalog_settings(metastore_uri, None), "local[1]", {})
    try:
        missing = tables.unrefreshed_upstream(definition, lambda t: spark.catalog.tableExists(t.quoted))
        if missing:
            raise WorkflowException(f"{definition.identifier} not created: "
                                    f"{unrefreshed(missing[0], definition)}")
        refresh_query(definition, spark)
    except DefinitionError as err:
        raise WorkflowException(f"{definition.identifier} not created: {err}") from None
    except PySparkException as err:
        reason = str(err).strip().splitlines()[0]
        raise WorkflowException(f"{definition.identifier} not created: Spark cannot analyse its query: "
                                f"{reason} (--no-check leaves this to the first refresh)") from None
    finally:
        if started_here:
            spark.stop()


@app.command()
def suspend(ctx: typer.Context, table: TableArg, cascade: Cascade = False) -> None:
    """Pause the table's refresh DAG (status SUSPENDED); --cascade: the tables downstream first."""
    identifier = TableIdentifier.parse(table)
    with open_tables(ctx.obj) as tables:
        for done in tables.suspend(identifier, cascade=cascade):
            console.print(f"{done}: SUSPENDED")


@app.command()
def resume(
    ctx: typer.Context,
    table: TableArg,
    dynamic_option: DynamicOptions = None,
    execution_config: ExecutionConfig = None,
    cascade: Cascade = False,
) -> None:
    """Unpause the refresh DAG; given options become the defaults of later refreshes (of this
    table; --cascade then resumes the suspended tables downstream, with their own)."""
    identifier = TableIdentifier.parse(table)
    options, sql_conf = _dynamic_options(dynamic_option), _execution_config(execution_config)
    with open_tables(ctx.obj) as tables:
        for done in tables.resume(identifier, options, sql_conf, cascade=cascade):
            console.print(f"{done}: ACTIVATED")


@app.command()
def reschedule(ctx: typer.Context, table: TableArg, cron: Annotated[str, typer.Argument()]) -> None:
    """Replace the refresh schedule with a five-field cron expression."""
    identifier = TableIdentifier.parse(table)
    with open_tables(ctx.obj) as tables:
        tables.reschedule(identifier, cron)
        console.print(f"{identifier}: schedule {cron}")


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
    wait: Annotated[float, typer.Option(
        min=0, max=MAX_WAIT_SECONDS, help="seconds to wait for the run; 0 returns at once")] = 0,
    downstream: Annotated[bool, typer.Option(
        "--downstream", help="the FRESHNESS = DOWNSTREAM tables that read it refresh the same "
        "partition after it commits, and theirs after them (a periodic refresh always propagates)",
    )] = False,
) -> None:
    """Trigger a refresh now (a DAG run with the FLIP-448 refresh conf); print the run id."""
    identifier = TableIdentifier.parse(table)
    trigger = RefreshTrigger(
        is_periodic=schedule_time is not None and not partition,
        schedule_time=schedule_time,
        dynamic_options=_dynamic_options(dynamic_option),
        static_partitions=parse_partition_pairs(partition),
        execution_config=_execution_config(execution_config),
        refresh_downstream=downstream,
    )
    scheduler = configured_scheduler(ctx.obj)
    _check_refresh(scheduler, identifier, trigger)
    with open_tables(ctx.obj, scheduler) as tables:
        run_id = tables.refresh(identifier, trigger)
        console.print(f"run {run_id}")
        if wait > 0:
            state = tables.wait_for_refresh(identifier, run_id, wait)
            if state != "success":
                raise WorkflowException(f"refresh run {run_id} of {identifier} ended {state}: its task "
                                        f"log in the Airflow UI ({tables.scheduler.endpoint}) says why")
            console.print(f"run {run_id}: {state}")


@app.command()
def drop(ctx: typer.Context, table: TableArg, cascade: Cascade = False) -> None:
    """Delete the refresh workflow and its status (the table's data stays); a table that others
    read only with --cascade, which drops them first."""
    identifier = TableIdentifier.parse(table)
    with open_tables(ctx.obj) as tables:
        for done in tables.drop(identifier, cascade):
            console.print(f"{done}: workflow deleted")


@app.command()
def graph(ctx: typer.Context, output: OutputOption = Output.text) -> None:
    """The tables' dependencies, from the definitions folder alone: one line per edge
    ``upstream -> downstream``, then the tables without any."""
    from airflow_provider_staged.materialized.definition import DOWNSTREAM
    from airflow_provider_staged.materialized.graph import TableGraph, chain

    found = TableGraph.from_folder(configured_scheduler(ctx.obj).definitions_dir)
    edges, cycles, duplicates = found.edges(), found.cycles(), found.duplicates()
    if output is Output.json:
        print_json({
            "nodes": [{"table": table.name, "definitions": [str(path) for path in node.paths],
                       "freshness": node.freshness,
                       "inputs": list(node.inputs), "upstream": [t.name for t in found.upstream(table)],
                       "downstream": [t.name for t in found.downstream(table)]}
                      for table, node in sorted(found.nodes.items(), key=lambda item: item[0].name)],
            "edges": [{"upstream": up.name, "downstream": down.name} for up, down in edges],
            "cycles": [[table.name for table in cycle] for cycle in cycles],
        })
        return
    linked = {table for edge in edges for table in edge}
    # A table refreshed on its inputs' commits says so where it appears downstream.
    lines = [f"{chain(edge)}{' (DOWNSTREAM)' if found.nodes[edge[1]].freshness == DOWNSTREAM else ''}"
             for edge in edges]
    lines += [table.name for table in found.tables() if table not in linked]
    lines += [f"cycle: {chain(cycle)}" for cycle in cycles]
    lines += [f"{table} is defined by several files (no DAG refreshes it): "
              f"{', '.join(path.name for path in paths)}" for table, paths in duplicates.items()]
    typer.echo("\n".join(lines) if lines else "no materialized tables")


@app.command()
def shards(
    count: Annotated[int, typer.Argument(help="number of DAG files (2-256): ~600 tables each")],
    dags_folder: Annotated[Path, typer.Option(help="Airflow's DAGs folder")],
) -> None:
    """Build the refresh DAGs from COUNT DAG files instead of one (thousands of tables): each parse
    of a file is then 1/COUNT of the whole, and a change re-parses only its table's file."""
    from airflow_provider_staged.materialized.workflow.shards import install_shard_files

    files = install_shard_files(dags_folder, count)
    console.print(f"wrote {len(files)} shard files into {dags_folder} ({files[0].name} ...). With "
                  "thousands of tables, set Airflow's [dag_processor] min_file_process_interval to "
                  "3600: changes made through `staged mt` and `staged sql` are parsed at once")


@app.command()
def describe(ctx: typer.Context, table: TableArg, output: OutputOption = Output.text) -> None:
    """Definition, freshness, schedule, status, last refreshes and partitions."""
    identifier = TableIdentifier.parse(table)
    with open_tables(ctx.obj) as tables:
        info = tables.describe(identifier)
    status = info.status
    facts = dict([
        ("table", f"{info.identifier} ({'exists' if info.table_exists else 'not refreshed yet'})"),
        ("definition", str(info.definition_path)),
        ("freshness", info.freshness),
        ("lag", info.lag_text),
        ("schedule", info.schedule or "DAG not found in Airflow"),
        ("refresh status", f"{status.status_text()} (stored in {status.stored_in})"),
        ("failed scheduled refreshes", f"{status.failures.count} in a row"
                                       + (f"; last: {status.failures.last_failure}"
                                          if status.failures.last_failure else "")),
        ("paused", str(info.paused)),
        ("refresh handler", info.handler_summary),
        ("dynamic options", json.dumps(dict(status.dynamic_options))),
        ("execution config", json.dumps(dict(status.execution_config))),
        ("partitions", ", ".join(info.partitions) or "-"),
        ("inputs", ", ".join(info.inputs) or "-"),
        ("dependents", ", ".join(table.name for table in info.dependents) or "-"),
        ("suspended inputs", "; ".join(info.suspended_inputs) or "-"),
        ("expectations", "; ".join(info.expectations) or "-"),
    ])
    if info.refresh_mode == "CONTINUOUS":
        facts.update(_streaming_facts(info.progress))
    if output is Output.json:
        runs = [{"run": run["run_id"], "state": run["state"], "run after": run["run_after"],
                 "ended": run["end_date"] or "-", "conf": json.dumps(run["conf"])} for run in info.last_runs]
        print_json({**facts, "last refreshes": runs, "definition text": info.definition})
        return
    print_facts(facts, output)
    print_rows([_run_row(run) for run in info.last_runs], output, "no refreshes yet", title="last refreshes")
    console.print(info.definition, markup=False, highlight=False)


def _run_row(run: Mapping[str, Any]) -> dict[str, str]:
    """One refresh for a person: its run id whole, what it refreshed, when, how long."""
    conf = run["conf"] or {}
    partitions = conf.get(STATIC_PARTITIONS) or {}
    refreshed = (spec_text(partitions)
                 or (f"period of {conf[SCHEDULE_TIME]}" if conf.get(SCHEDULE_TIME) else "-"))
    started, ended = run["run_after"], run["end_date"]
    took = f"{(ended - started).total_seconds():.0f} s" if started and ended else "-"
    return {"run": run["run_id"], "state": run["state"], "refreshed": refreshed,
            "run after": f"{started:%Y-%m-%d %H:%M:%S}" if started else "-", "took": took}


def _streaming_facts(progress: Progress | None) -> dict[str, str]:
    """A CONTINUOUS table's stream: its last micro-batch, rows/s and actual lag."""
    if progress is None:
        return {"refresh mode": "CONTINUOUS", "stream": "not started yet"}
    lag = progress.lag_seconds()
    stream = progress.state + (f": {progress.error}" if progress.error else "")
    return {
        "refresh mode": "CONTINUOUS",
        "stream": stream,
        "last batch": "-" if progress.batch_id is None
        else f"{progress.batch_id} ({progress.batch_rows} rows, started {progress.batch_started})",
        "rows/s": "-" if progress.rows_per_second is None else f"{progress.rows_per_second:g}",
        # Everything that arrived in the sources before `fresh_as_of` is in the table.
        "actual lag": "-" if lag is None else f"{lag:.1f} s (fresh as of {progress.fresh_as_of})",
    }


@app.command("list")
def list_tables(ctx: typer.Context, output: OutputOption = Output.text) -> None:
    """Every materialized table in the definitions folder with its status and schedule."""
    rows = []
    with open_tables(ctx.obj) as tables:
        for identifier, path in tables.list():
            info = tables.describe(identifier, runs=0)
            rows.append({"table": str(identifier), "dag": info.dag_id, "status": info.status.status_text(),
                         "paused": info.paused, "schedule": info.schedule or "-", "definition": path.name})
    print_rows(rows, output, "no materialized tables (create one with `staged mt create FILE.sql`)")
