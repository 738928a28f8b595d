"""Publishing a quarantined attempt anyway, after a person looked at it (pure).

A version that failed its audits stays WRITTEN and unpublished (``attempts.is_quarantined``).
``publish_anyway`` publishes it through the one commit path, unless the table moved on since the
attempt began: a commit of the same parts journaled after it began, or parts that the catalog no
longer serves as the audit found them. Publishing it then would undo a newer version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_staged.staging.attempts import (
    PUBLISHED_ANYWAY,
    QUARANTINED,
    commit_written,
    is_quarantined,
)
from airflow_provider_staged.staging.errors import CommitConflictError, StagingError
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds import from_record

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings


def quarantined_attempt(settings: StagedSettings, attempt_id: str) -> AttemptRecord:
    """The attempt's record; StagingError when it is not quarantined (saying what it is)."""
    record = settings.journal.require(attempt_id)
    if not is_quarantined(record):
        verdict = (record.audits or {}).get("verdict", "no audit verdict")
        raise StagingError(
            f"attempt {attempt_id} of {record.target} is not quarantined: it is {record.state.value} "
            f"({verdict})"
        )
    return record


def _overlaps(a: AttemptRecord, b: AttemptRecord) -> bool:
    """Whether two attempts can replace the same data (a whole table overlaps everything)."""
    first, second = a.partition_spec, b.partition_spec
    return all(first[key] == second[key] for key in set(first) & set(second))


def newer_commits(settings: StagedSettings, record: AttemptRecord) -> list[AttemptRecord]:
    """Commits of ``record``'s target journaled after it began that touch the same data."""
    return [
        other for other in settings.journal.records()
        if other.target == record.target and other.attempt_id != record.attempt_id
        and other.state is AttemptState.COMMITTED and other.updated_at > record.created_at
        and _overlaps(record, other)
    ]


def publish_anyway(settings: StagedSettings, attempt_id: str) -> AttemptRecord:
    """Publish a quarantined attempt through the commit path; its record says it was published
    despite its audits. Refused (CommitConflictError) when the table moved on since it began."""
    record = quarantined_attempt(settings, attempt_id)
    newer = newer_commits(settings, record)
    if newer:
        raise CommitConflictError(
            f"{record.target} moved on since attempt {attempt_id} began: attempt {newer[-1].attempt_id} "
            "committed after it; publishing it would undo that version"
        )
    staged = from_record(record, settings)
    audits = record.audits or {}
    if staged.replaced_parts() != audits.get("replaced", {}):
        raise CommitConflictError(
            f"{record.target} changed since attempt {attempt_id} was audited: publishing it would "
            "undo a newer version"
        )
    with settings.journal.locked(attempt_id):
        current = settings.journal.require(attempt_id)
        if (current.audits or {}).get("verdict") == QUARANTINED:
            settings.journal.transition(attempt_id, AttemptState.WRITTEN,
                                        audits={**audits, "verdict": PUBLISHED_ANYWAY,
                                                "published_at": settings.journal.now()})
    commit_written(staged)
    return settings.journal.require(attempt_id)
