"""``staged``: local services, reconcile/sweep of staged attempts, reading tables.

A command that fails with a user error (bad input, a missing file, a metastore or Airflow that
cannot be reached) prints ``error: <message>`` as one line on stderr and exits with code 1;
``--debug`` (or ``STAGED_DEBUG=1``) raises it instead, with its traceback. Usage errors exit
with code 2, as typer reports them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from airflow_provider_staged.assets import DEFAULT_CONN_ID
from airflow_provider_staged.identifiers import TableIdentifier, validate_name
from airflow_provider_staged.lifecycle_cli import register as register_lifecycle
from airflow_provider_staged.materialized.cli import app as materialized_app
from airflow_provider_staged.materialized.scheduler import WorkflowException
from airflow_provider_staged.services.metastore import (
    metastore_status,
    staged_home,
    start_metastore,
    stop_metastore,
)
from airflow_provider_staged.staging.errors import StagingError

if TYPE_CHECKING:
    from airflow_provider_staged.settings import StagedSettings

# Errors the user can act on: bad input (ValueError covers InvalidIdentifierError,
# RefreshRequestError, DefinitionError), a failed staged operation or unreachable metastore
# (StagingError), Airflow (WorkflowException), a missing file. Anything else is a bug: traceback.
USER_ERRORS: tuple[type[Exception], ...] = (ValueError, StagingError, WorkflowException, FileNotFoundError)


class _UserErrorGroup(TyperGroup):
    """Reports a user error of any command as one ``error:`` line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except USER_ERRORS as err:
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: {one_line(str(err) or type(err).__name__)}", err=True)
            raise typer.Exit(1) from None


def one_line(message: str) -> str:
    """``message`` with its lines joined: a multi-line server error stays one ``error:`` line."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


app = typer.Typer(
    cls=_UserErrorGroup,
    help="Atomic Spark table builds and materialized tables for Airflow.",
    no_args_is_help=True,
)
services = typer.Typer(help="The embedded default runtime: a local Hive Metastore.", no_args_is_help=True)
app.add_typer(services, name="services")
app.add_typer(materialized_app, name="mt", help="Materialized tables.")
console = Console()
register_lifecycle(app)  # versions, rollback, expire, maintain (lifecycle_cli.py)

ConnOption = Annotated[str, typer.Option("--conn", help="staged_hive connection id")]


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option(
        "--debug", envvar="STAGED_DEBUG", help="show the traceback of an error")] = False,
) -> None:
    """Options of every command; ``debug`` is read from the context by ``_UserErrorGroup``."""


@services.command("up")
def services_up() -> None:
    """Start the local Hive Metastore (Derby) under $STAGED_HOME."""
    info = start_metastore()
    console.print(f"metastore [bold]{info.uri}[/] pid {info.pid}, warehouse {info.warehouse}")


@services.command("down")
def services_down() -> None:
    """Stop the local services."""
    console.print("metastore stopped" if stop_metastore() else "metastore was not running")


@services.command("status")
def services_status() -> None:
    """Show whether the local services run."""
    info = metastore_status()
    if info is None:
        console.print(f"metastore: not running (home {staged_home()})")
        raise typer.Exit(1)
    console.print(f"metastore: {info.uri} pid {info.pid}, warehouse {info.warehouse}")


@app.command("create-database")
def create_database(
    names: Annotated[list[str], typer.Argument(help="database names")],
    conn: ConnOption = DEFAULT_CONN_ID,
) -> None:
    """Create databases in the metastore (under the warehouse) unless they exist."""
    from airflow_provider_staged.metastore.client import MetastoreClient

    databases = [validate_name(name, "database name") for name in names]
    settings = _settings(conn)
    with MetastoreClient(settings.metastore_uri) as client:
        for name in databases:
            created = client.ensure_database(name, settings.warehouse)
            console.print(f"database {name}: {'created' if created else 'exists'}")


def _settings(conn_id: str) -> StagedSettings:
    from airflow_provider_staged.hooks.staged_table import StagedTableHook

    try:
        return StagedTableHook(conn_id).get_settings()
    except RuntimeError as err:  # the hook's "no connection <id> and no local metastore"
        raise StagingError(str(err)) from err


@app.command()
def reconcile(
    conn: ConnOption = DEFAULT_CONN_ID,
    airflow: Annotated[bool, typer.Option(help="ask Airflow's database for task states")] = True,
) -> None:
    """Finish or roll back attempts whose task ended; expire abandoned ones (the sweep)."""
    from airflow_provider_staged.callbacks import airflow_task_state
    from airflow_provider_staged.staging.reconcile import reconcile as run_reconcile

    actions = run_reconcile(_settings(conn), airflow_task_state if airflow else None)
    table = Table("attempt", "target", "action")
    for action in actions:
        table.add_row(action.attempt_id, action.target, action.action)
    console.print(table if actions else "no open attempts")
    failed = [action for action in actions if action.action.startswith("failed")]
    if failed:
        raise StagingError(f"{len(failed)} attempt(s) could not be settled: run `staged reconcile` again")


@app.command()
def attempts(conn: ConnOption = DEFAULT_CONN_ID) -> None:
    """List journaled staged attempts."""
    table = Table("attempt", "target", "purpose", "state", "updated", "task")
    for record in _settings(conn).journal.records():
        task = f"{record.task.dag_id}.{record.task.task_id} #{record.task.try_number}" if record.task else ""
        updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.updated_at))
        table.add_row(record.attempt_id, record.target, record.purpose, record.state.value, updated, task)
    console.print(table)


@app.command()
def show(
    table_name: Annotated[str, typer.Argument(help="database.table")],
    limit: Annotated[int, typer.Option(help="rows to print")] = 20,
    conn: ConnOption = DEFAULT_CONN_ID,
) -> None:
    """Print a table's current version and rows (read with pyarrow, no JVM)."""
    from airflow_provider_staged.reader import read_table

    identifier = TableIdentifier.parse(table_name)
    snapshot = read_table(_settings(conn).metastore_uri, identifier, limit)
    console.print(f"[bold]{identifier}[/] version {snapshot.version}: {snapshot.total_rows} rows")
    if snapshot.partition_rows:
        partitions = Table("partition", "rows")
        for name, rows in snapshot.partition_rows.items():
            partitions.add_row(name, str(rows))
        console.print(partitions)
    out = Table(*snapshot.columns)
    for row in snapshot.rows:
        out.add_row(*(str(value) for value in row))
    console.print(out)


def main() -> None:
    app()
