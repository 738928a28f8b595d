"""A staged build's write is aborted completely, also when its driver died mid-write."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_staged.sink.api import GlobalCommitter, Sink, SinkWriter, WriterContext
from airflow_provider_staged.sink.runtime import abort_staged
from airflow_provider_staged.sink.tasks import save_committables, save_write_context

Write = tuple[str, ...]


@dataclass
class Recorder:
    """What a sink stages per write (as the built-in sinks do, under the write's id) and aborts."""

    aborted: list[tuple[str, ...]] = field(default_factory=list)


class _Writer(SinkWriter[str]):
    def __init__(self, context: WriterContext) -> None:
        self.context = context

    def write(self, batch: object) -> None:
        raise AssertionError("an abort writes no rows")

    def prepare_commit(self, flush: bool) -> list[str]:
        return [self.context.write_id]


class _Global(GlobalCommitter[str, tuple[str, ...]]):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def combine(self, committables: list[str]) -> tuple[str, ...]:
        return tuple(committables)

    def filter_recovered_committables(self, global_committables: list[Write]) -> list[Write]:
        return global_committables

    def commit(self, global_committables: list[Write]) -> list[Write]:
        return []

    def abort(self, global_committables: list[Write]) -> None:
        self.recorder.aborted += global_committables


class _Sink(Sink[str, tuple[str, ...]]):
    def __init__(self) -> None:
        self.recorder = Recorder()

    def create_writer(self, context: WriterContext) -> SinkWriter[str]:
        return _Writer(context)

    def create_global_committer(self) -> GlobalCommitter[str, tuple[str, ...]]:
        return _Global(self.recorder)


def test_a_write_cut_short_is_aborted_from_its_saved_context(tmp_path: Path):
    sink, path = _Sink(), str(tmp_path / "attempt" / "committables.pickle")
    abort_staged(sink, path)
    assert sink.recorder.aborted == [], "nothing staged yet: nothing to abort"
    save_write_context(path, WriterContext("w-cut", "w-cut", 0, "append", '{"type":"struct","fields":[]}'))
    abort_staged(sink, path)  # the writers died before their committables were saved
    assert sink.recorder.aborted == [("w-cut",)]


def test_saved_committables_are_aborted_as_they_are(tmp_path: Path):
    sink, path = _Sink(), str(tmp_path / "attempt" / "committables.pickle")
    save_write_context(path, WriterContext("w1", "w1", 0, "append", '{"type":"struct","fields":[]}'))
    save_committables(path, ["w1-task0", "w1-task1"])
    abort_staged(sink, path)
    assert sink.recorder.aborted == [("w1-task0", "w1-task1")]
