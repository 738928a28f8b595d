"""The unified sink's runtime on PySpark: batch writes, streaming queries and staged builds.

Python sinks run on the Python Data Source write API (Arrow writers, ``sink.datasource``: pyspark
4.0 or newer): each Spark task attempt gets its own ``SinkWriter``; its committables travel in
the task's commit message; Spark calls ``commit`` (or ``abort``) once, in a fresh Python worker,
where the committer and the global committer run (``api.run_commit``). Failed and speculative
attempts' messages never arrive: sinks stage per task attempt and sweep their write's staging
area at commit and abort.

A sink that also implements ``NativeWriteSink`` (the built-in Hive sink) is written by Spark's
own writer instead — ``df.write`` for a batch, ``foreachBatch`` for a stream — and committed
by the very same committers: same API, same guarantees, the native writer's speed, and
pyspark 3.5 as well (this module imports the data source only for Python writers). An appending
stream of an in-process session goes further (``file_stream``): Spark's file sink writes it and
a driver thread publishes each logged micro-batch in order, off the write's critical path.

Streaming: the sink's query id is derived from the checkpoint location (stable across
restarts, unlike Spark's run id, and known in the commit worker); each micro-batch's write id
is ``<query id>-b<batch id>-<run>``, so a replayed batch stages apart from its first run and
the global committer's ``filter_recovered_committables`` decides which one is published.

Nothing here needs an in-process session: the data source travels to a Spark Connect server
as well (the sink is pickled into the write's options).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_staged.sink.api import (
    Sink,
    WriterContext,
    abort_write,
    check_mode,
    commit_write,
)
from airflow_provider_staged.sink.file_stream import LoggedStreamSink, start_logged_stream
from airflow_provider_staged.sink.recovery import batch_prefix
from airflow_provider_staged.sink.tasks import (
    FORMAT_NAME,
    MODE_OPTION,
    QUERY_OPTION,
    SINK_OPTION,
    STAGE_OPTION,
    WRITE_OPTION,
    context_path,
    encode_sink,
    load_committables,
    new_write_id,
    save_committables,
    save_write_context,
    write_task,
)
from airflow_provider_staged.storage.files import normalize_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.streaming import StreamingQuery

_OUTPUT_MODES = ("append", "complete", "update")
ARROW_BATCH_ROWS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"


@runtime_checkable
class NativeWriteSink(Protocol):
    """A sink whose writers Spark's own writer can replace (returns the committables itself);
    ``native`` False makes the runtime use its Python writers instead."""

    native: bool

    def write_native(self, df: DataFrame, context: WriterContext) -> list[Any]:
        """Write ``df`` with Spark's writer, staged under ``context.write_id``; its committables."""


def _native(sink: Sink[Any, Any]) -> bool:
    return isinstance(sink, NativeWriteSink) and bool(sink.native)


def stream_query_id(checkpoint_location: str) -> str:
    """The sink's id of a streaming query: the same for every restart from its checkpoint."""
    return "q" + hashlib.sha256(normalize_location(checkpoint_location).encode()).hexdigest()[:16]


def register(spark: SparkSession) -> None:
    """Register the ``staged_sink`` data source of Python sinks in ``spark`` (pyspark 4.0 or newer)."""
    from airflow_provider_staged.sink.datasource import register as register_data_source

    register_data_source(spark)


@contextlib.contextmanager
def arrow_batch_rows(spark: SparkSession, rows: int | None) -> Iterator[None]:
    """Spark's Arrow batch size at ``rows`` (a sink's ``arrow_batch_rows``) while the block
    plans and runs a write, then the session's setting again; None changes nothing."""
    if rows is None:
        yield
        return
    if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
        raise ValueError(f"invalid arrow_batch_rows {rows!r}: expected a positive number of rows or None")
    previous = spark.conf.get(ARROW_BATCH_ROWS_KEY)
    spark.conf.set(ARROW_BATCH_ROWS_KEY, str(rows))
    try:
        yield
    finally:
        spark.conf.set(ARROW_BATCH_ROWS_KEY, previous)


def _sink_writer(df: DataFrame, shipped: Sink[Any, Any], mode: str) -> DataFrameWriter:
    """``df``'s batch write through the data source; Spark passes overwrite=True to it for
    mode("overwrite")."""
    writer = df.write.format(FORMAT_NAME).option(SINK_OPTION, encode_sink(shipped))
    return writer.option(MODE_OPTION, mode).mode(mode)


def write_batch(df: DataFrame, sink: Sink[Any, Any], mode: str = "append") -> None:
    """Write ``df`` through ``sink`` exactly once: all of it is published, or nothing."""
    check_mode(mode)
    if _native(sink):
        write_id = new_write_id()
        _write_native(sink, df, WriterContext(write_id, write_id, 0, mode, df.schema.json()))
        return
    register(df.sparkSession)
    with sink.shipping() as shipped, arrow_batch_rows(df.sparkSession, sink.arrow_batch_rows):
        _sink_writer(df, shipped, mode).save()


def stage_batch(df: DataFrame, sink: Sink[Any, Any], path: str, mode: str = "append") -> list[Any]:
    """Run ``sink``'s writers over ``df`` without committing: the committables, also pickled to
    ``path`` (a local file), for a staged build to commit later.

    The write's context is saved beside ``path`` before the writers run: a write cut short (a
    killed driver) is then still aborted completely by ``abort_staged``.
    """
    check_mode(mode)
    write_id = new_write_id()
    context = WriterContext(write_id, write_id, 0, mode, df.schema.json())
    save_write_context(path, context)
    if _native(sink):
        committables = sink.write_native(df, context)
        save_committables(path, committables)
        return committables
    register(df.sparkSession)
    with sink.shipping() as shipped, arrow_batch_rows(df.sparkSession, sink.arrow_batch_rows):
        _sink_writer(df, shipped, mode).option(STAGE_OPTION, path).option(WRITE_OPTION, write_id).save()
    return load_committables(path)


def abort_staged(sink: Sink[Any, Any], path: str) -> None:
    """Abort what ``stage_batch`` into ``path`` staged, also when the writers were cut short before
    the committables were saved: then an empty writer of the saved context tells the global
    committer which write to delete (a sink stages each write under its id)."""
    if os.path.exists(path):
        committables = load_committables(path)
    elif os.path.exists(context_path(path)):
        with open(context_path(path), encoding="utf-8") as handle:
            committables = write_task(sink, WriterContext(**json.load(handle)), iter(()))
    else:
        return  # the writers never started
    if committables:
        abort_write(sink, committables)


def write_stream(
    df: DataFrame,
    sink: Sink[Any, Any],
    *,
    checkpoint_location: str,
    trigger_interval: str,
    query_name: str | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start a streaming query that writes ``df`` through ``sink``, exactly once per micro-batch.

    ``trigger_interval`` is Spark's processing-time trigger (``"30 seconds"``); ``complete``
    output mode makes every micro-batch an overwrite.
    """
    if output_mode not in _OUTPUT_MODES:
        raise ValueError(f"invalid output mode {output_mode!r}: expected one of {', '.join(_OUTPUT_MODES)}")
    if not isinstance(trigger_interval, str) or not trigger_interval.strip():
        raise ValueError(f"invalid trigger interval {trigger_interval!r}: expected e.g. '30 seconds'")
    if not isinstance(checkpoint_location, str) or not checkpoint_location.strip():
        raise ValueError(f"invalid checkpoint location {checkpoint_location!r}")
    query_id = stream_query_id(checkpoint_location)
    mode = "overwrite" if output_mode == "complete" else "append"
    writer = (
        df.writeStream.outputMode(output_mode)
        .option("checkpointLocation", checkpoint_location)
        .trigger(processingTime=trigger_interval)
    )
    if query_name is not None:
        writer = writer.queryName(query_name)
    if _native(sink) and output_mode == "append" and _logs_files(df, sink):
        context = WriterContext(new_write_id(), query_id, 0, mode, df.schema.json(), streaming=True)
        return start_logged_stream(df, writer, sink, checkpoint_location, context)
    if _native(sink):
        return writer.foreachBatch(_NativeBatch(sink, query_id, mode, new_write_id())).start()
    register(df.sparkSession)
    # The query keeps the session's settings as they are when it starts.
    with arrow_batch_rows(df.sparkSession, sink.arrow_batch_rows):
        return (
            writer.format(FORMAT_NAME)
            .option(SINK_OPTION, encode_sink(_shipped_while_running(sink)))
            .option(QUERY_OPTION, query_id)
            .option(MODE_OPTION, mode)
            .start()
        )


def _logs_files(df: DataFrame, sink: Sink[Any, Any]) -> bool:
    """Whether Spark's file sink writes the stream for ``sink`` (its driver publishes the logged
    batches: an in-process session, which shares the driver's filesystem, and a table on a
    filesystem that renames); otherwise ``foreachBatch`` does, through the same commit path."""
    from pyspark.sql.session import SparkSession

    return (isinstance(sink, LoggedStreamSink) and isinstance(df.sparkSession, SparkSession)
            and sink.logs_streams())


def _shipped_while_running(sink: Sink[Any, Any]) -> Sink[Any, Any]:
    """``sink.shipping()`` for a streaming query: it lasts as long as this driver process (a
    query's commits run until it stops, which no hook reports reliably; a restart ships anew)."""
    stack = contextlib.ExitStack()
    shipped = stack.enter_context(sink.shipping())
    atexit.register(stack.close)
    return shipped


@dataclass(frozen=True)
class _NativeBatch:
    """The ``foreachBatch`` function of a native-writer sink: write, then the same commit path."""

    sink: Any
    query_id: str
    mode: str
    run: str

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        write_id = batch_prefix(self.query_id, batch_id) + self.run
        schema = df.schema.json()
        context = WriterContext(write_id, self.query_id, batch_id, self.mode, schema, streaming=True)
        _write_native(self.sink, df, context)


def _write_native(sink: Any, df: DataFrame, context: WriterContext) -> None:
    """Spark's writer, then the sink's commit path; a failed commit aborts what was staged
    (``write_native`` cleans up after its own failure)."""
    committables = sink.write_native(df, context)
    try:
        commit_write(sink, context, committables)
    except BaseException:
        abort_write(sink, committables)
        raise
