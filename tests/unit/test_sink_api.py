"""The sink API's pure logic: the commit step, retries, the idempotency contract check."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import pytest

from airflow_provider_staged.sink.api import (
    Committer,
    GlobalCommitter,
    Sink,
    SinkWriter,
    WriterContext,
    check_committer_idempotent,
    check_mode,
    run_commit,
)


@dataclass(frozen=True)
class Item:
    query_id: str
    batch_id: int
    value: int


@dataclass
class Target:
    """An in-memory target that records (query id, batch id) with the data, as the contract asks."""

    rows: list[int] = field(default_factory=list)
    done: set[tuple[str, int]] = field(default_factory=set)
    aborted: list[tuple[str, int]] = field(default_factory=list)


class _Global(GlobalCommitter[Item, tuple[str, int, tuple[int, ...]]]):
    def __init__(self, target: Target, idempotent: bool, flaky: int) -> None:
        self.target, self.idempotent, self.flaky = target, idempotent, flaky

    def combine(self, committables):
        return (committables[0].query_id, committables[0].batch_id, tuple(c.value for c in committables))

    def filter_recovered_committables(self, global_committables):
        return [g for g in global_committables if (g[0], g[1]) not in self.target.done]

    def commit(self, global_committables):
        retry = []
        for query, batch, values in global_committables:
            if self.flaky:  # a transient failure: ask to retry
                self.flaky -= 1
                retry.append((query, batch, values))
                continue
            if self.idempotent and (query, batch) in self.target.done:
                continue
            self.target.rows += values
            self.target.done.add((query, batch))
        return retry

    def abort(self, global_committables):
        self.target.aborted += [(g[0], g[1]) for g in global_committables]


class MemorySink(Sink[Item, tuple]):
    def __init__(self, target: Target, idempotent: bool = True, flaky: int = 0) -> None:
        self.target = target
        self.global_committer = _Global(target, idempotent, flaky)

    def create_writer(self, context: WriterContext) -> SinkWriter[Item]:
        raise NotImplementedError("the commit step is under test")

    def create_global_committer(self):
        return self.global_committer


def items(batch: int) -> list[Item]:
    return [Item("q", batch, batch * 10 + i) for i in range(3)]


def test_commit_publishes_once_and_a_replay_is_aborted_not_published():
    target = Target()
    sink = MemorySink(target)
    assert run_commit(sink, items(0))
    assert not run_commit(sink, items(0))  # Spark replays batch 0 after a crash
    assert target.rows == [0, 1, 2]
    assert target.aborted == [("q", 0)]


def test_what_a_committer_returns_is_retried_until_done():
    target = Target()
    assert run_commit(MemorySink(target, flaky=2), items(1))
    assert target.rows == [10, 11, 12]


def test_a_committer_that_always_asks_to_retry_fails_naming_the_sink():
    with pytest.raises(RuntimeError, match="MemorySink still asks to retry 1"):
        run_commit(MemorySink(Target(), flaky=99), items(1))


def test_the_contract_check_passes_an_idempotent_sink_and_fails_one_that_is_not():
    target = Target()
    check_committer_idempotent(MemorySink(target), items(2), lambda: list(target.rows))
    other = Target()
    with pytest.raises(AssertionError, match="a second commit changed the target"):
        check_committer_idempotent(MemorySink(other, idempotent=False), items(2), lambda: list(other.rows))


def test_a_committer_is_also_run_before_the_global_one():
    calls = []

    class Recording(Committer[Item]):
        def commit(self, committables):
            calls.append(len(committables))
            return []

    class WithCommitter(MemorySink):
        def create_committer(self):
            return Recording()

    run_commit(WithCommitter(Target()), items(3))
    assert calls == [3]


def test_modes_and_contexts():
    assert check_mode("overwrite") == "overwrite"
    with pytest.raises(ValueError, match="'upsert'"):
        check_mode("upsert")
    context = WriterContext("w1", "q", 4, "append", "{}", partition_id=2, attempt_number=1, task_attempt_id=7)
    assert context.task_key == "p2-a1-t7"
    assert pickle.loads(pickle.dumps(context)) == context
