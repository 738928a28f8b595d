"""``staged``: the local stack, reconcile/sweep of staged attempts, reading tables.

A command that fails prints ``error: <message>`` as one line on stderr and exits with code 1
(a usage error, e.g. a missing argument, with code 2); ``--debug`` (anywhere on the command
line) or ``STAGED_DEBUG=1`` raises the error instead, with its traceback.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
from typer.core import TyperGroup

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.cli.context import connection_settings
from airflow_provider_staged.cli.lifecycle import register as register_lifecycle
from airflow_provider_staged.cli.output import (
    MAX_WAIT_SECONDS,
    Output,
    OutputOption,
    console,
    one_line,
    print_json,
    print_rows,
)
from airflow_provider_staged.discovery.embedded import metastore_status, staged_home
from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
from airflow_provider_staged.materialized.workflow.scheduler import WorkflowException
from airflow_provider_staged.staging.errors import ServiceError, StagingError
from airflow_provider_staged.staging.identifiers import JAVA_INT_MAX, TableIdentifier, validate_name

if TYPE_CHECKING:
    from airflow_provider_staged.local.stack import StackStatus
    from airflow_provider_staged.staging.journal import AttemptRecord

# Errors the user can act on: bad input (ValueError covers InvalidIdentifierError,
# RefreshRequestError, DefinitionError), a failed staged operation or unreachable metastore
# (StagingError), Airflow (WorkflowException), a local service (ServiceError), a missing file.
USER_ERRORS: tuple[type[Exception], ...] = (
    ValueError, StagingError, WorkflowException, ServiceError, FileNotFoundError,
)
DEBUG_FLAG = "--debug"
# Sub-commands whose modules are imported only when the command runs (or `staged --help` lists
# it): `staged sql` starts without Airflow's REST client, the others without sqlglot.
LAZY_COMMANDS = {
    "mt": ("airflow_provider_staged.cli.materialized", "app"),
    "gateway": ("airflow_provider_staged.cli.gateway", "app"),
    "sql": ("airflow_provider_staged.cli.sql", "app"),
}


class _UserErrorGroup(TyperGroup):
    """Reports an error of any command as one ``error:`` line: exit code 1, usage errors 2.

    Also registers the :data:`LAZY_COMMANDS` when asked for them.
    """

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in LAZY_COMMANDS if name not in self.commands)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module, attribute = LAZY_COMMANDS[cmd_name]
            command = typer.main.get_command(getattr(importlib.import_module(module), attribute))
            command.name = cmd_name  # a sub-app's group has none; the help lists commands by it
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: typer.Context) -> Any:
        if not ctx.params.get("debug"):
            # Thrift logs a failed connect on its own; the one error line already says it.
            logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except typer.TyperException as err:  # typer's click errors: usage (exit code 2) and others
            if ctx.params.get("debug"):
                raise
            message = _with_bad_value(err.format_message(), err)  # type: ignore[attr-defined]
            usage_of = getattr(getattr(err, "ctx", None), "command_path", None)
            _fail(f"{message} (see `{usage_of} --help`)" if usage_of else message,
                  getattr(err, "exit_code", 1))
        except USER_ERRORS as err:
            if ctx.params.get("debug"):
                raise
            _fail(str(err) or type(err).__name__, 1)
        except Exception as err:  # a bug or an unexpected failure: still one line, with a way on
            if ctx.params.get("debug"):
                raise
            _fail(f"unexpected {type(err).__name__}: {err} (rerun with {DEBUG_FLAG} for the traceback)", 1)


def _with_bad_value(message: str, err: Exception) -> str:
    """``message`` naming the value typer refused: its pydantic check's words do not."""
    errors = getattr(err.__cause__, "errors", None)  # a pydantic ValidationError
    found = errors()[0].get("input") if callable(errors) and errors() else None
    return f"{message}, not {found!r}" if isinstance(found, str) and repr(found) not in message else message


def _fail(message: str, code: int) -> None:
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


# A flag takes no value, yet typer's help shows its type (``<bool>``) beside it: show none.
_display_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = (  # type: ignore[method-assign]
    lambda self, ctx: None if self.is_flag else _display_type(self, ctx)
)

app = typer.Typer(
    cls=_UserErrorGroup,
    help="Atomic Spark table builds and materialized tables for Airflow.",
    no_args_is_help=True,
    add_completion=False,
)
services = typer.Typer(help="The local Hive Metastore alone (`staged up` starts it with Airflow).",
                       no_args_is_help=True)
app.add_typer(services, name="services")
register_lifecycle(app)  # versions, rollback, expire, maintain (lifecycle_cli.py)

ConnOption = Annotated[str, typer.Option("--conn", help="staged_hive connection id")]


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option(
        DEBUG_FLAG, envvar="STAGED_DEBUG", help="show the traceback of an error")] = False,
) -> None:
    """Options of every command; ``debug`` is read from the context by ``_UserErrorGroup``."""


@app.command()
def up(
    dags_folder: Annotated[Path, typer.Option(
        envvar="STAGED_DAGS_FOLDER", help="the DAGs Airflow serves (holding materialized_tables.py)")
    ] = Path("dags"),
    port: Annotated[int | None, typer.Option(
        min=1, max=65535, help="the Airflow UI/API port [default: a free one]")] = None,
    engine: Annotated[str, typer.Option(
        envvar="STAGED_ENGINE", metavar="connect|embedded",
        help="where refresh tasks run Spark: connect = the stack's gateway (started with it; "
             "`staged sql` uses it too), embedded = a Spark in each task, no gateway")] = "connect",
) -> None:
    """Start the local metastore, the gateway and Airflow (UI, scheduler, DAG processor,
    triggerer) on 127.0.0.1."""
    from airflow_provider_staged.local.stack import StackEngine, stack_up

    try:
        chosen = StackEngine(engine)
    except ValueError:
        raise ValueError(f"invalid --engine {engine!r}: expected connect or embedded") from None
    _print_status(stack_up(staged_home(), dags_folder, port, chosen), Output.text)


@app.command()
def down() -> None:
    """Stop the local Airflow, the gateway and the metastore (every process they started)."""
    from airflow_provider_staged.local.stack import stack_down

    stopped = stack_down(staged_home())
    console.print(f"stopped: {', '.join(stopped)}" if stopped else f"nothing ran under {staged_home()}")


@app.command()
def status(output: OutputOption = Output.text) -> None:
    """What runs under $STAGED_HOME: processes, URLs, how to log in. Exit code 1 if not all runs."""
    from airflow_provider_staged.local.stack import stack_status

    current = stack_status(staged_home())
    _print_status(current, output)
    if not current.running:
        raise typer.Exit(1)


@app.command("run-dag")
def run_dag(
    dag_id: Annotated[str, typer.Argument(help="a DAG without schedule, e.g. example_staged_ctas")],
    wait: Annotated[float, typer.Option(
        min=1, max=MAX_WAIT_SECONDS, help="seconds to wait for the run to end")] = 900,
) -> None:
    """Unpause a DAG of the local Airflow (`staged up`), trigger a run and wait for it to end."""
    from airflow_provider_staged.local.airflow_server import run_dag as trigger_and_wait
    from airflow_provider_staged.local.stack import stack_status

    airflow = stack_status(staged_home()).airflow
    if airflow is None:
        raise ServiceError(f"no local Airflow runs under {staged_home()}: start it with `staged up`")
    run = trigger_and_wait(airflow, dag_id, wait)
    if run["state"] != "success":
        raise ServiceError(f"run {run['dag_run_id']} of {dag_id} ended {run['state']}: its task logs are "
                           f"at {airflow.endpoint}/dags/{dag_id}/runs/{run['dag_run_id']}")
    console.print(f"run {run['dag_run_id']} of {dag_id}: success", markup=False)


def _print_status(current: StackStatus, output: Output) -> None:
    from airflow_provider_staged.local import stack as local_stack

    if output is Output.json:
        print_json(current.as_dict())
        return
    metastore, airflow, gateway = current.metastore, current.airflow, current.gateway
    lines = [f"home        {current.home}"]
    lines.append(f"metastore   {metastore.uri} (pid {metastore.pid}), warehouse {metastore.warehouse}"
                 if metastore else "metastore   not running")
    lines.append(f"gateway     {gateway.public_url} (pid {gateway.pid}): `staged sql` runs here"
                 if gateway else "gateway     not running (`staged sql` runs Spark in its own process)")
    if current.engine is not None:
        lines.append(local_stack.engine_line(current))
    if airflow is None:
        lines.append("airflow     not running (start both with `staged up`)")
    else:
        lines += [
            f"airflow     {', '.join(f'{name} {pid}' for name, pid in airflow.pids.items())}",
            f"UI          {airflow.endpoint}/",
            f"REST API    {airflow.endpoint}/api/v2 (token: POST {airflow.endpoint}/auth/token)",
            f"login       user admin (or viewer, read-only); passwords in {airflow.passwords_file}",
            f"DAGs        {airflow.dags_folder}",
            f"definitions {airflow.env.get(local_stack.DEFINITIONS_ENV, '-')} (`staged mt create` writes "
            "here)",
        ]
    listening = ", ".join(f"{address}:{port}" for _, address, port in current.listening())
    lines.append(f"listening   {listening or '-'}")
    for line in lines:
        console.print(line, markup=False, highlight=False)


@services.command("up")
def services_up() -> None:
    """Start the local Hive Metastore (Derby) under $STAGED_HOME."""
    info = start_metastore()
    console.print(f"metastore {info.uri} pid {info.pid}, warehouse {info.warehouse}", markup=False)


@services.command("down")
def services_down() -> None:
    """Stop the local Hive Metastore."""
    console.print("metastore stopped" if stop_metastore() else "metastore was not running")


@services.command("status")
def services_status() -> None:
    """Show whether the local Hive Metastore runs (exit code 1 if not)."""
    info = metastore_status()
    if info is None:
        console.print(f"metastore: not running (home {staged_home()})", markup=False)
        raise typer.Exit(1)
    console.print(f"metastore: {info.uri} pid {info.pid}, warehouse {info.warehouse}", markup=False)


@app.command("create-database")
def create_database(
    names: Annotated[list[str], typer.Argument(help="database names")],
    conn: ConnOption = DEFAULT_CONN_ID,
) -> None:
    """Create databases in the metastore (under the warehouse) unless they exist."""
    from airflow_provider_staged.catalogs.metastore.client import MetastoreClient

    databases = [validate_name(name, "database name") for name in names]
    settings = connection_settings(conn)
    with MetastoreClient(settings.metastore_uri) as client:
        for name in databases:
            created = client.ensure_database(name, settings.warehouse)
            console.print(f"database {name}: {'created' if created else 'exists'}")


@app.command()
def reconcile(
    conn: ConnOption = DEFAULT_CONN_ID,
    airflow: Annotated[bool, typer.Option(help="ask Airflow's database for task states")] = True,
    output: OutputOption = Output.text,
) -> None:
    """Finish or roll back attempts whose task ended; expire abandoned ones (the sweep)."""
    from airflow_provider_staged.airflow.callbacks import airflow_task_state
    from airflow_provider_staged.staging.reconcile import reconcile as run_reconcile

    actions = run_reconcile(connection_settings(conn), airflow_task_state if airflow else None)
    rows = [{"attempt": a.attempt_id, "target": a.target, "action": a.action} for a in actions]
    print_rows(rows, output, "no open attempts")
    failed = [action for action in actions if action.action.startswith("failed")]
    if failed:
        raise StagingError(f"{len(failed)} attempt(s) could not be settled: run `staged reconcile` again")


@app.command()
def attempts(conn: ConnOption = DEFAULT_CONN_ID, output: OutputOption = Output.text) -> None:
    """List journaled staged attempts, newest first: what each did, for which run, how it ended."""
    records = sorted(connection_settings(conn).journal.records(), key=lambda r: r.created_at, reverse=True)
    print_rows([_attempt_row(record, output) for record in records], output, "no attempts in the journal")


def _attempt_row(record: AttemptRecord, output: Output) -> dict[str, Any]:
    """One attempt; as text, with fewer columns (a terminal of 100 columns folds fewer cells)."""
    task = record.task
    error = one_line(record.error or "")
    began = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created_at))
    outcome = f"{record.state.value}: {error}" if error else record.state.value
    verdict = (record.audits or {}).get("verdict")
    if verdict and verdict != "passed":  # quarantined, or published despite failed audits
        outcome = f"{outcome} (audits: {verdict.replace('_', ' ')})"
    if output is Output.json:
        return {"began": began, "target": record.target, "operation": record.operation,
                "partition": record.partitions_text, "dag_id": task.dag_id if task else None,
                "run_id": task.run_id if task else None, "try": task.try_number if task else None,
                "outcome": outcome, "attempt": record.attempt_id}
    return {"began": began, "target": record.target,
            "operation": f"{record.operation} {record.partitions_text}".rstrip(),
            "run": f"{task.dag_id} {task.run_id} #{task.try_number}" if task else "(no task)",
            "outcome": outcome, "attempt": record.attempt_id}


@app.command()
def show(
    table_name: Annotated[str, typer.Argument(help="database.table")],
    limit: Annotated[int, typer.Option(min=0, max=JAVA_INT_MAX, help="rows to print")] = 20,  # Spark's LIMIT
    conn: ConnOption = DEFAULT_CONN_ID,
    output: OutputOption = Output.text,
) -> None:
    """Print a table's current version (per partition for a partitioned one), its rows per
    partition and its first rows (pyarrow, no JVM)."""
    from airflow_provider_staged.catalogs.metastore.reader import read_table

    identifier = TableIdentifier.parse(table_name)
    snapshot = read_table(connection_settings(conn).metastore_uri, identifier, limit)
    # A partition refresh writes a version of its partitions only: the table has no one version.
    per_partition = snapshot.per_partition
    partitions = [{"partition": name, "rows": rows, "version": snapshot.partition_versions.get(name) or "-"}
                  for name, rows in snapshot.partition_rows.items()]
    rows = [dict(zip(snapshot.columns, row, strict=True)) for row in snapshot.rows]
    if output is Output.json:
        print_json({"table": str(identifier), "version": None if per_partition else snapshot.version,
                    "location": snapshot.location, "total_rows": snapshot.total_rows,
                    "partitions": partitions, "rows": rows})
        return
    if per_partition:
        console.print(f"{identifier}: {snapshot.total_rows} rows in {len(partitions)} partition"
                      f"{'' if len(partitions) == 1 else 's'}, each at its version", markup=False)
        print_rows(partitions, output, "")
    else:
        console.print(f"{identifier} version {snapshot.version}: {snapshot.total_rows} rows", markup=False)
    print_rows(rows, output, "(no rows)")


def main() -> None:
    # The process ends with the command: freezing the collector at exit spares the interpreter's
    # teardown its cyclic collections over every object of every module (after `staged sql` on a
    # gateway: pyspark's pandas/numpy/pyarrow/grpc, ~0.25 s of CPU). Atexit handlers (registered
    # later: run before), the flush of stdout/stderr and refcount finalizers still run.
    atexit.register(gc.freeze)
    args = sys.argv[1:]
    # ``--debug`` is an option of ``staged`` itself; accept it after a command too.
    cut = args.index("--") if "--" in args else len(args)
    if DEBUG_FLAG in args[:cut]:
        args = [DEBUG_FLAG, *(arg for arg in args[:cut] if arg != DEBUG_FLAG), *args[cut:]]
    app(args=args, prog_name=os.path.basename(sys.argv[0]) or "staged")
