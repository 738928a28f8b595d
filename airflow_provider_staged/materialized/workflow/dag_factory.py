"""Refresh DAGs generated from a folder of materialized-table definitions (one ``*.sql`` each).

Broken definitions: an exception raised by a DAG file makes Airflow drop *every* DAG of that
file (``PythonDagImporter`` returns no DAGs once the module import fails), so an aggregated
import error would hide the good tables. Each bad file therefore becomes a DAG
``mt__broken__<file stem>`` (tagged ``broken``, unscheduled) whose description and docs carry
the error and whose single task fails with it; the error is also logged by the DAG processor.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
from collections import Counter
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, get_parsing_context

try:
    from airflow.sdk import CronTriggerTimetable
except ImportError:  # Airflow 3.0: the Task SDK has no timetables yet, core's is the one
    from airflow.timetables.trigger import CronTriggerTimetable

try:  # Airflow 3.3's partition-aware asset scheduling: what FRESHNESS = DOWNSTREAM runs on
    from airflow.sdk import AssetAll, IdentityMapper, PartitionedAssetTimetable
except ImportError:  # older Airflow: such a definition is a broken DAG saying so
    PartitionedAssetTimetable = None

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID, table_asset
from airflow_provider_staged.airflow.callbacks import staged_settings
from airflow_provider_staged.airflow.operators.materialized_continuous import (
    MaterializedTableContinuousOperator,
)
from airflow_provider_staged.airflow.operators.materialized_refresh import MaterializedTableRefreshOperator
from airflow_provider_staged.materialized.catalog_status import suspension_of
from airflow_provider_staged.materialized.continuous import NotStreamableError, query_shape
from airflow_provider_staged.materialized.definition import (
    CREATE,
    DefinitionError,
    MaterializedTableDefinition,
    check_query,
    load_definition,
    read_identifier,
)
from airflow_provider_staged.materialized.freshness import RefreshMode
from airflow_provider_staged.materialized.graph import GraphError, followed_inputs
from airflow_provider_staged.materialized.naming import (
    BROKEN_DAG_ID_PREFIX,
    DAG_ID_PREFIX,
    DEFINITION_GLOB,
    TAG,
    broken_dag_id,
    dag_id_for,
)
from airflow_provider_staged.materialized.workflow.dag_params import build_params
from airflow_provider_staged.materialized.workflow.shards import Shard
from airflow_provider_staged.staging.identifiers import TableIdentifier

log = logging.getLogger(__name__)


def build_dags(
    definitions_dir: str | Path,
    globals_dict: MutableMapping[str, Any],
    zone: str = "UTC",
    conn_id: str = DEFAULT_CONN_ID,
    check_queries: bool = False,
    shard: Shard | None = None,
) -> dict[str, DAG]:
    """Build one refresh DAG per definition file into ``globals_dict`` and return them.

    Under a parsing context (a worker running one task) only the requested DAG is built.
    ``zone`` is the time zone of the cron schedules and of ``scheduleTime``; ``conn_id`` the
    staged connection whose catalog holds the tables: its metastore names their assets, so the
    connection is read once (not the metastore) when there is a table to build.
    ``check_queries`` also parses each query with sqlglot (about 0.7 ms per query plus 0.25 s
    to import sqlglot) so that a bad query shows up as a broken definition.
    ``shard`` builds only the tables of that shard (see :mod:`.shards`); every file's table name
    is still read (~30 µs a file), for the inputs of FRESHNESS = DOWNSTREAM tables.
    """
    directory = Path(definitions_dir)
    wanted = get_parsing_context().dag_id
    known: set[TableIdentifier] | None = None  # None: the tables of the definitions read
    files = _files_for(wanted, directory) if wanted is not None else sorted(directory.glob(DEFINITION_GLOB))
    if wanted is None and shard is not None and shard.count > 1:
        names = {path: _table_name(path) for path in files}
        counts = Counter(names.values())
        known = {table for table, count in counts.items() if table is not None and count == 1}
        files = [path for path in files if shard.holds(names[path], path)]
    definitions: dict[Path, MaterializedTableDefinition | DefinitionError] = {}
    for path in files:
        try:
            definition = _supported(load_definition(path))
            if check_queries:
                check_query(definition)
            definitions[path] = definition
        except DefinitionError as err:
            definitions[path] = err
    _reject_duplicates(definitions)
    # A worker (parsing context) builds one DAG to run its task: it needs no schedule, and so
    # does not read the other definitions a FRESHNESS = DOWNSTREAM table's schedule needs.
    upstream = {} if wanted is not None else _followed_inputs(definitions, known)
    # Read only when there is a table to build: broken definitions need no connection.
    tables = any(isinstance(d, MaterializedTableDefinition) for d in definitions.values())
    metastore_uri = staged_settings(conn_id).metastore_uri if tables else ""
    dags = {}
    for path, definition in definitions.items():
        if isinstance(definition, DefinitionError):
            log.error("Broken materialized-table definition: %s", definition)
            dag = _broken_dag(path, definition)
        else:
            dag = _refresh_dag(definition, zone, conn_id, metastore_uri, upstream.get(path))
        if wanted is None or dag.dag_id == wanted:
            dags[dag.dag_id] = dag
    globals_dict.update(dags)
    return dags


def _files_for(dag_id: str, directory: Path) -> list[Path]:
    """The file that defines ``dag_id``, reading as few files as possible."""
    if not dag_id.startswith(DAG_ID_PREFIX):
        return []
    # Files are usually named after their table, `<db>__<table>.sql` (as `staged mt create`
    # writes them) or `<table>.sql`: open those names first, without listing the folder
    # (listing 10,000 files alone takes ~50 ms, a worker's whole budget for its parse).
    if not dag_id.startswith(BROKEN_DAG_ID_PREFIX):
        tail = dag_id.removeprefix(DAG_ID_PREFIX)
        for stem in dict.fromkeys([tail, tail.split("__", 1)[-1]]):
            path = directory / f"{stem}.sql"
            with contextlib.suppress(DefinitionError, OSError):
                if dag_id_for(read_identifier(path)) == dag_id:
                    return [path]
    files = sorted(directory.glob(DEFINITION_GLOB))
    if dag_id.startswith(BROKEN_DAG_ID_PREFIX):
        return [path for path in files if broken_dag_id(path) == dag_id]
    # Then the files whose name ends like the DAG id, then the others' table names (only the
    # first tokens are parsed).
    likely = [path for path in files if dag_id.endswith(f"__{path.stem.lower()}")]
    for path in [*likely, *(path for path in files if path not in likely)]:
        try:
            if dag_id_for(read_identifier(path)) == dag_id:
                return [path]
        except DefinitionError:
            continue
    return []


def _table_name(path: Path) -> TableIdentifier | None:
    try:
        return read_identifier(path)
    except DefinitionError:
        return None


def _supported(definition: MaterializedTableDefinition) -> MaterializedTableDefinition:
    """A CONTINUOUS table whose query cannot be streamed is broken here, on its own."""
    if definition.refresh_mode is RefreshMode.CONTINUOUS:
        try:
            query_shape(definition.identifier, definition.query)
        except NotStreamableError as err:
            lines = definition.lines
            why = "" if "REFRESH_MODE" in lines else (
                f" (CONTINUOUS because freshness {definition.freshness} is below the "
                "'refresh-mode.freshness-threshold')"
            )
            raise DefinitionError(definition.source_path, lines.get("query", lines["AS"]), "AS",
                                  f"{err}{why}; use REFRESH_MODE = FULL") from None
    return definition


def _reject_duplicates(
    definitions: dict[Path, MaterializedTableDefinition | DefinitionError],
) -> None:
    """Two files for one table: neither wins, both become broken (no silent choice).

    A worker (parsing context) reads only the requested table's file and does not see the
    duplicate; that is harmless because the scheduler never had a DAG for such a table.
    """
    by_table: dict[TableIdentifier, list[Path]] = {}
    for path, definition in definitions.items():
        if isinstance(definition, MaterializedTableDefinition):
            by_table.setdefault(definition.identifier, []).append(path)
    for identifier, paths in by_table.items():
        if len(paths) > 1:
            names = ", ".join(path.name for path in paths)
            for path in paths:
                definition = definitions[path]
                definitions[path] = DefinitionError(
                    str(path),
                    definition.lines["CREATE MATERIALIZED TABLE"],
                    "CREATE MATERIALIZED TABLE",
                    f"table {identifier} is defined by several files: {names}",
                )


def _followed_inputs(
    definitions: dict[Path, MaterializedTableDefinition | DefinitionError],
    known: set[TableIdentifier] | None = None,
) -> dict[Path, tuple[TableIdentifier, ...]]:
    """The upstream tables (of ``known``, else of ``definitions``) of each FRESHNESS = DOWNSTREAM
    definition (only those pay for reading their query with sqlglot); one that follows nothing, or
    an Airflow without partition-aware asset scheduling, makes its definition broken, saying why."""
    tables = known if known is not None else {
        d.identifier for d in definitions.values() if isinstance(d, MaterializedTableDefinition)}
    found = {}
    for path, definition in definitions.items():
        if not isinstance(definition, MaterializedTableDefinition) or not definition.follows_inputs:
            continue
        try:
            if PartitionedAssetTimetable is None:
                raise GraphError(f"{definition.identifier}: FRESHNESS = DOWNSTREAM needs Airflow 3.3's "
                                 "partition-aware asset scheduling (PartitionedAssetTimetable); this "
                                 "Airflow has none: give it a FRESHNESS interval")
            found[path] = followed_inputs(definition, tables)
        except GraphError as err:
            line = definition.lines.get("FRESHNESS", definition.lines[CREATE])
            definitions[path] = DefinitionError(str(path), line, "FRESHNESS", str(err))
    return found


def _follow(upstream: tuple[TableIdentifier, ...], metastore_uri: str) -> PartitionedAssetTimetable:
    """Run once each upstream table has committed a partition (same key from all: a diamond's
    bottom waits for both sides), for that partition (identity mapping of the key)."""
    assets = [table_asset(table, metastore_uri) for table in upstream]
    return PartitionedAssetTimetable(assets=assets[0] if len(assets) == 1 else AssetAll(*assets),
                                     default_partition_mapper=IdentityMapper())


# Airflow 3.3's @continuous timetable without a start date gives the first run the empty interval
# (now, now), and every next run the interval (last end, now): the same logical date as the first,
# so the scheduler finds that run "already exists" and never makes another after it ends (a
# SIGKILLed stream was never restarted). From a start in the past, each run's logical date is the
# previous run's end: always new. A stream has no data interval, so the date itself means nothing.
CONTINUOUS_START = pendulum.date(2000, 1, 1)


def _cron(schedule: str, zone: str) -> CronTriggerTimetable:
    """The refresh schedule. Without a start date Airflow runs the slot that passed just before a
    DAG appeared or was unpaused (within a tenth of the period, at least 5 min): a table then
    refreshed on its own seconds after CREATE or RESUME. It starts at its next slot instead."""
    return CronTriggerTimetable(schedule, timezone=zone, run_immediately=datetime.timedelta(0))


def _schedule(
    definition: MaterializedTableDefinition, zone: str, metastore_uri: str,
    upstream: tuple[TableIdentifier, ...] | None,
) -> Any:
    if definition.refresh_mode is RefreshMode.CONTINUOUS:
        # One run at a time, a new one as soon as the last ends (a stopped or failed stream
        # resumes from its checkpoint).
        return "@continuous"
    if definition.follows_inputs:
        return _follow(upstream, metastore_uri) if upstream else None  # None: a worker's parse
    return _cron(definition.schedule, zone)


def _refresh_dag(
    definition: MaterializedTableDefinition, zone: str, conn_id: str, metastore_uri: str,
    upstream: tuple[TableIdentifier, ...] | None = None,
) -> DAG:
    default_args: dict[str, Any] = {}
    if definition.owner is not None:
        default_args["owner"] = definition.owner
    if definition.retries is not None:
        default_args["retries"] = definition.retries
    start = definition.start_date
    continuous = definition.refresh_mode is RefreshMode.CONTINUOUS
    if continuous and start is None:
        start = CONTINUOUS_START
    dag = DAG(
        dag_id_for(definition.identifier),
        schedule=_schedule(definition, zone, metastore_uri, upstream),
        start_date=pendulum.datetime(start.year, start.month, start.day, tz=zone) if start else None,
        catchup=definition.catchup,
        # Active from the start, like a workflow that `staged mt create` made: a paused DAG
        # makes the Trigger form offer "Unpause on trigger" (ticked), and that unpause also
        # fires the run of the latest schedule slot ahead of the user's own run.
        is_paused_upon_creation=False,
        max_active_runs=1,
        params=build_params(definition),
        tags=_tags(definition.tags),
        description=_description(definition),
        doc_md=_doc(definition),
        default_args=default_args,
    )
    (MaterializedTableContinuousOperator if continuous else MaterializedTableRefreshOperator)(
        task_id="refresh",
        definition=definition,
        zone=zone,
        staged_conn_id=conn_id,
        outlets=[table_asset(definition.identifier, metastore_uri)],
        dag=dag,
    )
    return dag


def _description(definition: MaterializedTableDefinition) -> str:
    """The comment; an auto-suspended table's description starts with why it is suspended."""
    text = definition.comment or f"Refresh of materialized table {definition.identifier}"
    note = suspension_of(definition.source_path)
    return f"{note}. {text}" if note else text


def _broken_dag(path: Path, error: DefinitionError) -> DAG:
    dag = DAG(
        broken_dag_id(path),
        schedule=None,
        tags=_tags(["broken"]),
        description=f"BROKEN definition: {error}",
        doc_md=f"# Broken materialized-table definition\n\n```\n{error}\n```\n",
    )
    PythonOperator(
        task_id="report_error", python_callable=functools.partial(_fail, str(error)), dag=dag
    )
    return dag


def _tags(tags: Iterable[str]) -> list[str]:
    return [TAG, *tags]


def _doc(definition: MaterializedTableDefinition) -> str:
    return (
        f"# Materialized table `{definition.identifier}`\n\n"
        f"Freshness {definition.freshness_text}, refresh mode {definition.refresh_mode.value}, "
        f"schedule `{_schedule_text(definition)}`. "
        f"Defined in `{definition.source_path}`.\n\n"
        "**Trigger** refreshes what the form says: type a partition value to refresh that "
        "partition once, now; leave the form empty to refresh the partition of the current "
        "schedule time. While the table is suspended (DAG paused), untick *Unpause on trigger* "
        "to refresh once without resuming the schedule.\n\n"
        f"```sql\n{definition.text.strip()}\n```\n"
    )


def _schedule_text(definition: MaterializedTableDefinition) -> str:
    if definition.follows_inputs:
        return "the commits of the materialized tables it reads, partition by partition"
    return definition.schedule or "@continuous: a streaming query, a micro-batch per freshness"


def _fail(message: str, **_context: Any) -> None:
    from airflow.providers.common.compat.sdk import AirflowFailException

    raise AirflowFailException(message)
