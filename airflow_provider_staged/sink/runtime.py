"""The unified sink's runtime on PySpark: batch writes, streaming queries and staged builds.

Python sinks run on the Python Data Source write API (Arrow writers): each Spark task attempt
gets its own ``SinkWriter``; its committables travel in the task's commit message; Spark calls
``commit`` (or ``abort``) once, in a fresh Python worker, where the committer and the global
committer run (``api.run_commit``). Failed and speculative attempts' messages never arrive:
sinks stage per task attempt and sweep their write's staging area at commit and abort.

A sink that also implements ``NativeWriteSink`` (the built-in Hive sink) is written by Spark's
own writer instead — ``df.write`` for a batch, ``foreachBatch`` for a stream — and committed
by the very same committers: same API, same guarantees, the native writer's speed. An appending
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
import base64
import contextlib
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyspark
from pyspark import cloudpickle

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
except ModuleNotFoundError:  # pyspark 3.5
    raise ImportError(
        f"the unified sink needs pyspark 4.0 or newer (Spark's Python data source API); "
        f"pyspark {pyspark.__version__} is installed"
    ) from None

from airflow_provider_staged.sink.api import (
    Sink,
    WriterContext,
    abort_write,
    check_mode,
    commit_write,
    fault_point,
)
from airflow_provider_staged.sink.file_stream import LoggedStreamSink, start_logged_stream
from airflow_provider_staged.sink.recovery import batch_prefix
from airflow_provider_staged.storage.files import normalize_location

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

FORMAT_NAME = "staged_sink"
_SINK_OPTION = "sink"
_QUERY_OPTION = "query_id"
_MODE_OPTION = "mode"
# Where the commit step pickles the committables instead of committing (a staged build's write).
_STAGE_OPTION = "stage_to"
# The write id a staged build chose before the job (journaled beside its committables).
_WRITE_OPTION = "write_id"
_OUTPUT_MODES = ("append", "complete", "update")
ARROW_BATCH_ROWS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"


@runtime_checkable
class NativeWriteSink(Protocol):
    """A sink whose writers Spark's own writer can replace (returns the committables itself);
    ``native`` False makes the runtime use its Python writers instead."""

    native: bool

    def write_native(self, df: DataFrame, context: WriterContext) -> list[Any]:
        """Write ``df`` with Spark's writer, staged under ``context.write_id``; its committables."""


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """The committables of one task attempt."""

    committables: list[Any] = field(default_factory=list)


def _native(sink: Sink[Any, Any]) -> bool:
    return isinstance(sink, NativeWriteSink) and bool(sink.native)


def encode_sink(sink: Sink[Any, Any]) -> str:
    """The sink as an option value (pickled: Spark ships options, not objects)."""
    return base64.b64encode(cloudpickle.dumps(sink)).decode("ascii")


def decode_sink(text: str) -> Sink[Any, Any]:
    return cloudpickle.loads(base64.b64decode(text))


def stream_query_id(checkpoint_location: str) -> str:
    """The sink's id of a streaming query: the same for every restart from its checkpoint."""
    return "q" + hashlib.sha256(normalize_location(checkpoint_location).encode()).hexdigest()[:16]


def new_write_id() -> str:
    return "w" + secrets.token_hex(8)


def _task_context(context: WriterContext) -> WriterContext:
    """``context`` completed with the running Spark task's ids."""
    from pyspark import TaskContext

    task = TaskContext.get()
    if task is None:
        return context
    return replace(
        context,
        partition_id=task.partitionId(),
        attempt_number=task.attemptNumber(),
        task_attempt_id=task.taskAttemptId(),
    )


def _write_task(
    sink: Sink[Any, Any], context: WriterContext, batches: Iterator[pyarrow.RecordBatch]
) -> list[Any]:
    """Run one writer over a task's batches; its committables."""
    writer = sink.create_writer(context)
    try:
        for batch in batches:
            writer.write(batch)
            fault_point("write")
        return list(writer.prepare_commit(True))
    finally:
        writer.close()


def _committables(
    sink: Sink[Any, Any], context: WriterContext, messages: list[WriterCommitMessage | None]
) -> list[Any]:
    """The committables of the successful tasks; a write without tasks runs one empty writer
    here, so that the committers still learn the write's id and schema."""
    found = [c for m in messages if isinstance(m, SinkCommitMessage) for c in m.committables]
    if found or any(isinstance(m, SinkCommitMessage) for m in messages):
        return found
    return _write_task(sink, context, iter(()))


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, sink: Sink[Any, Any], context: WriterContext, stage_to: str | None) -> None:
        self.sink = sink
        self.context = context
        self.stage_to = stage_to

    def write(self, iterator: Iterator[pyarrow.RecordBatch]) -> SinkCommitMessage:
        return SinkCommitMessage(_write_task(self.sink, _task_context(self.context), iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        committables = _committables(self.sink, self.context, messages)
        if self.stage_to is not None:
            save_committables(self.stage_to, committables)
            return
        commit_write(self.sink, self.context, committables)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_write(self.sink, _committables(self.sink, self.context, messages))


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, sink: Sink[Any, Any], context: WriterContext) -> None:
        self.sink = sink
        # Pickled with the writer into every task and commit of this query run.
        self.context = context

    def _batch(self, batch_id: int) -> WriterContext:
        write_id = batch_prefix(self.context.query_id, batch_id) + self.context.write_id
        return replace(self.context, batch_id=batch_id, write_id=write_id)

    def write(self, iterator: Iterator[pyarrow.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        batch_id = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
        return SinkCommitMessage(_write_task(self.sink, _task_context(self._batch(batch_id)), iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        context = self._batch(batchId)
        commit_write(self.sink, context, _committables(self.sink, context, messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        context = self._batch(batchId)
        abort_write(self.sink, _committables(self.sink, context, messages))


class StagedSinkDataSource(DataSource):
    """The Python data source ``staged_sink``: writes a DataFrame through a pickled ``Sink``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _context(self, schema: StructType, overwrite: bool, streaming: bool) -> WriterContext:
        mode = "overwrite" if overwrite else self.options.get(_MODE_OPTION, "append")
        run = self.options.get(_WRITE_OPTION) or new_write_id()
        return WriterContext(
            write_id=run,
            query_id=self.options.get(_QUERY_OPTION) or run,
            batch_id=0,
            mode=check_mode(mode),
            schema_json=schema.json(),
            streaming=streaming,
        )

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        context = self._context(schema, overwrite, False)
        return _BatchWriter(decode_sink(self.options[_SINK_OPTION]), context, self.options.get(_STAGE_OPTION))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(decode_sink(self.options[_SINK_OPTION]), self._context(schema, overwrite, True))


def register(spark: SparkSession) -> None:
    """Register the ``staged_sink`` data source in ``spark`` (idempotent)."""
    spark.dataSource.register(StagedSinkDataSource)


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
    writer = df.write.format(FORMAT_NAME).option(_SINK_OPTION, encode_sink(shipped))
    return writer.option(_MODE_OPTION, mode).mode(mode)


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
        _sink_writer(df, shipped, mode).option(_STAGE_OPTION, path).option(_WRITE_OPTION, write_id).save()
    return load_committables(path)


def abort_staged(sink: Sink[Any, Any], path: str) -> None:
    """Abort what ``stage_batch`` into ``path`` staged, also when the writers were cut short before
    the committables were saved: then an empty writer of the saved context tells the global
    committer which write to delete (a sink stages each write under its id)."""
    if os.path.exists(path):
        committables = load_committables(path)
    elif os.path.exists(_context_path(path)):
        with open(_context_path(path), encoding="utf-8") as handle:
            committables = _write_task(sink, WriterContext(**json.load(handle)), iter(()))
    else:
        return  # the writers never started
    if committables:
        abort_write(sink, committables)


def _context_path(path: str) -> str:
    return os.path.join(os.path.dirname(path), "write-context.json")


def save_write_context(path: str, context: WriterContext) -> None:
    """Save the context of the write whose committables will be saved to ``path``."""
    target = _context_path(path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(f"{target}.tmp", "w", encoding="utf-8") as handle:
        json.dump(asdict(context), handle)
    os.replace(f"{target}.tmp", target)


def save_committables(path: str, committables: list[Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(cloudpickle.dumps(committables))
    os.replace(tmp, path)


def load_committables(path: str) -> list[Any]:
    with open(path, "rb") as handle:
        return cloudpickle.loads(handle.read())


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
            .option(_SINK_OPTION, encode_sink(_shipped_while_running(sink)))
            .option(_QUERY_OPTION, query_id)
            .option(_MODE_OPTION, mode)
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
