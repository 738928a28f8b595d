"""``staged versions | rollback | expire | maintain | audits show | publish``: table lifecycle commands.

Registered on the main ``staged`` app by :func:`register` (so its one-line errors apply);
every change goes through the one commit path (``staging.rollback``, ``staging.expiry``).
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.cli.context import AIRFLOW_OPTION, ENV
from airflow_provider_staged.cli.output import Output, OutputOption, print_rows
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier

ConnOption = Annotated[str, typer.Option("--conn", help="staged_hive connection id")]


def _when(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))


PartitionOption = Annotated[
    list[str] | None,
    typer.Option(
        "--partition",
        metavar="COL=VALUE",
        show_default=False,
        help="only the partitions inside this spec (repeatable; partition-refreshed tables)",
    ),
]


def _spec(partition: list[str] | None) -> dict[str, str]:
    from airflow_provider_staged.cli.context import parse_partition_pairs  # as the refresh's

    return parse_partition_pairs(partition)


def versions(
    table_name: Annotated[str, typer.Argument(help="database.table")],
    partition: PartitionOption = None,
    conn: ConnOption = DEFAULT_CONN_ID,
    output: OutputOption = Output.text,
) -> None:
    """List a table's kept versions (time, rows, bytes, the run that made it); per partition
    for a partition-refreshed table."""
    from airflow_provider_staged.cli.context import connection_settings
    from airflow_provider_staged.staging.rollback import list_table_versions

    identifier = TableIdentifier.parse(table_name)  # a bad name fails before any server is asked
    spec = _spec(partition)
    found = list_table_versions(connection_settings(conn), identifier, spec)
    per_partition = any(v.partition is not None for v in found)
    rows = [{"version": v.version, **({"partition": v.partition} if per_partition else {}),
             "committed": _when(v.committed_at), "rows": v.rows, "bytes": v.bytes, "run": v.run,
             "status": "current" if v.current else "superseded"} for v in found]
    # Folded, never cut: the ids that tell versions apart stay whole at 100 columns.
    print_rows(rows, output, f"no kept versions of {table_name} in the journal")


def rollback(
    table_name: Annotated[str, typer.Argument(help="database.table")],
    to: Annotated[str, typer.Option("--to", help="the version to make current (see `staged versions`)")],
    partition: PartitionOption = None,
    conn: ConnOption = DEFAULT_CONN_ID,
) -> None:
    """Make a kept version current (one metastore call, journaled as its own attempt).

    For a partition-refreshed table: every partition the version holds, or those inside
    --partition.
    """
    from airflow_provider_staged.cli.context import connection_settings
    from airflow_provider_staged.cli.output import console
    from airflow_provider_staged.staging.rollback import rollback as run_rollback

    identifier = TableIdentifier.parse(table_name)
    spec = _spec(partition)
    record = run_rollback(connection_settings(conn), identifier, to, conn_id=conn, partition_spec=spec)
    restored = sorted(record.catalog.get("partitions") or {})
    what = f"{table_name} partition(s) {', '.join(restored)} are" if restored else f"{table_name} is"
    console.print(f"{what} now version {to} (rollback attempt {record.attempt_id})", soft_wrap=True,
                  highlight=False, markup=False)


def expire(
    tables: Annotated[
        list[str] | None, typer.Argument(help="database.table (default: every table with a TTL)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list what would be dropped, change nothing")
    ] = False,
    conn: ConnOption = DEFAULT_CONN_ID,
) -> None:
    """Drop expired partitions ('partition.expiration-time'); --dry-run lists them."""
    from airflow_provider_staged.cli.context import connection_settings
    from airflow_provider_staged.cli.output import console
    from airflow_provider_staged.staging.expiry import expire_table, sweep_expiry, untracked_ttl_message

    identifiers = [TableIdentifier.parse(name) for name in tables or []]
    settings = connection_settings(conn)
    if identifiers:
        plans = [expire_table(settings, i, dry_run=dry_run, conn_id=conn) for i in identifiers]
    else:
        report = sweep_expiry(settings, dry_run=dry_run, conn_id=conn)
        plans = report.plans
        if report.failures:
            raise StagingError(f"expiry failed for {report.failures}")
        for target in report.untracked:
            console.print(f"not expired: {untracked_ttl_message(target)}", soft_wrap=True, markup=False)
    verb = "would drop" if dry_run else "dropped"
    lines = [f"{verb} {plan.target} {name} ({location})" for plan in plans
             for name, location in sorted(plan.expired.items())]
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False, markup=False)  # never cut when piped
    console.print(f"{verb} {len(lines)} partition(s)")


def maintain(
    conn: ConnOption = DEFAULT_CONN_ID,
    airflow: Annotated[bool, typer.Option(help="ask Airflow's database for task states")] = True,
) -> None:
    """One maintenance pass: reconcile, partition expiry, version sweeps (what the DAG runs)."""
    from airflow_provider_staged.cli.context import connection_settings
    from airflow_provider_staged.cli.output import console
    from airflow_provider_staged.staging.maintenance import run_maintenance

    state = None
    if airflow:
        from airflow_provider_staged.airflow.callbacks import airflow_task_state as state
    report = run_maintenance(connection_settings(conn), state, conn_id=conn)
    for line in report.lines():
        console.print(line)
    if report.failed:
        raise StagingError("maintenance could not finish everything: run it again")


AttemptArgument = Annotated[str, typer.Argument(help="the attempt id (see `staged attempts`)")]


def audits_show(attempt: AttemptArgument, conn: ConnOption = DEFAULT_CONN_ID) -> None:
    """An attempt's audits: each one's outcome, count and, for a failure, sample rows."""
    from airflow_provider_staged.cli.context import connection_settings
    from airflow_provider_staged.cli.output import console
    from airflow_provider_staged.staging.audits import AuditResult

    record = connection_settings(conn).journal.require(attempt)
    audits = record.audits or {}
    verdict = audits.get("verdict") or ("not audited yet" if audits else "no audits declared")
    console.print(f"attempt {attempt} of {record.target} ({record.state.value}): {verdict}", soft_wrap=True,
                  highlight=False, markup=False)
    for item in audits.get("results", []):
        result = AuditResult.from_dict(item)
        console.print(result.line(), soft_wrap=True, highlight=False, markup=False)
        for row in result.samples:
            console.print(f"    {row}", soft_wrap=True, highlight=False, markup=False)


def publish(
    attempt: AttemptArgument,
    conn: ConnOption = DEFAULT_CONN_ID,
    endpoint: Annotated[str | None, typer.Option(envvar=ENV["endpoint"], help=(
        "Airflow API, http://host:port, told of the new version (default: `staged up`'s Airflow)"))] = None,
    username: Annotated[str | None, typer.Option(envvar=ENV["username"])] = None,
    password: Annotated[str | None, typer.Option(envvar=ENV["password"])] = None,
) -> None:
    """Publish a quarantined attempt anyway (after looking at `staged audits show`), through the
    commit path; refused when its table moved on since the attempt began. Airflow then gets the
    table's asset event, as after a task's commit, so the DAGs scheduled on it run."""
    from airflow_provider_staged.cli.context import connection_settings, scheduler_setup
    from airflow_provider_staged.cli.output import console
    from airflow_provider_staged.staging.quarantine import publish_anyway

    settings = connection_settings(conn)
    airflow = scheduler_setup({}, endpoint, None, username, password).config
    record = publish_anyway(settings, attempt)
    console.print(f"published attempt {attempt} of {record.target} ({record.state.value}, journaled as "
                  "published despite its audits)", soft_wrap=True, highlight=False, markup=False)
    found = airflow.get(AIRFLOW_OPTION + "endpoint")
    if found is None:
        console.print(f"no Airflow to tell (--endpoint or {ENV['endpoint']}, or `staged up`): DAGs scheduled "
                      f"on {record.target} did not get its asset event", soft_wrap=True, highlight=False,
                      markup=False)
        return
    from airflow_provider_staged.airflow.asset_events import announce_publish

    told = announce_publish(record, settings.metastore_uri, found, airflow.get(AIRFLOW_OPTION + "username"),
                            airflow.get(AIRFLOW_OPTION + "password"))
    console.print(told, soft_wrap=True, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add the lifecycle commands to the ``staged`` app."""
    app.command("versions")(versions)
    app.command("rollback")(rollback)
    app.command("expire")(expire)
    app.command("maintain")(maintain)
    app.command("publish")(publish)
    audits = typer.Typer(help="Audits of staged attempts.", no_args_is_help=True)
    audits.command("show")(audits_show)
    app.add_typer(audits, name="audits")
