"""What the ``staged`` commands resolve before they work: the staged catalog's settings, the
workflow scheduler's set-up (flags, environment, `staged up`'s Airflow), ``KEY=VALUE`` options."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from airflow_provider_staged.discovery.embedded import (
    DEFINITIONS_ENV,
    airflow_home,
    airflow_status,
    metastore_status,
    staged_home,
)
from airflow_provider_staged.materialized.workflow.scheduler import (
    WORKFLOW_SCHEDULER_TYPE,
    WorkflowException,
    create_workflow_scheduler,
)
from airflow_provider_staged.staging.errors import StagingError

if TYPE_CHECKING:
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
    from airflow_provider_staged.staging.settings import StagedSettings

AIRFLOW_OPTION = "workflow-scheduler.airflow."
# The environment variables of the shorthand options (``staged sql`` configures itself from them too).
ENV = {
    "endpoint": "STAGED_AIRFLOW_ENDPOINT",
    "definitions_dir": "STAGED_MT_DEFINITIONS_DIR",
    "username": "STAGED_AIRFLOW_USERNAME",
    "password": "STAGED_AIRFLOW_PASSWORD",
    "metastore_uri": "STAGED_METASTORE_URI",
}
# The required scheduler options as this CLI sets them, for messages: (what, how to set it).
_REQUIRED = {
    "endpoint": ("the Airflow endpoint", "--endpoint URL (or STAGED_AIRFLOW_ENDPOINT)"),
    "definitions-dir": ("the definitions folder", "--definitions-dir DIR (or STAGED_MT_DEFINITIONS_DIR)"),
}
# Scheduler options as the flags (and environment variables) that set them, for messages.
_FLAGS = {
    "endpoint": "--endpoint (STAGED_AIRFLOW_ENDPOINT)",
    "definitions-dir": "--definitions-dir (STAGED_MT_DEFINITIONS_DIR)",
    "username": "--username (STAGED_AIRFLOW_USERNAME)",
    "password": "--password (STAGED_AIRFLOW_PASSWORD)",
}
def parse_pairs(values: list[str] | None, what: str) -> dict[str, str]:
    """``KEY=VALUE`` options; a key given twice is an error, not the last one winning."""
    pairs: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"{what} {item!r}: expected KEY=VALUE")
        if key in pairs:
            raise typer.BadParameter(f"{what} {key!r} given twice ({pairs[key]!r} and {value!r})")
        pairs[key] = value
    return pairs


def parse_partition_pairs(values: list[str] | None) -> dict[str, str]:
    """``--partition COL=VALUE`` options: columns as the metastore names them (lower case, so
    ``DS`` and ``ds`` are one column, given once), each with a value."""
    folded = []
    for item in values or []:
        key, sep, value = item.partition("=")
        folded.append(f"{key.lower()}{sep}{value}")
    pairs = parse_pairs(folded, "--partition")
    empty = [column for column, value in pairs.items() if not value]
    if empty:
        raise typer.BadParameter(f"--partition {empty[0]}= has no value")
    return pairs


def connection_settings(conn_id: str) -> StagedSettings:
    # Airflow 3.0 logs its start and the lookup to stdout, which is the command's output (--output json).
    with redirect_stdout(sys.stderr):
        from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook

        try:
            return StagedTableHook(conn_id).get_settings()
        except RuntimeError as err:  # the hook's "no connection <id> and no local metastore"
            raise StagingError(str(err)) from err


@dataclass(frozen=True)
class SchedulerSetup:
    """The workflow scheduler's options, the metastore, and which options ``--conf`` set."""

    config: dict[str, str]
    metastore_uri: str | None
    from_conf: frozenset[str]


def scheduler_setup(
    conf: Mapping[str, str],
    endpoint: str | None = None,
    definitions_dir: Path | None = None,
    username: str | None = None,
    password: str | None = None,
    metastore_uri: str | None = None,
) -> SchedulerSetup:
    """FLIP-448 options (``conf``), the shorthand ones on top, `staged up`'s Airflow for the rest."""
    config = {WORKFLOW_SCHEDULER_TYPE: "airflow", **conf}
    shorthand = {"endpoint": endpoint, "definitions-dir": definitions_dir, "username": username,
                 "password": password}
    config.update({AIRFLOW_OPTION + key: str(value) for key, value in shorthand.items() if value is not None})
    local = airflow_status(airflow_home(staged_home()))
    if local is not None:  # `staged up`'s Airflow and the folder its DAG factory reads
        config.setdefault(AIRFLOW_OPTION + "endpoint", local.endpoint)
        config.setdefault(AIRFLOW_OPTION + "definitions-dir",
                          local.env.get(DEFINITIONS_ENV) or str(Path(local.dags_folder) / "materialized"))
        if config[AIRFLOW_OPTION + "endpoint"].rstrip("/") == local.endpoint:
            # Its admin's password stays in its home: never sent to another Airflow.
            user, secret = local.credentials("admin")
            config.setdefault(AIRFLOW_OPTION + "username", user)
            config.setdefault(AIRFLOW_OPTION + "password", secret)
    if metastore_uri is None:
        running = metastore_status()
        metastore_uri = running.uri if running is not None else None
    return SchedulerSetup(config, metastore_uri, frozenset(key.removeprefix(AIRFLOW_OPTION) for key in conf))


def configured_scheduler(setup: SchedulerSetup) -> AirflowWorkflowScheduler:
    """The configured workflow scheduler, not connected yet."""
    config = setup.config
    missing = [_REQUIRED[key] for key in _REQUIRED if not config.get(AIRFLOW_OPTION + key, "").strip()]
    if missing:
        raise WorkflowException(
            f"missing {' and '.join(what for what, _ in missing)}: pass "
            f"{' and '.join(how for _, how in missing)} to `staged mt`, or start the local "
            f"Airflow with `staged up` (none runs under {staged_home()})"
        )
    try:
        return create_workflow_scheduler(config)
    except WorkflowException as err:  # worded with configuration keys: name the flags instead
        message = str(err)
        for key, how in _FLAGS.items():
            if key not in setup.from_conf:  # set by a flag, an environment variable or `staged up`
                message = message.replace(AIRFLOW_OPTION + key, how)
        raise WorkflowException(message) from None


@contextmanager
def open_tables(
    setup: SchedulerSetup, scheduler: AirflowWorkflowScheduler | None = None
) -> Iterator[MaterializedTables]:
    """An open ``MaterializedTables`` (connected to Airflow) on ``scheduler`` or the configured one."""
    scheduler = scheduler or configured_scheduler(setup)  # a missing option is reported before slow imports
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables

    with scheduler:
        yield MaterializedTables(scheduler, setup.metastore_uri)
