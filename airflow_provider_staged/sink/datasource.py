"""The Python data source ``staged_sink``: a Python sink's writers in Spark's tasks (Arrow
writers, Spark 4's Python data source write API: pyspark 4.0 or newer). Each task attempt gets
its own ``SinkWriter``; its committables travel in the task's commit message; Spark calls
``commit`` (or ``abort``) once, in a fresh Python worker, where the committer and the global
committer run. Failed and speculative attempts' messages never arrive."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyspark

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
except ModuleNotFoundError:  # pyspark 3.5
    raise ImportError(
        f"Python sinks (Arrow writers) need pyspark 4.0 or newer (Spark's Python data source API); "
        f"pyspark {pyspark.__version__} is installed: use a sink's native writer (the Hive sink's default)"
    ) from None

from airflow_provider_staged.sink.api import Sink, WriterContext, abort_write, check_mode, commit_write
from airflow_provider_staged.sink.recovery import batch_prefix
from airflow_provider_staged.sink.tasks import (
    FORMAT_NAME,
    MODE_OPTION,
    QUERY_OPTION,
    SINK_OPTION,
    STAGE_OPTION,
    WRITE_OPTION,
    decode_sink,
    new_write_id,
    save_committables,
    task_context,
    write_task,
)

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """The committables of one task attempt."""

    committables: list[Any] = field(default_factory=list)


def _committables(
    sink: Sink[Any, Any], context: WriterContext, messages: list[WriterCommitMessage | None]
) -> list[Any]:
    """The committables of the successful tasks; a write without tasks runs one empty writer
    here, so that the committers still learn the write's id and schema."""
    found = [c for m in messages if isinstance(m, SinkCommitMessage) for c in m.committables]
    if found or any(isinstance(m, SinkCommitMessage) for m in messages):
        return found
    return write_task(sink, context, iter(()))


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, sink: Sink[Any, Any], context: WriterContext, stage_to: str | None) -> None:
        self.sink = sink
        self.context = context
        self.stage_to = stage_to

    def write(self, iterator: Iterator[pyarrow.RecordBatch]) -> SinkCommitMessage:
        return SinkCommitMessage(write_task(self.sink, task_context(self.context), iterator))

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
        return SinkCommitMessage(write_task(self.sink, task_context(self._batch(batch_id)), iterator))

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
        mode = "overwrite" if overwrite else self.options.get(MODE_OPTION, "append")
        run = self.options.get(WRITE_OPTION) or new_write_id()
        return WriterContext(
            write_id=run,
            query_id=self.options.get(QUERY_OPTION) or run,
            batch_id=0,
            mode=check_mode(mode),
            schema_json=schema.json(),
            streaming=streaming,
        )

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        context = self._context(schema, overwrite, False)
        return _BatchWriter(decode_sink(self.options[SINK_OPTION]), context, self.options.get(STAGE_OPTION))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(decode_sink(self.options[SINK_OPTION]), self._context(schema, overwrite, True))


def register(spark: SparkSession) -> None:
    """Register the ``staged_sink`` data source in ``spark`` (idempotent)."""
    spark.dataSource.register(StagedSinkDataSource)
