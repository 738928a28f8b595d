"""Commit groups: attempts that are all published or none (a SQL statement set).

A group is a journal record of kind ``commit_group`` (the ordinary ``AttemptRecord``, so both
journals keep it as they keep any attempt) whose ``catalog["members"]`` names its member
attempts; each member's record names the group (``AttemptRecord.group``). The protocol:

1. the group record is journaled BEGUN (undecided) before any member begins;
2. every member writes its staged data and becomes WRITTEN;
3. the decision: the group record becomes COMMITTED, in one journal write under the group's lock,
   only when every member is WRITTEN — before any member is published;
4. every member commits through the one commit path (each commit is idempotent).

Before the decision, aborting any member aborts the group first (under the group's lock, which
the decision holds too), so a decision never follows an abort; after it, a member is never
aborted. Recovery (``staging.reconcile``) follows the group record: decided → every member not
yet committed is committed (rolled forward); aborted, or undecided with its process gone or its
heartbeat expired → the group and every member are aborted.

What a concurrent reader sees: a metastore switches one table per call and has no multi-table
swap, so between the first and the last member commit (step 4) some targets already show their
new version and the others still their old one; each single table is always wholly old or wholly
new. The window lasts the members' commits (retention runs after the last one): for two tables
a median of 47 ms between their commits, at most 0.85 s measured on a loaded machine
(``tests/integration/test_statement_set.py`` prints it; docs/DESIGN.md has the numbers), and
after a crash inside it until ``staged reconcile`` rolls the rest forward. A reader that must
see all targets at one point reads them after the statement set returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_staged.staging.errors import CommitConflictError, StagingError
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.owner import ProcessRef
from airflow_provider_staged.staging.versions import new_attempt_id

if TYPE_CHECKING:
    from airflow_provider_staged.staging.journal import AttemptJournal

GROUP_KIND = "commit_group"


def begin_group(journal: AttemptJournal, members: list[tuple[str, str]], conn_id: str | None = None) -> str:
    """Journal an undecided group of ``members`` ((attempt id, target) pairs); its id."""
    group_id = new_attempt_id(None)
    targets = [target for _, target in members]
    journal.create(AttemptRecord(
        attempt_id=group_id,
        kind=GROUP_KIND,
        # Never a table's name: what lists a table's versions by target never takes it for one.
        target=f"statement set ({', '.join(targets)})",
        purpose="group",
        location="",
        catalog={"members": [attempt_id for attempt_id, _ in members], "targets": targets},
        conn_id=conn_id,
        owner=ProcessRef.current(),
    ))
    return group_id


def members_of(record: AttemptRecord) -> list[str]:
    return list(record.catalog.get("members") or [])


def decide(journal: AttemptJournal, group_id: str) -> None:
    """Journal the group's decision to publish: COMMITTED, only when every member is WRITTEN."""
    with journal.locked(group_id):
        group = journal.require(group_id)
        if group.state is AttemptState.COMMITTED:
            return
        if group.state is AttemptState.ABORTED:
            raise CommitConflictError(f"{group.target} ({group_id}) was aborted: it cannot be decided")
        for member_id in members_of(group):
            member = journal.get(member_id)
            if member is None or member.state is not AttemptState.WRITTEN:
                state = "not begun" if member is None else member.state.value
                raise StagingError(f"{group.target}: member {member_id} is {state}, not WRITTEN: "
                                   "the group cannot be decided")
        journal.transition(group_id, AttemptState.COMMITTED)


def abort_undecided(journal: AttemptJournal, group_id: str, reason: str | None) -> None:
    """Journal the group ABORTED unless it was decided (then CommitConflictError: its members
    are only ever rolled forward); the caller holds ``journal.locked(group_id)``."""
    group = journal.get(group_id)
    if group is None or group.state is AttemptState.ABORTED:
        return
    if group.state is AttemptState.COMMITTED:
        raise CommitConflictError(f"{group.target} ({group_id}) was decided: its members are committed, "
                                  "never aborted (`staged reconcile` rolls them forward)")
    journal.transition(group_id, AttemptState.ABORTED, error=reason)


def undecided_and_abandoned(record: AttemptRecord, now: float, ttl_seconds: float) -> bool:
    """Whether an undecided group can never be decided: its process is gone, or its heartbeat
    is older than the attempt TTL."""
    if record.state.ended:
        return False
    gone = record.owner is not None and record.owner.gone()
    return gone or now - record.heartbeat_at > ttl_seconds
