"""What the sink's runtime and its Python data source share: the write's options, the sink as
an option value, write ids, one task's writer run, and the committables a staged build saves.
Nothing here needs Spark's Python data source API (pyspark 4): the native writers' path
(``runtime``) runs on pyspark 3.5 too."""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle

from airflow_provider_staged.sink.api import Sink, WriterContext, fault_point

if TYPE_CHECKING:
    import pyarrow

FORMAT_NAME = "staged_sink"
SINK_OPTION = "sink"
QUERY_OPTION = "query_id"
MODE_OPTION = "mode"
# Where the commit step pickles the committables instead of committing (a staged build's write).
STAGE_OPTION = "stage_to"
# The write id a staged build chose before the job (journaled beside its committables).
WRITE_OPTION = "write_id"


def encode_sink(sink: Sink[Any, Any]) -> str:
    """The sink as an option value (pickled: Spark ships options, not objects)."""
    return base64.b64encode(cloudpickle.dumps(sink)).decode("ascii")


def decode_sink(text: str) -> Sink[Any, Any]:
    return cloudpickle.loads(base64.b64decode(text))


def new_write_id() -> str:
    return "w" + secrets.token_hex(8)


def task_context(context: WriterContext) -> WriterContext:
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


def write_task(
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


def context_path(path: str) -> str:
    return os.path.join(os.path.dirname(path), "write-context.json")


def save_write_context(path: str, context: WriterContext) -> None:
    """Save the context of the write whose committables will be saved to ``path``."""
    target = context_path(path)
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
