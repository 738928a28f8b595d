"""FLIP-305's staging interfaces in Python: ``StagedTable``, ``SupportsStaging``, ``JobStatusHook``.

Nothing here imports Airflow or Spark: the same objects are driven by an Airflow task,
by the CLI, or by a test.
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass

log = logging.getLogger(__name__)


class StagingPurpose(enum.Enum):
    """What a staged table is for; the value is the spelling users write (``purpose=``)."""

    CREATE_TABLE_AS = "create"
    CREATE_TABLE_AS_IF_NOT_EXISTS = "create_if_not_exists"
    REPLACE_TABLE_AS = "replace"
    CREATE_OR_REPLACE_TABLE_AS = "create_or_replace"

    @classmethod
    def parse(cls, value: object) -> StagingPurpose:
        """Accept a member, its value (``"create_or_replace"``) or its name; else raise naming it."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            text = value.strip()
            for member in cls:
                if text.lower() == member.value or text.upper() == member.name:
                    return member
        allowed = ", ".join(member.value for member in cls)
        raise ValueError(f"unknown staging purpose {value!r}: expected one of {allowed}")

    @property
    def creates(self) -> bool:
        """Whether the purpose may create a table that does not exist."""
        return self is not StagingPurpose.REPLACE_TABLE_AS

    @property
    def replaces(self) -> bool:
        """Whether the purpose may replace a table that exists."""
        return self in (StagingPurpose.REPLACE_TABLE_AS, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS)


@dataclass(frozen=True)
class StagingContext:
    """Tells a ``SupportsStaging`` sink what the staged table is for (FLIP-305)."""

    purpose: StagingPurpose


class StagedTable(ABC):
    """A two-phase table change: ``begin`` opens it, ``commit`` publishes it, ``abort`` drops it.

    Implementations make ``commit`` and ``abort`` idempotent, so that a retried task or a
    reconcile run can call them again safely.
    """

    @abstractmethod
    def begin(self) -> None:
        """Prepare the attempt (validate the target, allocate the staging location)."""

    @abstractmethod
    def commit(self) -> None:
        """Make the staged data the visible table in one catalog operation."""

    @abstractmethod
    def abort(self, reason: str | None = None) -> None:
        """Drop the staged data; the visible table stays exactly as it was (``reason`` is recorded)."""


class SupportsStaging(ABC):
    """A sink that can hand out ``StagedTable`` objects, i.e. supports atomic CTAS."""

    @abstractmethod
    def apply_staging(self, context: StagingContext) -> StagedTable:
        """Return the staged table for ``context.purpose``."""


class JobStatusHook:
    """Callbacks on a job's status changes (Flink's ``JobStatusHook``)."""

    def on_created(self, job_id: str) -> None:
        """The job was created and is about to run."""

    def on_finished(self, job_id: str) -> None:
        """The job finished successfully."""

    def on_failed(self, job_id: str, error: BaseException | None) -> None:
        """The job failed for good or for this attempt."""

    def on_canceled(self, job_id: str) -> None:
        """The job was cancelled or killed."""


class StagingJobStatusHook(JobStatusHook):
    """Maps job status to the staged table: created→begin, finished→commit, failed/canceled→abort."""

    def __init__(self, staged_table: StagedTable) -> None:
        self.staged_table = staged_table

    def on_created(self, job_id: str) -> None:
        self.staged_table.begin()

    def on_finished(self, job_id: str) -> None:
        self.staged_table.commit()

    def on_failed(self, job_id: str, error: BaseException | None) -> None:
        log.info("job %s failed (%s): aborting staged table", job_id, error)
        self.staged_table.abort(f"job failed: {error!r}"[:500])

    def on_canceled(self, job_id: str) -> None:
        log.info("job %s was cancelled: aborting staged table", job_id)
        self.staged_table.abort("task killed")
