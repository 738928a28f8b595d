"""Reconcile: finish or roll back attempts whose task ended, expire abandoned ones (pure).

Attempts are rebuilt by the kind that made them (``staging.kinds.from_record``) and go through
the one commit path; nothing here deletes what the catalog points at (``abort_attempt`` checks
``is_published`` first). The task's state comes from a lookup the caller passes (Airflow's
database, see ``callbacks.airflow_task_state``), or none at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_staged.staging import groups
from airflow_provider_staged.staging.attempts import abort_attempt, commit_written, is_quarantined, unaudited
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.kinds import from_record

if TYPE_CHECKING:
    from airflow_provider_staged.staging.attempts import JournaledStagedTable
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

TaskStateLookup = Callable[[TaskRef], str | None]
_FAILED_STATES = {"failed", "upstream_failed", "skipped", "removed", "up_for_retry", "superseded"}


@dataclass(frozen=True)
class ReconcileAction:
    attempt_id: str
    target: str
    action: str


def reconcile(
    settings: StagedSettings, task_state: TaskStateLookup | None = None, now: float | None = None
) -> list[ReconcileAction]:
    """Settle every open attempt of ``settings``' journal:

    - an abort that a crash cut short (ABORTING) → aborted again, never committed;
    - published in the catalog but not journaled → journaled COMMITTED ("finished"), whatever
      the task's state: the catalog already serves it;
    - quarantined (failed its audits) → kept for inspection, whatever the task's state, and
      discarded ("swept") once the quarantine period since its audit has passed;
    - task succeeded and the data is WRITTEN → committed (a commit callback that failed), unless
      it declared audits whose verdict was never recorded: aborted, never published unaudited;
    - task failed, was retried or is gone → aborted;
    - no task, and the process that drove it is certainly gone (``owner``) → aborted;
    - nothing knows the task and its heartbeat is older than the TTL → aborted ("expired");
    - a member of a commit group (``staging.groups``) follows its group: decided → committed
      (rolled forward); aborted, or undecided and abandoned → aborted with the group; undecided
      otherwise → left running. An abandoned undecided group record → aborted.

    One attempt that cannot be settled (its catalog unreachable, say) is reported as
    ``failed: ...`` and the others are still settled.
    """
    now = settings.journal.now() if now is None else now
    actions = []
    for record in settings.journal.open_attempts():
        try:
            action = _settle(record, settings, task_state, now)
        except Exception as error:
            log.exception("reconcile %s (%s) failed", record.attempt_id, record.target)
            action = f"failed: {error}"
        log.info("reconcile %s (%s): %s", record.attempt_id, record.target, action)
        actions.append(ReconcileAction(record.attempt_id, record.target, action))
    return actions


def _settle(
    record: AttemptRecord, settings: StagedSettings, task_state: TaskStateLookup | None, now: float
) -> str:
    if record.kind == groups.GROUP_KIND:
        return _settle_group(record, settings, now)
    staged = from_record(record, settings)
    # Every section of an attempt that holds a catalog lock holds its journal lock: holding that,
    # any lock of the attempt was left by a dead process (a stock metastore never expires it).
    with settings.journal.locked(record.attempt_id):
        if released := staged.release_locks():
            log.warning("released catalog locks %s that attempt %s left on %s", released,
                        record.attempt_id, record.target)
    state = task_state(record.task) if task_state is not None and record.task is not None else None
    if record.state is AttemptState.ABORTING:
        abort_attempt(staged, "abort resumed")
        return "aborted"
    if staged.is_published(record):
        staged.finish()
        return "finished"
    if is_quarantined(record):
        audited_at = float((record.audits or {}).get("audited_at", record.updated_at))
        if now - audited_at <= settings.retention.quarantine_seconds:
            return "quarantined"
        abort_attempt(staged, "quarantine period over", discard_quarantined=True)
        return "swept"
    if state == "success" and record.state is AttemptState.WRITTEN and unaudited(record):
        abort_attempt(staged, "its audits were never recorded")
        return "aborted"
    if record.group is not None:
        return _settle_member(staged, record, settings, now)
    if state == "success" and record.state is AttemptState.WRITTEN:
        if later_try(settings, record):  # the task succeeded, but by a later try with its own attempt
            abort_attempt(staged, "superseded by a later try of its task")
            return "aborted"
        commit_written(staged)
        return "committed"
    if state == "success" or state in _FAILED_STATES:
        abort_attempt(staged, f"task {state}")
        return "aborted"
    if record.task is None and record.owner is not None and record.owner.gone():
        abort_attempt(staged, f"its process {record.owner.pid} is gone (no Airflow task)")
        return "aborted"
    if now - record.heartbeat_at > settings.attempt_ttl_seconds:
        abort_attempt(staged, "expired: no heartbeat within the attempt TTL")
        return "expired"
    return "left running"


def later_try(settings: StagedSettings, record: AttemptRecord) -> bool:
    """Whether a later try of ``record``'s task began an attempt of its own (a lookup that knows
    no try numbers, the Task SDK's, cannot tell which try succeeded: the journal can)."""
    task = record.task
    return task is not None and any(
        (other.task.dag_id, other.task.task_id, other.task.run_id, other.task.map_index)
        == (task.dag_id, task.task_id, task.run_id, task.map_index)
        and other.task.try_number > task.try_number
        for other in settings.journal.records() if other.task is not None
    )


def _settle_group(record: AttemptRecord, settings: StagedSettings, now: float) -> str:
    """An undecided group whose process is gone (or silent past the TTL) can never be decided."""
    if not groups.undecided_and_abandoned(record, now, settings.attempt_ttl_seconds):
        return "left running"
    with settings.journal.locked(record.attempt_id):
        groups.abort_undecided(settings.journal, record.attempt_id, "its process is gone undecided")
    return "aborted"


def _settle_member(staged: JournaledStagedTable, record: AttemptRecord, settings: StagedSettings,
                   now: float) -> str:
    """The group's decision settles its member: roll forward, abort, or wait."""
    group = settings.journal.get(record.group or "")
    if group is not None and group.state is AttemptState.COMMITTED:
        if record.state is not AttemptState.WRITTEN:
            raise StagingError(f"attempt {record.attempt_id} is {record.state.value} in decided group "
                               f"{group.attempt_id}: it cannot be rolled forward")
        commit_written(staged)
        return "committed (its group was decided)"
    if group is not None and not group.state.ended \
            and not groups.undecided_and_abandoned(group, now, settings.attempt_ttl_seconds):
        return "left running"
    abort_attempt(staged, f"its group {record.group} was not decided")
    return "aborted"
