"""The plan of a CONTINUOUS materialized table: a Structured Streaming query of its definition.

Pure (no Spark, no Airflow). As in Flink, the freshness is the pace of the refresh: Spark's
processing-time trigger fires every freshness interval (Flink uses it as the checkpoint
interval). The query's tables are read as streams of the files that arrive in them (a
Parquet file-stream source over each table's location: plain Hive tables whose data arrives as
new files, and tables the Hive sink appends to), written through the Hive sink: append for a
query without aggregation, else Spark's ``complete`` output mode, each micro-batch an atomic
overwrite through the sink. The checkpoint and the progress the refresh reports live under the
table's storage (``<table root>/_continuous/``: ``_`` names are hidden from Spark and from the
version sweeps), so they go wherever the table goes and DROP removes them with it.

A query Spark cannot run as a stream is refused here, before anything runs, with the reason:
:func:`query_shape` runs where the DAG is built, so such a table is a broken DAG of its
own while every other table loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_staged.materialized.freshness import Freshness
from airflow_provider_staged.staging.identifiers import TableIdentifier

CONTINUOUS_DIR = "_continuous"
APPEND, COMPLETE = "append", "complete"
# Streaming views of the source tables; a name no definition would use for a table of its own.
_VIEW_PREFIX = "__staged_stream__"
_SNAPSHOT_PREFIX = "__staged_snapshot__"


class NotStreamableError(ValueError):
    """A definition whose query cannot be refreshed continuously; the message says why."""


class SourceReplacedError(RuntimeError):
    """A source table stopped being the stream of files the running refresh follows."""


@dataclass(frozen=True)
class QueryShape:
    """What the plan needs to know about a query: its source tables and whether it aggregates."""

    sources: tuple[str, ...]  # ``db.table``, lower case
    aggregated: bool


@dataclass(frozen=True)
class StreamSource:
    """One source table read as a stream of Parquet files under ``location``."""

    name: str  # ``db.table``
    view: str  # the temporary view the rewritten query reads
    location: str
    schema_json: str  # Spark's schema JSON, partition columns included
    # The table's own data-source options (e.g. the Hive sink's ``recursiveFileLookup``).
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContinuousPlan:
    """Everything the streaming refresh of one table runs with."""

    identifier: TableIdentifier
    query: str  # the definition's query reading the sources' streaming views
    sources: tuple[StreamSource, ...]
    output_mode: str  # Spark's: append, or complete for an aggregation
    trigger_interval: str  # Spark's processing-time trigger, e.g. "30 seconds"
    checkpoint_location: str
    progress_location: str
    partition_by: tuple[str, ...] = ()

    @property
    def sink_mode(self) -> str:
        """The Hive sink's mode: every micro-batch of a complete-mode query replaces the table."""
        return "overwrite" if self.output_mode == COMPLETE else "append"


def one_time_refresh_refused(
    identifier: TableIdentifier, query: str, partition_spec: Mapping[str, str]
) -> str | None:
    """Why a one-time refresh of a CONTINUOUS table cannot run; None when it can.

    As in Flink, it is a batch overwrite of the named partitions beside the running stream
    (``staging.kinds.continuous_partitions`` says exactly what the partitions hold after it).
    """
    if not partition_spec:
        return (f"{identifier} is refreshed continuously: a one-time refresh overwrites partitions, "
                "name them (staticPartitions); the stream itself keeps the whole table fresh")
    if query_shape(identifier, query).aggregated:
        return (f"{identifier} is refreshed continuously by an aggregation that replaces the whole "
                "table every micro-batch: a one-time overwrite of partitions of it would be undone by "
                "the next micro-batch")
    return None


def committed_source_files(logs: Iterable[str], last_batch: int) -> set[str]:
    """The files Spark's file-stream source log lists for the micro-batches up to ``last_batch``.

    ``logs``: the texts of the files of the checkpoint's ``sources/<n>/`` directory, each
    ``v1`` then one JSON entry (``path``, ``timestamp``, ``batchId``) per line; a compacted
    ``<n>.compact`` also holds the entries of the batches before it.
    """
    files = set()
    for text in logs:
        version, _, body = text.partition("\n")
        if version.strip() != "v1":
            raise ValueError(f"unknown file-stream source log version {version.strip()!r}")
        for line in body.splitlines():
            if line.strip():
                entry = json.loads(line)
                if int(entry["batchId"]) <= last_batch:
                    files.add(str(entry["path"]))
    return files


def trigger_interval(freshness: Freshness) -> str:
    """Spark's processing-time trigger for ``freshness`` (any positive interval)."""
    return f"{int(freshness.as_timedelta().total_seconds())} seconds"


def continuous_dir(table_root: str) -> str:
    return f"{table_root.rstrip('/')}/{CONTINUOUS_DIR}"


def checkpoint_location(table_root: str) -> str:
    return f"{continuous_dir(table_root)}/checkpoint"


def progress_location(table_root: str) -> str:
    return f"{continuous_dir(table_root)}/progress.json"


def sources_location(table_root: str) -> str:
    """Where each source's location is recorded when the stream (its checkpoint) first starts."""
    return f"{continuous_dir(table_root)}/sources.json"


def replaced_source(recorded: Mapping[str, str], current: Mapping[str, str]) -> str | None:
    """Why the checkpointed stream cannot go on over ``current`` source locations (None: it can).

    The checkpoint knows the files it read under each ``recorded`` location; a source now stored
    elsewhere (a staged replace switches the table to a new version directory) would be read
    again in full, or its new data never."""
    for name, location in sorted(recorded.items()):
        now = current.get(name)
        if now is not None and now != location:
            return f"source table {name} was replaced: its data moved from {location} to {now}"
    return None


def replaced_source_error(identifier: TableIdentifier, why: str) -> SourceReplacedError:
    return SourceReplacedError(
        f"the continuous refresh of {identifier} stopped: {why}. It reads each source as a stream of "
        "the files arriving under its location, so it cannot follow a replaced source without "
        "losing or repeating rows; recreate the materialized table (DROP, then CREATE) to rebuild it"
    )


def view_name(table: str) -> str:
    return _VIEW_PREFIX + table.replace(".", "__")


def snapshot_view_name(table: str) -> str:
    """The view of the source files a one-time refresh reads (beside the stream's own views)."""
    return _SNAPSHOT_PREFIX + table.replace(".", "__")


def query_shape(identifier: TableIdentifier | None, query: str, database: str = "default") -> QueryShape:
    """Source tables (unqualified ones in ``database``) and aggregation of ``query``;
    :class:`NotStreamableError` if it cannot stream. ``identifier``: the continuous table, or
    None for an ad-hoc streaming query (the SQL client's)."""
    import sqlglot  # deferred: ~0.25 s to import, paid by continuous tables only
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    from airflow_provider_staged.lineage.datasets import source_tables

    sources = source_tables(query, database)

    def refuse(why: str) -> NotStreamableError:
        subject = (f"{identifier} cannot be refreshed continuously" if identifier is not None
                   else f"the query over {', '.join(sources) or 'no table'} cannot run as a stream")
        return NotStreamableError(f"{subject}: {why}")

    try:
        tree = sqlglot.parse_one(query, read="spark")
    except SqlglotError as err:
        raise refuse(f"its query does not parse ({str(err).splitlines()[0]})") from None
    if not sources:
        raise refuse("its query reads no table, so there is no stream of new rows to follow")
    if identifier is not None and identifier.name.lower() in sources:
        raise refuse("its query reads the table itself")
    if tree.find(exp.Window):
        raise refuse("window functions (OVER ...) are not supported on streams by Spark")
    if tree.find(exp.Limit):
        raise refuse("LIMIT is not supported on streams: a stream has no end to count to")
    aggregated = bool(tree.find(exp.Group) or tree.find(exp.AggFunc) or _distinct(tree, exp))
    if tree.find(exp.Order) and not aggregated:
        raise refuse("ORDER BY needs an aggregation on a stream (Spark sorts only complete results)")
    if aggregated and len([node for node in tree.find_all(exp.Select) if aggregates_itself(node, exp)]) > 1:
        raise refuse("it aggregates more than once; Spark allows one streaming aggregation")
    return QueryShape(sources, aggregated)


def _distinct(tree: Any, exp: Any) -> bool:
    return any(select.args.get("distinct") for select in tree.find_all(exp.Select))


def aggregates_itself(select: Any, exp: Any) -> bool:
    """A SELECT that aggregates itself (not only inside its subqueries)."""
    own = [node for node in select.walk() if node.find_ancestor(exp.Select) is select]
    return bool(select.args.get("group") or select.args.get("distinct")
                or any(isinstance(node, exp.AggFunc) for node in own))


def streaming_query(
    query: str, sources: Sequence[str], view: Callable[[str], str] = view_name, database: str = "default"
) -> str:
    """``query`` reading each source table (unqualified ones in ``database``) from its ``view``
    (the streaming one by default; aliased as the table, so ``orders.amount`` still resolves)."""
    import sqlglot
    from sqlglot import exp

    from airflow_provider_staged.lineage.datasets import SESSION_CATALOG

    wanted = set(sources)
    tree = sqlglot.parse_one(query, read="spark")
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier) or table.catalog.lower() not in ("", SESSION_CATALOG):
            continue
        if not table.db and table.name.lower() in ctes:
            continue
        name = f"{table.db or database}.{table.name}".lower()
        if name not in wanted:
            continue
        alias = table.alias or table.name
        table.replace(exp.to_table(view(name)).as_(exp.to_identifier(alias, quoted=True)))
    return tree.sql(dialect="spark")


def stream_views(sources: Mapping[str, tuple[str, str, Mapping[str, str]]]) -> tuple[StreamSource, ...]:
    """Each source table's stream under its streaming view, from its (location, schema JSON,
    data-source options)."""
    return tuple(StreamSource(name, view_name(name), *details) for name, details in sources.items())


def plan_continuous(
    identifier: TableIdentifier,
    query: str,
    freshness: Freshness,
    partition_by: Sequence[str],
    table_root: str,
    sources: Mapping[str, tuple[str, str, Mapping[str, str]]],
) -> ContinuousPlan:
    """The plan of ``identifier``; ``sources`` maps each source table to its (location, schema
    JSON, data-source options), as the catalog and Spark report them at run time."""
    shape = query_shape(identifier, query)
    missing = [name for name in shape.sources if name not in sources]
    if missing:
        raise NotStreamableError(f"{identifier} cannot be refreshed continuously: no stream for {missing}")
    return ContinuousPlan(
        identifier=identifier,
        query=streaming_query(query, shape.sources),
        sources=stream_views({name: sources[name] for name in shape.sources}),
        output_mode=COMPLETE if shape.aggregated else APPEND,
        trigger_interval=trigger_interval(freshness),
        checkpoint_location=checkpoint_location(table_root),
        progress_location=progress_location(table_root),
        partition_by=tuple(partition_by),
    )
