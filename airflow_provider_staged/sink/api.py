"""The unified sink API (FLIP-143) in Python: write a sink once, use it in batch, streaming and builds.

A sink stages data in its writers and publishes it in its committers:

- ``Sink.create_writer(context)`` → a ``SinkWriter`` per Spark task attempt: ``write(batch)``
  receives ``pyarrow.RecordBatch`` es, ``prepare_commit(flush)`` returns the committables (typed,
  picklable dataclasses describing what was staged), ``close()`` releases resources.
- ``Sink.create_committer()`` → a ``Committer`` (optional): ``commit(committables)`` finalizes
  the committables of one write and returns those to retry.
- ``Sink.create_global_committer()`` → a ``GlobalCommitter`` (optional, parallelism 1):
  ``combine`` folds one write's committables into a global committable,
  ``filter_recovered_committables`` drops those already committed, ``commit`` publishes the rest
  (returns those to retry), ``end_of_input`` marks the end of a bounded write.

The runtime (``sink.runtime``) guarantees: only committables of successful task attempts reach
the committers (files of failed or speculative attempts never do: a sink sweeps its write's
staging area after its commit and in ``abort``); the committers run once per batch write or
micro-batch, in a process that may be new (keep no state in memory between calls).

**Idempotency contract.** Spark replays a micro-batch after a crash between the sink's commit
and the checkpoint, and a commit may be cut short at any point. Therefore:

1. ``Committer.commit`` and ``GlobalCommitter.commit`` must be idempotent: committing the
   same committables again (fully or partly done before) leaves the target as after one commit.
2. A global committer records what it published (e.g. the query id and batch id) atomically
   with the data, in the target, and ``filter_recovered_committables`` returns only those not
   recorded there.
3. ``GlobalCommitter.abort`` deletes what the committables staged and never what a commit
   published.

``check_committer_idempotent`` checks 1 and 2 for a sink's committers (used by the tests).
Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pyarrow

from airflow_provider_staged.staging.faults import fault_point

CommT = TypeVar("CommT")
GlobalCommT = TypeVar("GlobalCommT")

WRITE_MODES = ("append", "overwrite")

log = logging.getLogger(__name__)


def check_mode(mode: object) -> str:
    """``mode`` if it is a known write mode, else raise naming it."""
    if mode not in WRITE_MODES:
        raise ValueError(f"invalid sink write mode {mode!r}: expected one of {', '.join(WRITE_MODES)}")
    return str(mode)


@dataclass(frozen=True)
class WriterContext:
    """Where a writer runs and which write it belongs to.

    ``write_id`` is unique per batch write and per (query run, micro-batch): a sink stages
    under it. ``query_id`` is stable across restarts of a streaming query (the batch write's own
    id for a batch write); ``batch_id`` is the micro-batch (0 for a batch write). The task ids are
    Spark's (``partition_id``, ``attempt_number``, ``task_attempt_id``; -1 for the empty writer
    the runtime runs when a write has no tasks). ``schema_json`` is the Spark schema of the rows.
    """

    write_id: str
    query_id: str
    batch_id: int
    mode: str
    schema_json: str
    partition_id: int = -1
    attempt_number: int = 0
    task_attempt_id: int = -1
    streaming: bool = False

    @property
    def task_key(self) -> str:
        """A name unique per task attempt of the write (its staging sub-area)."""
        return f"p{self.partition_id}-a{self.attempt_number}-t{self.task_attempt_id}"


@dataclass(frozen=True)
class WriteRef:
    """Which write a committable belongs to: the built-in sinks' committables start with it."""

    write_id: str
    query_id: str
    batch_id: int
    streaming: bool


class SinkWriter(ABC, Generic[CommT]):
    """Stages the rows of one task attempt; returns committables describing what it staged."""

    @abstractmethod
    def write(self, batch: pyarrow.RecordBatch) -> None:
        """Stage ``batch``."""

    @abstractmethod
    def prepare_commit(self, flush: bool) -> list[CommT]:
        """Committables of what was staged (``flush``: stage what is still buffered first)."""

    def close(self) -> None:
        """Release resources (called after ``prepare_commit`` and when the task fails)."""


class Committer(ABC, Generic[CommT]):
    """Commits the committables of one write; idempotent (see the module docstring)."""

    @abstractmethod
    def commit(self, committables: list[CommT]) -> list[CommT]:
        """Commit ``committables``; return those to retry (empty when all are done)."""


class GlobalCommitter(ABC, Generic[CommT, GlobalCommT]):
    """Publishes a whole write at once, with parallelism 1; idempotent (module docstring)."""

    @abstractmethod
    def combine(self, committables: list[CommT]) -> GlobalCommT:
        """One global committable from one write's committables."""

    @abstractmethod
    def filter_recovered_committables(self, global_committables: list[GlobalCommT]) -> list[GlobalCommT]:
        """Those of ``global_committables`` the target has not recorded as committed."""

    @abstractmethod
    def commit(self, global_committables: list[GlobalCommT]) -> list[GlobalCommT]:
        """Publish; return those to retry (empty when all are done)."""

    def abort(self, global_committables: list[GlobalCommT]) -> None:
        """Delete what these staged (a failed write, or a replay already committed)."""

    def end_of_input(self) -> None:
        """No more committables will come (the end of a batch write)."""


class Sink(ABC, Generic[CommT, GlobalCommT]):
    """A target written the same way by batch writes, streaming queries and staged builds.

    Instances are pickled to Spark's workers: keep them small and free of open clients.
    """

    # Rows per Arrow batch its writers receive: Spark's maxRecordsPerBatch (default 10,000) for
    # the duration of the write; None keeps the session's. Spark's maxBytesPerBatch (64 MiB by
    # default) still bounds a batch of wide rows. 100,000 made the Python writers 1.045x faster.
    arrow_batch_rows: int | None = 100_000

    @abstractmethod
    def create_writer(self, context: WriterContext) -> SinkWriter[CommT]:
        """A writer for one task attempt."""

    def create_committer(self) -> Committer[CommT] | None:
        """The per-write committer, or None."""
        return None

    def create_global_committer(self) -> GlobalCommitter[CommT, GlobalCommT] | None:
        """The global committer, or None."""
        return None

    @property
    def name(self) -> str:
        """What the sink writes to, for messages and the journal."""
        return type(self).__name__

    @contextlib.contextmanager
    def shipping(self) -> Iterator[Sink[CommT, GlobalCommT]]:
        """This sink as Spark's workers get it (pickled) for one write, valid while the block runs.

        A sink whose workers need a secret (a password) yields a copy that finds it somewhere
        living only for the write, so that it is in no pickle, plan or journal (``PostgresSink``);
        the default is the sink itself.
        """
        yield self


# Fault injection for the crash tests: SIGKILL the process group (the whole Spark driver) at
# the point this variable names; ``FAULT_PGID_ENV`` names the group when the hook runs in a
# Spark worker of another group.
MAX_COMMIT_ROUNDS = 5


def commit_until_done(commit: Callable[[list[Any]], list[Any]], items: list[Any], what: str) -> None:
    """Call ``commit`` with what it returned to retry until it returns nothing (bounded)."""
    pending = list(items)
    for _ in range(MAX_COMMIT_ROUNDS):
        if not pending:
            return
        pending = list(commit(pending))
    if pending:
        raise RuntimeError(f"{what} still asks to retry {len(pending)} committable(s) after "
                           f"{MAX_COMMIT_ROUNDS} rounds: {pending[:3]!r}")


def run_commit(sink: Sink[Any, Any], committables: Sequence[Any]) -> bool:
    """The commit step of one write: committer, then combine → filter recovered → global commit.

    Returns whether the write was published now (False: a replay the target had recorded, whose
    staging was then aborted). A bounded write's global committer gets ``end_of_input`` from the
    runtime, not here.
    """
    committer = sink.create_committer()
    if committer is not None:
        commit_until_done(committer.commit, list(committables), f"committer of {sink.name}")
    global_committer = sink.create_global_committer()
    if global_committer is None:
        return True
    combined = global_committer.combine(list(committables))
    fresh = global_committer.filter_recovered_committables([combined])
    if not fresh:
        global_committer.abort([combined])
        return False
    commit_until_done(global_committer.commit, fresh, f"global committer of {sink.name}")
    return True


def commit_write(sink: Sink[Any, Any], context: WriterContext, committables: list[Any]) -> bool:
    """Commit one write; a bounded one also gets ``end_of_input``. Whether it was published now."""
    fault_point("after_writers")
    published = run_commit(sink, committables)
    fault_point("after_commit")  # published, not yet in Spark's checkpoint: the replay case
    if not context.streaming:
        global_committer = sink.create_global_committer()
        if global_committer is not None:
            global_committer.end_of_input()
    log.info("sink %s: write %s %s", sink.name, context.write_id,
             "committed" if published else "was already committed (replay dropped)")
    return published


def abort_write(sink: Sink[Any, Any], committables: list[Any]) -> None:
    """Let the global committer delete what a failed write staged."""
    global_committer = sink.create_global_committer()
    if global_committer is not None:
        global_committer.abort([global_committer.combine(committables)])


def check_committer_idempotent(
    sink: Sink[Any, Any], committables: Sequence[Any], read_target: Callable[[], Any]
) -> None:
    """Raise unless the committers keep the idempotency contract for ``committables``: after one
    commit, committing them again (committer and global committer, without the filter) leaves
    ``read_target()`` unchanged, and ``filter_recovered_committables`` drops the write."""
    run_commit(sink, committables)
    once = read_target()
    committer = sink.create_committer()
    if committer is not None:
        commit_until_done(committer.commit, list(committables), f"committer of {sink.name}")
    global_committer = sink.create_global_committer()
    if global_committer is not None:
        combined = global_committer.combine(list(committables))
        commit_until_done(global_committer.commit, [combined], f"global committer of {sink.name}")
        if global_committer.filter_recovered_committables([combined]):
            raise AssertionError(f"{sink.name}: a committed write is not recognised as recovered")
    twice = read_target()
    if once != twice:
        raise AssertionError(f"{sink.name}: a second commit changed the target ({once!r} → {twice!r})")
