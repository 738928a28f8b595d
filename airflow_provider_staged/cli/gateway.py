"""``staged gateway start|stop|status``: the local Spark Connect server (``local/gateway.py``).

Registered on the main ``staged`` app (so its one-line errors apply).
"""

from __future__ import annotations

from typing import Annotated

import typer

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.cli.output import Output, OutputOption, console, print_json
from airflow_provider_staged.discovery.embedded import gateway_status, staged_home
from airflow_provider_staged.local.gateway import start_gateway, stop_gateway

app = typer.Typer(
    help="The gateway: a Spark Connect server on 127.0.0.1 with a token, on the staged metastore, "
    "shared by `staged sql` and tasks with engine connect.",
    no_args_is_help=True,
)


def _say(line: str) -> None:
    console.print(line, markup=False, highlight=False)


@app.command("start")
def start(
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="port [default: a free one]")] = None,
    conn: Annotated[str, typer.Option(
        "--conn", help="staged_hive connection: the metastore and warehouse to use")] = DEFAULT_CONN_ID,
    master: Annotated[str, typer.Option(help="the server's Spark master")] = "local[*]",
) -> None:
    """Start the gateway under $STAGED_HOME (unless it runs) and wait until it answers."""
    from airflow_provider_staged.cli.context import connection_settings

    settings = connection_settings(conn)
    info = start_gateway(settings.metastore_uri, settings.warehouse, port=port, master=master,
                         spark_conf=settings.spark_conf)
    _say(f"gateway {info.public_url} pid {info.pid}, metastore {info.metastore_uri}")
    _say(f"token in {info.as_dict()['token_file']} (the URL to connect: sc://localhost:{info.port}/;token=<it>)")


@app.command("stop")
def stop() -> None:
    """Stop the gateway (SIGTERM, then SIGKILL if it lingers)."""
    _say("gateway stopped" if stop_gateway() else "gateway was not running")


@app.command("status")
def status(output: OutputOption = Output.text) -> None:
    """Show whether the gateway runs, its URL and pid (exit code 1 if not)."""
    info = gateway_status()
    if output is Output.json:
        print_json({"running": info is not None, **(info.as_dict() if info else {})})
    elif info is None:
        _say(f"gateway: not running (home {staged_home()})")
    else:
        _say(f"gateway: {info.public_url} pid {info.pid}, metastore {info.metastore_uri}")
    if info is None:
        raise typer.Exit(1)
