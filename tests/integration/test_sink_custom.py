"""One sink class, written once, used by a batch write, a streaming query and a staged build.

``LogDirSink`` is what a data engineer would write: writers stage Parquet files per task
attempt; the global committer moves them and publishes them by rewriting a log file atomically,
recording (query id, batch id) in that same log, which readers follow.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass

import pyarrow
import pyarrow.parquet as pq
import pytest

from airflow_provider_staged.sink.api import Committer, GlobalCommitter, Sink, SinkWriter, WriterContext
from airflow_provider_staged.sink.runtime import ARROW_BATCH_ROWS_KEY, write_batch, write_stream
from airflow_provider_staged.sink.staged import build_with_sink
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.settings import StagedSettings


@dataclass(frozen=True)
class StagedFile:
    write_id: str
    query_id: str
    batch_id: int
    path: str


@dataclass(frozen=True)
class Publication:
    write_id: str
    query_id: str
    batch_id: int
    paths: tuple[str, ...]


class LogDirSink(Sink[StagedFile, Publication]):
    def __init__(self, root: str) -> None:
        self.root = root

    def create_writer(self, context: WriterContext) -> SinkWriter[StagedFile]:
        return _FileWriter(self.root, context)

    def create_global_committer(self) -> GlobalCommitter[StagedFile, Publication]:
        return _LogCommitter(self.root)


class _FileWriter(SinkWriter[StagedFile]):
    def __init__(self, root: str, context: WriterContext) -> None:
        self.context = context
        self.path = os.path.join(root, "_staging", context.write_id, f"{context.task_key}.parquet")
        self.batches: list[pyarrow.RecordBatch] = []

    def write(self, batch: pyarrow.RecordBatch) -> None:
        self.batches.append(batch)

    def prepare_commit(self, flush: bool) -> list[StagedFile]:
        if not self.batches:
            return []
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        pq.write_table(pyarrow.Table.from_batches(self.batches), self.path)
        c = self.context
        return [StagedFile(c.write_id, c.query_id, c.batch_id, self.path)]


class _LogCommitter(GlobalCommitter[StagedFile, Publication]):
    def __init__(self, root: str) -> None:
        self.root = root
        self.log = os.path.join(root, "log.json")

    def _entries(self) -> list[dict]:
        return json.load(open(self.log)) if os.path.exists(self.log) else []

    def combine(self, committables: list[StagedFile]) -> Publication:
        first = committables[0] if committables else StagedFile("empty", "empty", -1, "")
        paths = tuple(c.path for c in committables)
        return Publication(first.write_id, first.query_id, first.batch_id, paths)

    def filter_recovered_committables(self, global_committables: list[Publication]) -> list[Publication]:
        done = {(e["query_id"], e["batch_id"]) for e in self._entries()}
        return [g for g in global_committables if (g.query_id, g.batch_id) not in done]

    def commit(self, global_committables: list[Publication]) -> list[Publication]:
        for publication in self.filter_recovered_committables(global_committables):
            data = os.path.join(self.root, "data")
            os.makedirs(data, exist_ok=True)
            moved = []
            for path in publication.paths:
                target = os.path.join(data, f"{publication.write_id}-{os.path.basename(path)}")
                if os.path.exists(path):
                    os.replace(path, target)
                moved.append(target)
            entry = {"query_id": publication.query_id, "batch_id": publication.batch_id, "files": moved}
            entries = [*self._entries(), entry]
            with open(self.log + ".tmp", "w") as handle:
                json.dump(entries, handle)
            os.replace(self.log + ".tmp", self.log)  # the atomic publication
            shutil.rmtree(os.path.join(self.root, "_staging", publication.write_id), ignore_errors=True)
        return []

    def abort(self, global_committables: list[Publication]) -> None:
        for publication in global_committables:
            shutil.rmtree(os.path.join(self.root, "_staging", publication.write_id), ignore_errors=True)


def published_ids(root: str) -> list[int]:
    """What a reader of the sink sees: the files its log lists."""
    committer = _LogCommitter(root)
    return sorted(
        i for entry in committer._entries() for path in entry["files"]
        for i in pq.read_table(path).column("id").to_pylist()
    )


def test_one_sink_class_in_batch_streaming_and_staged_build(spark, metastore, tmp_path):
    root = str(tmp_path / "target")
    sink = LogDirSink(root)
    write_batch(spark.sql("SELECT id FROM range(0, 10)"), sink)
    assert published_ids(root) == list(range(10))

    source = tmp_path / "input"
    source.mkdir()
    for index in range(2):
        rows = [json.dumps({"id": 10 + index * 5 + i}) for i in range(5)]
        (source / f"f{index}.json").write_text("\n".join(rows))
    stream = spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json(str(source))
    query = write_stream(stream, sink, checkpoint_location=str(tmp_path / "checkpoint"),
                         trigger_interval="1 second", query_name="custom_sink_" + uuid.uuid4().hex[:6])
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert published_ids(root) == list(range(20))

    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
    build_with_sink(spark, "SELECT id FROM range(20, 25)", sink, settings)
    assert published_ids(root) == list(range(25))
    [record] = settings.journal.records()
    assert (record.kind, record.state) == ("sink", AttemptState.COMMITTED)
    assert os.listdir(os.path.join(root, "_staging")) == []


class LargestBatchSink(Sink[int, int]):
    """Writes the largest Arrow batch its writers received to ``out`` (the commit runs in a
    Spark worker, so the result travels in a file)."""

    def __init__(self, out: str, arrow_batch_rows: int | None) -> None:
        self.out = out
        self.arrow_batch_rows = arrow_batch_rows

    def create_writer(self, context: WriterContext) -> SinkWriter[int]:
        return _LargestBatchWriter()

    def create_committer(self) -> Committer[int]:
        return _WriteLargest(self.out)


class _LargestBatchWriter(SinkWriter[int]):
    def __init__(self) -> None:
        self.largest = 0

    def write(self, batch: pyarrow.RecordBatch) -> None:
        self.largest = max(self.largest, batch.num_rows)

    def prepare_commit(self, flush: bool) -> list[int]:
        return [self.largest]


class _WriteLargest(Committer[int]):
    def __init__(self, out: str) -> None:
        self.out = out

    def commit(self, committables: list[int]) -> list[int]:
        with open(self.out, "w") as handle:
            handle.write(str(max(committables, default=0)))
        return []


def test_writers_get_the_sinks_arrow_batch_size_and_the_session_keeps_its_own(spark, tmp_path):
    session_rows = spark.conf.get(ARROW_BATCH_ROWS_KEY)
    rows = spark.sql("SELECT id FROM range(0, 150000, 1, 1)")  # one task: one writer sees every batch
    out = tmp_path / "largest"
    write_batch(rows, LargestBatchSink(str(out), 100_000))
    assert out.read_text() == "100000"
    assert spark.conf.get(ARROW_BATCH_ROWS_KEY) == session_rows
    write_batch(rows, LargestBatchSink(str(out), None))
    assert out.read_text() == session_rows

    source = tmp_path / "input"
    rows.write.parquet(str(source))  # one file: one task per micro-batch
    stream = spark.readStream.schema("id BIGINT").parquet(str(source))
    query = write_stream(stream, LargestBatchSink(str(out), 50_000), trigger_interval="1 second",
                         checkpoint_location=str(tmp_path / "checkpoint"))
    try:
        assert spark.conf.get(ARROW_BATCH_ROWS_KEY) == session_rows  # restored once the query started
        query.processAllAvailable()
    finally:
        query.stop()
    assert out.read_text() == "50000"

    with pytest.raises(ValueError, match="invalid arrow_batch_rows 0"):
        write_batch(rows, LargestBatchSink(str(out), 0))
    with pytest.raises(ValueError, match="invalid arrow_batch_rows -1"):
        write_stream(stream, LargestBatchSink(str(out), -1), trigger_interval="1 second",
                     checkpoint_location=str(tmp_path / "checkpoint-2"))
    assert spark.streams.active == [] and not (tmp_path / "checkpoint-2").exists()
    assert out.read_text() == "50000"  # nothing ran
