"""Streaming appends through Spark's own file sink, published by the driver in batch order.

Spark's file sink (``format("parquet")``) writes each micro-batch into the query's stream
staging directory and lists its files, once per batch id, in its log (``_spark_metadata/<n>``):
a replayed batch that is logged already is skipped, so the log is exactly once by itself. A
driver thread publishes each logged batch through the sink's commit path (``commit_write``: the
journaled commit that records the batch in the target) in batch order while Spark writes the
next one, so the commit is off the write's critical path. A batch's files move out of the
staging directory only inside its journaled commit, and an aborted commit moves them back:
a logged batch is never lost, whoever aborts it (``staged reconcile`` included).

Recovery: before the query starts, every logged batch is published again through the sink's
``filter_recovered_committables`` (what an earlier run published or the target records is
dropped, an earlier run's commit cut short is rolled forward or aborted), then everything in the
staging directory outside the log (task attempts and batches that never reached it) is deleted.
The log keeps its last batches only: compaction is off, so each log file lists its own batch.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from airflow_provider_staged.staging.manifest import DataFile
from airflow_provider_staged.storage.files import delete_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

    from airflow_provider_staged.sink.api import WriterContext

log = logging.getLogger(__name__)

LOG_DIR = "_spark_metadata"
COMPACT_INTERVAL_KEY = "spark.sql.streaming.fileSink.log.compactInterval"
# Never a compaction batch: each log file then lists only its own batch's files.
NO_COMPACTION = str(2**31 - 1)
# Log files kept behind the last published batch (Spark reads only the latest one to skip a replay).
KEEP_LOGGED_BATCHES = 2
POLL_SECONDS = 0.05


@runtime_checkable
class LoggedStreamSink(Protocol):
    """A sink that Spark's file sink can write for it: the runtime publishes the logged batches."""

    native: bool
    partition_by: list[str]

    def logs_streams(self) -> bool:
        """Whether its table's filesystem renames files (the logged batches' files move)."""

    def stream_staging(self, query_id: str) -> str:
        """The local directory Spark's file sink writes the query's micro-batches into."""

    def logged_committables(self, context: WriterContext, staging: str, files: list[DataFile]) -> list[Any]:
        """The committables of one logged micro-batch whose ``files`` lie under ``staging``."""


def logged_batches(staging: str) -> list[int]:
    """The batch ids the file sink's log in ``staging`` lists, ascending."""
    directory = os.path.join(staging, LOG_DIR)
    if not os.path.isdir(directory):
        return []
    names = os.listdir(directory)
    compacted = [name for name in names if name.endswith(".compact")]
    if compacted:
        raise RuntimeError(f"the file sink log {directory} was compacted ({compacted[0]}): it no longer "
                           f"lists each batch's own files; {COMPACT_INTERVAL_KEY} must stay {NO_COMPACTION}")
    return sorted(int(name) for name in names if name.isdigit())


def logged_files(staging: str, batch_id: int) -> list[DataFile]:
    """The files of logged batch ``batch_id``, relative to ``staging`` (rows not counted)."""
    with open(os.path.join(staging, LOG_DIR, str(batch_id)), encoding="utf-8") as handle:
        lines = handle.read().splitlines()[1:]  # after the version line ("v1")
    files = []
    for line in lines:
        entry = json.loads(line)
        if entry.get("action", "add") != "add" or entry.get("isDir"):
            continue
        path = unquote(urlparse(entry["path"]).path)  # Spark logs each path as a URI (percent-encoded)
        # Rows are counted where the commit finds the file (an earlier run may have moved it).
        files.append(DataFile(os.path.relpath(path, staging), 0, int(entry["size"])))
    return files


def hadoop_checksum(path: str) -> str:
    """The checksum file Hadoop's local filesystem writes beside ``path``."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.crc")


def remove_if_present(*paths: str) -> None:
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def _delete_files(staging: str, files: list[DataFile]) -> None:
    """Delete ``files`` (and Hadoop's checksum files of them) where they are left in ``staging``."""
    for item in files:
        path = os.path.join(staging, item.path)
        remove_if_present(path, hadoop_checksum(path))


def sweep_staging(staging: str) -> None:
    """Delete everything in ``staging`` but the log: once every logged batch is published (and
    no query runs), what is left was never logged (failed or cut-short task attempts)."""
    if not os.path.isdir(staging):
        return
    for name in os.listdir(staging):
        if name != LOG_DIR:
            path = os.path.join(staging, name)
            if os.path.isdir(path):
                delete_dir(path)
            else:
                os.remove(path)


def _prune_log(staging: str, logged: list[int], published: int) -> None:
    """Delete the log files of the ``logged`` batches more than ``KEEP_LOGGED_BATCHES`` behind."""
    for batch_id in logged:
        if batch_id < published - KEEP_LOGGED_BATCHES + 1:
            path = os.path.join(staging, LOG_DIR, str(batch_id))
            remove_if_present(path, hadoop_checksum(path))


class LoggedBatchPublisher:
    """Publishes the logged micro-batches of one query run through ``sink``, in batch order."""

    def __init__(self, sink: LoggedStreamSink, staging: str, context: WriterContext) -> None:
        self.sink = sink
        self.staging = staging
        self.context = context  # the run's: query id, run write id, mode, schema
        self.published = -1  # the last batch this run published or found published
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def publish_pending(self) -> None:
        """Publish every logged batch after the last one published, in order; raise a failure."""
        from airflow_provider_staged.sink.api import commit_write
        from airflow_provider_staged.sink.recovery import batch_prefix

        with self._lock:
            if self.error is not None:
                raise self.error
            logged = logged_batches(self.staging)
            pending = [n for n in logged if n > self.published]
            try:
                for batch_id in pending:
                    files = logged_files(self.staging, batch_id)
                    write_id = batch_prefix(self.context.query_id, batch_id) + self.context.write_id
                    context = replace(self.context, batch_id=batch_id, write_id=write_id)
                    committables = self.sink.logged_committables(context, self.staging, files)
                    if not commit_write(self.sink, context, committables):
                        _delete_files(self.staging, files)  # a batch published before: its leftovers
                    self.published = batch_id
                if pending:
                    _prune_log(self.staging, logged, self.published)
            except BaseException as error:  # the batch stays logged: the next start publishes it
                self.error = error
                raise

    def start(self, query: StreamingQuery) -> None:
        """Publish in a daemon thread while ``query`` runs; a failure stops the query."""

        def run() -> None:
            while not self._stopped.wait(POLL_SECONDS):
                try:
                    self.publish_pending()
                except BaseException:
                    log.exception("publishing micro-batches of %s failed: the query stops", self.sink.name)
                    query.stop()
                    return

        self._thread = threading.Thread(target=run, name=f"publish-{self.context.query_id}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread (the query has stopped), publish what is logged, sweep the rest."""
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.error is None:  # else reported by ``exception()``; the logged batches stay
            self.publish_pending()
            sweep_staging(self.staging)


@dataclass
class PublishedQuery:
    """Spark's streaming query of a logged sink: its waits also wait for the publication, its
    failure is also the publisher's."""

    query: Any
    publisher: LoggedBatchPublisher

    def __getattr__(self, name: str) -> Any:
        return getattr(self.query, name)

    @property
    def isActive(self) -> bool:
        return bool(self.query.isActive) and self.publisher.error is None

    def processAllAvailable(self) -> None:
        self.query.processAllAvailable()
        self.publisher.publish_pending()

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        ended = self.query.awaitTermination(timeout) if timeout is not None else self.query.awaitTermination()
        if ended is None or ended:
            self.publisher.close()
            if self.publisher.error is not None:  # the query stopped because its publication failed
                raise self.publisher.error
        return ended

    def exception(self) -> BaseException | None:
        return self.publisher.error or self.query.exception()

    def stop(self) -> None:
        self.query.stop()
        self.publisher.close()


def start_logged_stream(
    df: DataFrame, writer: DataStreamWriter, sink: LoggedStreamSink, checkpoint: str, context: WriterContext
) -> PublishedQuery:
    """Start ``writer`` (the query's trigger, checkpoint and name set) into Spark's Parquet file
    sink at ``sink``'s stream staging, after publishing what an earlier run logged."""
    staging = sink.stream_staging(context.query_id)
    if not os.path.isdir(os.path.join(checkpoint.removeprefix("file:"), "offsets")):
        delete_dir(staging)  # a new query (its checkpoint is gone): an old log must not be replayed
    publisher = LoggedBatchPublisher(sink, staging, context)
    publisher.publish_pending()
    sweep_staging(staging)
    writer = writer.format("parquet").option("path", staging)
    if sink.partition_by:
        writer = writer.partitionBy(*sink.partition_by)
    spark = df.sparkSession
    previous = spark.conf.get(COMPACT_INTERVAL_KEY)
    spark.conf.set(COMPACT_INTERVAL_KEY, NO_COMPACTION)  # read when the file sink is made, in start()
    try:
        query = writer.start()
    finally:
        spark.conf.set(COMPACT_INTERVAL_KEY, previous)
    publisher.start(query)
    return PublishedQuery(query, publisher)
