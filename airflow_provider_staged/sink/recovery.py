"""The journaled commit of a sink write and its recovery: a replayed micro-batch is recognised
(``filter_recovered``) and what earlier runs of it left in the journal is settled; a stream's
ended records are pruned as it goes (``commit_once``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from airflow_provider_staged.staging.attempts import abort_attempt, commit_written
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds import from_record
from airflow_provider_staged.staging.pruning import prune_journal

if TYPE_CHECKING:
    from airflow_provider_staged.sink.api import WriteRef
    from airflow_provider_staged.staging.attempts import JournaledStagedTable
    from airflow_provider_staged.staging.manifest import Manifest
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

W = TypeVar("W", bound="WriteRef")
# A streaming sink prunes its target's ended journal records every this many micro-batches
# (``staging.pruning``; the maintenance pass prunes them too), so that a stream's journal stays
# bounded without the maintenance DAG. Reading the journal once per 100 commits costs little.
PRUNE_EVERY_BATCHES = 100


def batch_prefix(query_id: str, batch_id: int) -> str:
    """What the write ids (and attempt ids) of every run of one micro-batch start with."""
    return f"{query_id}-b{batch_id}-"


def commit_once(
    settings: StagedSettings, write: WriteRef, staged: JournaledStagedTable, manifest: Callable[[], Manifest]
) -> None:
    """Commit ``write``'s journaled attempt ``staged``: begin it (once), record ``manifest()``
    (called after the begin), judge its audits (a blocking failure quarantines it and raises
    ``AuditFailedError``) and commit; nothing when the attempt already ended (a retried commit).
    Every ``PRUNE_EVERY_BATCHES``-th micro-batch then prunes the target's journal."""
    record = staged.journal.get(staged.attempt_id)
    if record is not None and record.state.ended:
        return
    if record is None:
        staged.begin()
        record = staged.journal.require(staged.attempt_id)
    if record.state is AttemptState.BEGUN:
        staged.written(manifest())
        staged.audit()
    commit_written(staged)
    if write.streaming and write.batch_id % PRUNE_EVERY_BATCHES == 0:
        try:
            prune_journal(settings, staged.target)
        except Exception:  # housekeeping: the commit stands, the next pruning retries
            log.exception("pruning the journal of %s failed", staged.target)


def abort_once(staged: JournaledStagedTable, reason: str) -> None:
    """Abort one write's journaled attempt, if it began (never what it published)."""
    if staged.journal.get(staged.attempt_id) is not None:
        abort_attempt(staged, reason)


def write_committed(settings: StagedSettings, write_id: str) -> bool:
    """Whether the journaled commit of write ``write_id`` is published (rolled forward when a crash
    cut it short after the catalog changed)."""
    record = settings.journal.get(write_id)
    return record is not None and _settle(settings, record)


def ran_previous_batch(settings: StagedSettings, write: WriteRef) -> bool:
    """Whether the query run making ``write`` (a micro-batch) journaled the micro-batch before it.

    Then no other run staged or committed this batch, and the replay checks (a catalog read, the
    journal's records of the batch, a listing of the staging area) have nothing to find: Spark
    runs a checkpoint's query once at a time, and a restarted run replays only its first batch
    (the last one of the offset log without a commit). A run reaches batch b only after its
    commit of b-1 returned, which journaled b-1. One file read instead of those checks.
    """
    prefix = batch_prefix(write.query_id, write.batch_id)
    if not write.streaming or write.batch_id == 0 or not write.write_id.startswith(prefix):
        return False
    run = write.write_id.removeprefix(prefix)
    return settings.journal.get(batch_prefix(write.query_id, write.batch_id - 1) + run) is not None


def settle_earlier_runs(settings: StagedSettings, query_id: str, batch_id: int, write_id: str) -> bool:
    """Settle the journaled commits of earlier runs of this micro-batch; whether one is published.

    A run whose commit a crash cut short after the catalog changed is rolled forward (finished,
    never discarded); one whose commit never reached the catalog is aborted, so that this run's
    data replaces it.
    """
    published = False
    for record in settings.journal.records(batch_prefix(query_id, batch_id)):
        if record.attempt_id != write_id and _settle(settings, record):
            published = True
    return published


def filter_recovered(
    settings: StagedSettings,
    writes: list[W],
    target_records: Callable[[W], bool],
    sweep: Callable[[W], None] | None = None,
) -> list[W]:
    """``GlobalCommitter.filter_recovered_committables`` of a journaled sink: the ``writes`` that
    neither they nor an earlier run of their micro-batch published.

    A sink supplies ``target_records(write)``: whether the target records the write's batch of its
    query as committed (recorded atomically with the data). Before a replayed micro-batch is
    dropped or committed, the journal records earlier runs of it left are settled (the one whose
    commit landed rolled forward, the rest aborted), then ``sweep(write)`` deletes what earlier
    runs staged without a journal record (a crash before their commit began), where a sink's own
    commit does not already.
    """
    return [write for write in writes if not _recovered(settings, write, target_records, sweep)]


def _recovered(
    settings: StagedSettings,
    write: W,
    target_records: Callable[[W], bool],
    sweep: Callable[[W], None] | None,
) -> bool:
    if write_committed(settings, write.write_id):
        return True
    if not write.streaming or ran_previous_batch(settings, write):
        return False  # a batch write's id is its own; no earlier run of this batch exists
    recorded = target_records(write)
    published = settle_earlier_runs(settings, write.query_id, write.batch_id, write.write_id)
    if sweep is not None:
        sweep(write)
    return recorded or published


def _settle(settings: StagedSettings, record: AttemptRecord) -> bool:
    """Finish a published commit, abort an unpublished open one; whether it is published."""
    if record.state.ended:
        return record.state is AttemptState.COMMITTED
    staged = from_record(record, settings)
    if staged.is_published(record):
        commit_written(staged)
        return True
    abort_attempt(staged, "a later run of the write replaces it")
    return False
