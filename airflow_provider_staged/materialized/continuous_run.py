"""The streaming refresh of a CONTINUOUS materialized table on Spark (no Airflow import).

:class:`ContinuousRefresh` resolves the source tables in the catalog, starts the plan's
Structured Streaming query through the unified sink (:func:`sink.runtime.write_stream` with the
built-in :class:`sink.hive.HiveSink`: every micro-batch is one journaled, exactly-once commit),
and reports each micro-batch (batch id, rows, rows/s, actual lag) to the log and to the
table's progress file, which ``staged mt describe`` reads. Stopping it keeps the checkpoint:
the next start continues from it. :func:`drop_continuous_state` removes checkpoint and progress.

A one-time refresh of partitions beside the stream (:func:`one_time_staged`,
:func:`snapshot_query`) reads exactly the source files the stream has committed into the table
(its checkpoint's source logs up to the micro-batch the table records), so with the stream's
later micro-batches carried into the new partitions (``staging.kinds.continuous_partitions``)
every source row is in the table once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import current_location
from airflow_provider_staged.materialized.continuous import (
    ContinuousPlan,
    NotStreamableError,
    StreamSource,
    checkpoint_location,
    committed_source_files,
    continuous_dir,
    one_time_refresh_refused,
    plan_continuous,
    progress_location,
    query_shape,
    replaced_source,
    replaced_source_error,
    snapshot_view_name,
    sources_location,
    streaming_query,
)
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition, definition_audits
from airflow_provider_staged.materialized.output_schema import refresh_query
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import (
    delete_dir,
    exists,
    list_dir,
    normalize_location,
    read_text,
    write_text,
)

if TYPE_CHECKING:
    from airflow_provider_staged.staging.journal import TaskRef
    from airflow_provider_staged.staging.kinds.continuous_partitions import ContinuousPartitionStagedTable

log = logging.getLogger(__name__)
# Serde parameters that are not the data source's reading options.
_NOT_READ_OPTIONS = frozenset({"path", "serialization.format"})


@dataclass(frozen=True)
class Progress:
    """What the running refresh last reported; ``fresh_as_of``: the start of the latest trigger
    that found all input processed, so every row that arrived before it is in the table."""

    state: str  # running, stopped, failed
    query_id: str | None = None
    batch_id: int | None = None  # the last micro-batch that committed rows
    batch_rows: int | None = None
    rows_per_second: float | None = None
    batch_started: str | None = None
    fresh_as_of: str | None = None
    updated: str | None = None
    error: str | None = None

    def lag_seconds(self, now: datetime | None = None) -> float | None:
        """Actual lag: how far behind the sources the table is now (None before any trigger)."""
        if self.fresh_as_of is None:
            return None
        now = now or datetime.now(timezone.utc)
        return max(0.0, (now - datetime.fromisoformat(self.fresh_as_of)).total_seconds())


def read_progress(table_root: str) -> Progress | None:
    location = progress_location(table_root)
    if not exists(location):
        return None
    return Progress(**json.loads(read_text(location)))


def write_progress(table_root: str, progress: Progress) -> None:
    _write_json(progress_location(table_root), asdict(progress))


def _write_json(location: str, data: Mapping[str, Any]) -> None:
    # Readers see the old or the new file, never half of one.
    write_text(normalize_location(location), json.dumps(data, sort_keys=True))


def recorded_sources(table_root: str) -> dict[str, str]:
    """Source -> the location its stream followed since the checkpoint began (``{}``: unknown)."""
    record = sources_location(table_root)
    return json.loads(read_text(record)) if exists(record) else {}


def drop_continuous_state(table_root: str) -> None:
    """Delete the checkpoint and the progress (the table's data stays)."""
    delete_dir(continuous_dir(table_root))


def table_root(identifier: TableIdentifier, metastore_uri: str) -> str:
    """The table's root directory as the Hive sink resolves it: its versions, its checkpoint.

    Only the catalog is read (no journal is touched), so ``describe`` and ``drop`` find it too.
    """
    from airflow_provider_staged.sink.hive import HiveSink

    return HiveSink(identifier, StagedSettings(metastore_uri, warehouse="", journal_dir="")).root()


def stream_sources(
    spark: Any, names: tuple[str, ...], metastore_uri: str
) -> dict[str, tuple[str, str, dict[str, str]]]:
    """``db.table`` -> (location, schema JSON, data-source options) of each source; refuses what
    cannot be a stream of Parquet files under one location."""
    sources = {}
    with MetastoreClient(metastore_uri) as client:
        for name in names:
            table, location = _streamable(client, name)
            options = {key: value for key, value in (table.sd.serdeInfo.parameters or {}).items()
                       if key not in _NOT_READ_OPTIONS}
            sources[name] = (location, spark.table(name).schema.json(), options)
    return sources


def source_locations(names: Iterable[str], metastore_uri: str) -> dict[str, str]:
    """``db.table`` -> the location a stream of each source follows now (checked as at the start)."""
    with MetastoreClient(metastore_uri) as client:
        return {name: _streamable(client, name)[1] for name in names}


def _streamable(client: MetastoreClient, name: str) -> tuple[Any, str]:
    """The source's table and its location, or why it is no stream of Parquet files under one."""
    database, table_name = name.split(".", 1)
    table = client.get_table(database, table_name)
    if table is None:
        raise NotStreamableError(f"source table {name} does not exist")
    parameters = table.parameters or {}
    provider = parameters.get("spark.sql.sources.provider", "").lower()
    serde = (table.sd.serdeInfo.serializationLib or "").lower()
    if provider != "parquet" and "parquet" not in serde:
        raise NotStreamableError(
            f"source table {name} is not a Parquet table ({provider or serde or 'unknown'!r}): "
            "only Parquet files can be read as a stream"
        )
    location = normalize_location(current_location(table))
    partitions = client.partitions(database, table_name) if table.partitionKeys else []
    outside = [part.values for part in partitions
               if not normalize_location(part.sd.location).startswith(location + "/")]
    if outside:
        raise NotStreamableError(
            f"source table {name} has partitions outside its location {location} (e.g. "
            f"{outside[0]}): a file stream follows one directory; refresh such a table in FULL mode"
        )
    return table, location


def open_streams(spark: Any, streams: Iterable[StreamSource], **read_options: str) -> None:
    """Each source's Parquet file stream as its temporary view in ``spark`` (``read_options``
    on top of the table's own, e.g. ``maxFilesPerTrigger``)."""
    from pyspark.sql.types import StructType

    for source in streams:
        schema = StructType.fromJson(json.loads(source.schema_json))
        stream = spark.readStream.schema(schema).options(**{**source.options, **read_options})
        stream.parquet(source.location).createOrReplaceTempView(source.view)


def close_streams(spark: Any, streams: Iterable[StreamSource]) -> None:
    """Drop the temporary views :func:`open_streams` made (a started query keeps its own plan)."""
    for source in streams:
        spark.catalog.dropTempView(source.view)


def one_time_staged(
    definition: MaterializedTableDefinition,
    partition_spec: Mapping[str, str],
    settings: StagedSettings,
    task: TaskRef | None = None,
    conn_id: str | None = None,
) -> ContinuousPartitionStagedTable:
    """The staged overwrite of ``partition_spec`` beside the stream: it covers the micro-batches
    the table records as committed (:class:`ValueError` with the reason when it cannot run)."""
    from airflow_provider_staged.catalogs.metastore.tables import tracks_partitions
    from airflow_provider_staged.sink.runtime import stream_query_id
    from airflow_provider_staged.staging.kinds.continuous_partitions import ContinuousPartitionStagedTable
    from airflow_provider_staged.staging.kinds.hive_sink import recorded_batch
    from airflow_provider_staged.staging.partition_ttl import materialized_table_options

    identifier = definition.identifier
    why = one_time_refresh_refused(identifier, definition.query, partition_spec)
    if why:
        raise ValueError(why)
    query_id = stream_query_id(checkpoint_location(table_root(identifier, settings.metastore_uri)))
    with MetastoreClient(settings.metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
    if table is not None and not tracks_partitions(table):
        raise ValueError(
            f"{identifier} discovers its partitions from directories (created before continuous tables "
            "tracked them in the catalog): a one-time refresh cannot switch one of them; DROP and CREATE "
            "the table again"
        )
    batch = recorded_batch(table, query_id)
    return ContinuousPartitionStagedTable(
        identifier, definition.partition_by, partition_spec, settings.journal, settings.metastore_uri,
        settings.retention, task, conn_id=conn_id,
        table_options=materialized_table_options(definition.options, definition.partition_by),
        query_id=query_id, after_batch=-1 if batch is None else batch,
    )


def snapshot_query(
    definition: MaterializedTableDefinition, staged: ContinuousPartitionStagedTable, spark: Any,
    metastore_uri: str,
) -> str:
    """The definition's query over the source files the stream committed up to
    ``staged.after_batch`` and that still exist: one temporary view per source table in ``spark``."""
    from pyspark.sql.types import StructType

    root = table_root(definition.identifier, metastore_uri)
    checkpoint = checkpoint_location(root)
    logs = [read_text(entry.location) for directory in list_dir(f"{checkpoint}/sources")
            for entry in list_dir(directory.location) if not entry.name.startswith(".")]
    # A committed file deleted since (e.g. rows erased at the source) is not read: the overwrite
    # is the query's result over the source as it is now, up to the stream's position.
    files = {normalize_location(path) for path in committed_source_files(logs, staged.after_batch)
             if exists(path)}
    shape = query_shape(definition.identifier, definition.query)
    sources = stream_sources(spark, shape.sources, metastore_uri)
    # The committed files are named under the locations the stream followed.
    why = replaced_source(recorded_sources(root), {name: source[0] for name, source in sources.items()})
    if why:
        raise replaced_source_error(definition.identifier, why)
    for name, (location, schema_json, options) in sources.items():
        schema = StructType.fromJson(json.loads(schema_json))
        mine = sorted(path for path in files if path.startswith(location + "/"))
        if mine:  # the table's partition columns come from the paths below its location
            frame = spark.read.schema(schema).options(**options).option("basePath", location).parquet(*mine)
        else:
            frame = spark.createDataFrame([], schema)
        frame.createOrReplaceTempView(snapshot_view_name(name))
        log.info("one-time refresh of %s reads %d file(s) of %s: those of micro-batches up to %d",
                 definition.identifier, len(mine), name, staged.after_batch)
    return streaming_query(definition.query, shape.sources, snapshot_view_name)


class ContinuousRefresh:
    """One run of the streaming refresh: :meth:`start`, then :meth:`report` periodically, :meth:`stop`.

    A source that is replaced (moved to another location) or stops being a stream of files while
    the checkpoint follows it stops the refresh with the reason, checked at the start and by
    :meth:`report` every ``source_check_seconds``."""

    source_check_seconds = 30.0

    def __init__(self, definition: MaterializedTableDefinition, settings: StagedSettings, spark: Any) -> None:
        self.definition = definition
        self.settings = settings
        self.spark = spark
        self.root = table_root(definition.identifier, settings.metastore_uri)
        self.plan: ContinuousPlan | None = None
        self.query: Any = None
        self._seen = ""  # timestamp of the last progress event reported
        self._progress = read_progress(self.root) or Progress("running")
        self._sources: dict[str, str] = {}  # source -> the location its stream follows
        self._sources_checked = 0.0

    def start(self) -> None:
        from pyspark.errors import AnalysisException

        from airflow_provider_staged.sink.hive import HiveSink
        from airflow_provider_staged.sink.runtime import write_stream

        definition = self.definition
        shape = query_shape(definition.identifier, definition.query)
        sources = stream_sources(self.spark, shape.sources, self.settings.metastore_uri)
        self._follow({name: location for name, (location, _, _) in sources.items()})
        # The column list applied (checked first: a definition file never met CREATE's checks).
        query = refresh_query(definition, self.spark)
        plan = plan_continuous(definition.identifier, query, definition.freshness,
                               definition.partition_by, self.root, sources)
        open_streams(self.spark, plan.sources)
        # Catalog partitions: a one-time refresh can then overwrite some beside the stream.
        # EXPECT constraints: each micro-batch audited before its commit (FAIL UPDATE stops the stream).
        sink = HiveSink(definition.identifier, self.settings, plan.sink_mode, list(plan.partition_by),
                        track_partitions=True, audits=definition_audits(definition))
        try:
            self.query = write_stream(
                self.spark.sql(plan.query), sink, checkpoint_location=plan.checkpoint_location,
                trigger_interval=plan.trigger_interval, output_mode=plan.output_mode,
                query_name=definition.identifier.name.replace(".", "__"),
            )
        except BaseException as err:  # the views outlive no failed start: the session may be a caller's
            close_streams(self.spark, plan.sources)
            if isinstance(err, AnalysisException):  # Spark's unsupported-operation checks, with its reason
                raise NotStreamableError(
                    f"{definition.identifier} cannot be refreshed continuously: {str(err).splitlines()[0]}"
                ) from None
            raise
        self.plan = plan
        # Written at once, so describe shows the running query before its first report.
        self._progress = replace(self._progress, state="running", updated=_now(), error=None)
        write_progress(self.root, self._progress)
        log.info("continuous refresh of %s started: %s output every %s, %d source stream(s) (%s), "
                 "checkpoint %s", definition.identifier, plan.output_mode, plan.trigger_interval,
                 len(plan.sources), ", ".join(s.name for s in plan.sources), plan.checkpoint_location)

    def _follow(self, locations: dict[str, str]) -> None:
        """Record where the checkpoint's streams read, or refuse sources that moved since."""
        recorded = recorded_sources(self.root) if exists(checkpoint_location(self.root)) else {}
        why = replaced_source(recorded, locations)
        if why:
            self._fail(why)
        if recorded != locations:
            _write_json(sources_location(self.root), locations)
        self._sources, self._sources_checked = locations, time.monotonic()

    def _check_sources(self) -> None:
        if time.monotonic() - self._sources_checked < self.source_check_seconds:
            return
        self._sources_checked = time.monotonic()
        try:
            why = replaced_source(self._sources, source_locations(self._sources, self.settings.metastore_uri))
        except NotStreamableError as err:
            why = str(err)
        if why:
            self.stop("failed")
            self._fail(why)

    def _fail(self, why: str) -> None:
        error = replaced_source_error(self.definition.identifier, why)
        self._progress = replace(self._progress, state="failed", error=str(error), updated=_now())
        write_progress(self.root, self._progress)
        raise error

    def report(self) -> Progress:
        """Log the micro-batches finished since the last call and store the progress."""
        if self.query is None:
            raise RuntimeError("the continuous refresh is not started")
        self._check_sources()
        failure = self.query.exception()
        # Spark keeps a bounded history of progress events: follow them by their time.
        for event in self.query.recentProgress:
            if event["timestamp"] > self._seen:
                self._seen = event["timestamp"]
                self._progress = self._after(event)
        if failure is not None:
            self._progress = replace(self._progress, state="failed", error=str(failure)[:2000],
                                     updated=_now())
        write_progress(self.root, self._progress)
        if failure is not None:
            raise RuntimeError(f"the streaming query of {self.definition.identifier} failed (the next run "
                               f"resumes from its checkpoint): {str(failure).splitlines()[0]}")
        return self._progress

    def _after(self, event: dict[str, Any]) -> Progress:
        started = _iso(event["timestamp"])
        rows = int(event.get("numInputRows") or 0)
        current = self._progress
        if rows:
            current = Progress(
                "running", str(event["id"]), int(event["batchId"]), rows,
                round(float(event.get("processedRowsPerSecond") or 0.0), 1), started,
            )
            lag = (datetime.now(timezone.utc) - datetime.fromisoformat(started)).total_seconds()
            log.info("%s: batch %s committed %d row(s) (%.1f rows/s), lag %.1f s", self.definition.identifier,
                     event["batchId"], rows, current.rows_per_second or 0.0, lag)
        return replace(current, state="running", query_id=str(event["id"]), fresh_as_of=started,
                       updated=_now(), error=None)

    def stop(self, state: str = "stopped") -> None:
        """Stop the query gracefully (its checkpoint stays); record ``state``."""
        if self.query is not None and self.query.isActive:
            started = time.monotonic()
            self.query.stop()
            log.info("streaming query of %s stopped in %.1f s (checkpoint kept)", self.definition.identifier,
                     time.monotonic() - started)
        if self.plan is not None:
            close_streams(self.spark, self.plan.sources)
        self._progress = replace(self._progress, state=state, updated=_now())
        write_progress(self.root, self._progress)


def _iso(timestamp: str) -> str:
    """Spark's progress timestamp (``2024-01-02T03:04:05.678Z``) as an ISO time with a zone."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).isoformat()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
