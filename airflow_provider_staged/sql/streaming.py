"""A streaming query of the SQL client (``SET 'execution.runtime-mode' = 'streaming'``) on Spark
Structured Streaming, printed as a changelog (no Airflow import).

The query's tables are read as streams exactly as a CONTINUOUS materialized table reads them
(:mod:`materialized.continuous`: Parquet files arriving under each table's location; what
cannot stream is refused with the table and the reason). Each micro-batch is collected into the
client through ``foreachBatch`` and turned into Flink's row kinds (:mod:`.changelog`).

Termination: with ``-e``/``-f`` the query processes the data available when it starts and ends
(Spark's ``availableNow`` trigger); interactively it runs, a micro-batch per second at most,
until Ctrl-C stops it gracefully. The checkpoint is a temporary directory, deleted when the query
stops: the query is ad hoc, not a materialized table.

Spark Connect (gateway mode) runs a ``foreachBatch`` function on the server, where it cannot
reach this client: streaming queries need embedded mode.
"""

from __future__ import annotations

import queue
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from airflow_provider_staged.materialized.continuous import (
    NotStreamableError,
    StreamSource,
    query_shape,
    stream_views,
    streaming_query,
)
from airflow_provider_staged.materialized.continuous_run import close_streams, open_streams, stream_sources
from airflow_provider_staged.sql.changelog import ChangelogTracker, changelog_plan
from airflow_provider_staged.sql.output import ResultSet, plain_row
from airflow_provider_staged.sql.properties import SessionProperties

INTERACTIVE_TRIGGER = "1 second"  # a file source lists its directories at every trigger
_POLL_SECONDS = 0.2


class GatewayStreamingError(ValueError):
    """A streaming query over Spark Connect."""


def stream_changes(
    spark: Any, query: str, database: str, properties: SessionProperties, metastore_uri: str,
    interactive: bool,
) -> ResultSet:
    """The streaming run of ``query`` (unqualified tables in ``database``): a result whose
    ``changes`` start the query when iterated and stop it (checkpoint deleted) when done."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise GatewayStreamingError(
            "streaming queries need embedded mode (staged sql without --gateway): over Spark Connect "
            "a streaming query's micro-batches are handled on the server, not in this client")
    from pyspark.errors import AnalysisException

    spark.sql(query)  # the batch query's analysis: its errors at their place in the statement
    shape = query_shape(None, query, database)
    plan = changelog_plan(query, shape.aggregated)
    streams = stream_views(stream_sources(spark, shape.sources, metastore_uri))
    limit = properties.max_files_per_trigger
    open_streams(spark, streams, **({"maxFilesPerTrigger": str(limit)} if limit else {}))
    try:
        frame = spark.sql(streaming_query(plan.query, shape.sources, database=database))
    except AnalysisException:
        close_streams(spark, streams)
        raise
    columns = frame.columns[:len(frame.columns) - plan.hidden]
    tracker = ChangelogTracker(plan, properties.max_rows)
    subject = ", ".join(shape.sources)
    return ResultSet(columns, changes=_run(spark, frame, columns, tracker, streams, subject, interactive))


def _run(
    spark: Any, frame: Any, columns: list[str], tracker: ChangelogTracker,
    streams: tuple[StreamSource, ...], subject: str, interactive: bool,
) -> Iterator[ResultSet]:
    """Yield an empty result once the query runs, then each micro-batch's changes, then a message."""
    from pyspark.errors import AnalysisException


    checkpoint = tempfile.mkdtemp(prefix="staged-sql-stream-")
    # Small: a micro-batch waits while the client prints (Flink's result buffer blocks likewise).
    inbox: queue.Queue[list[tuple[Any, ...]]] = queue.Queue(maxsize=2)
    closing, interrupted = threading.Event(), threading.Event()

    def on_batch(batch: Any, batch_id: int) -> None:  # in the driver, on Py4J's callback thread
        rows = [plain_row(row) for row in batch.collect()]
        while not closing.is_set():
            try:
                inbox.put(rows, timeout=_POLL_SECONDS)
                return
            except queue.Full:
                continue

    writer = (frame.writeStream.foreachBatch(on_batch).outputMode(tracker.plan.output_mode)
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(processingTime=INTERACTIVE_TRIGGER) if interactive else writer.trigger(
        availableNow=True)
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set()) if interactive and on_main else None
    query = None
    try:
        try:
            query = writer.start()
        except AnalysisException as err:  # Spark's unsupported-operation checks, with its reason
            raise NotStreamableError(
                f"the query over {subject} cannot run as a stream: {str(err).splitlines()[0]}") from None
        yield ResultSet(columns)
        batches = changes = 0
        while (rows := _next_batch(inbox, query, interrupted)) is not None:
            batch = tracker.changes(rows)
            batches += 1
            changes += len(batch)
            yield ResultSet(columns, [row for _, row in batch], kinds=tuple(kind for kind, _ in batch))
        failure = None if interrupted.is_set() else query.exception()
        if failure is not None:
            raise RuntimeError(f"the streaming query failed: {str(failure).splitlines()[0]}")
        how = "stopped (Ctrl-C)" if interrupted.is_set() else "ended: it read all data there at its start"
        yield ResultSet.info(f"Received a total of {changes} change{'s' if changes != 1 else ''} in "
                             f"{batches} micro-batch{'es' if batches != 1 else ''}; the streaming query "
                             f"{how}.")
    finally:
        closing.set()  # a micro-batch waiting to hand over its rows gives up
        if query is not None:
            query.stop()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        shutil.rmtree(checkpoint, ignore_errors=True)
        close_streams(spark, streams)


def _next_batch(inbox: queue.Queue, query: Any, interrupted: threading.Event) -> list[tuple[Any, ...]] | None:
    """The next micro-batch's rows; None once interrupted or the query ended with nothing left."""
    while not interrupted.is_set():
        try:
            return inbox.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if not query.isActive:  # every micro-batch handed its rows over before the query ended
                try:
                    return inbox.get_nowait()
                except queue.Empty:
                    return None
    return None

