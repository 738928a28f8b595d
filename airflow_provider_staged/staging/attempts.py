"""The journaled two-phase protocol shared by every staged table kind (Hive, JDBC).

A subclass says how to check the target, where to stage, how to publish in one catalog
operation and how to discard; this class journals each step (BEGUN, WRITTEN, COMMITTED,
ABORTED) and makes ``commit`` and ``abort`` idempotent and mutually exclusive.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from typing import Any, ClassVar

from airflow_provider_staged.staging.api import StagedTable, StagingPurpose
from airflow_provider_staged.staging.errors import (
    CommitConflictError,
    StagingError,
    TableAlreadyExistsError,
)
from airflow_provider_staged.staging.journal import (
    AttemptJournal,
    AttemptRecord,
    AttemptState,
    TaskRef,
)
from airflow_provider_staged.staging.versions import new_attempt_id

log = logging.getLogger(__name__)


class JournaledStagedTable(StagedTable):
    """A ``StagedTable`` whose every transition is recorded in an ``AttemptJournal``."""

    kind: ClassVar[str]

    def __init__(
        self,
        target: str,
        purpose: StagingPurpose,
        journal: AttemptJournal,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
    ) -> None:
        self.target = target
        self.purpose = purpose
        self.journal = journal
        self.task = task
        self.attempt_id = attempt_id or new_attempt_id(task)
        # True when CREATE_TABLE_AS_IF_NOT_EXISTS found (or lost the race to) an existing table.
        self.skipped = False

    # -- what a kind implements -------------------------------------------------------

    @abstractmethod
    def target_exists(self) -> bool:
        """Whether the target table exists now (raises for a missing database/schema)."""

    @abstractmethod
    def staging_location(self) -> str:
        """Where this attempt's data goes (a directory, a staged table name)."""

    @abstractmethod
    def write_spec(self) -> dict[str, Any]:
        """What the Spark job writes into (``engine.spark_job`` spec, after ``begin``); no secrets."""

    def job_env(self) -> dict[str, str]:
        """Secrets the Spark job needs, passed as environment variables (never logged)."""
        return {}

    @abstractmethod
    def catalog_ref(self) -> dict[str, Any]:
        """What reconcile needs to reach the catalog again (never secrets)."""

    @abstractmethod
    def publish(self, record: AttemptRecord) -> str | None:
        """Make the staged data the target in ONE catalog operation.

        Returns what was superseded (old location), raises ``TableAlreadyExistsError`` when a
        create lost a race.
        """

    @abstractmethod
    def is_published(self, record: AttemptRecord) -> bool:
        """Whether the target already is this attempt's data (a commit that was not journaled)."""

    @abstractmethod
    def discard(self, record: AttemptRecord) -> None:
        """Delete this attempt's staged data; must succeed when there is nothing to delete."""

    def after_commit(self, record: AttemptRecord) -> None:
        """Housekeeping after a commit (retention); errors are logged, never raised."""

    # -- the protocol -------------------------------------------------------------------

    def check_target(self) -> None:
        """Fail before any Spark work when the purpose cannot apply; mark IF_NOT_EXISTS skips."""
        exists = self.target_exists()
        if exists and self.purpose is StagingPurpose.CREATE_TABLE_AS:
            raise TableAlreadyExistsError(
                f"table {self.target} already exists: purpose 'create' needs a new table "
                "(use 'create_or_replace', 'replace' or 'create_if_not_exists')"
            )
        if exists and self.purpose is StagingPurpose.CREATE_TABLE_AS_IF_NOT_EXISTS:
            log.info("table %s exists: create_if_not_exists leaves it untouched", self.target)
            self.skipped = True
        if not exists and not self.purpose.creates:
            from airflow_provider_staged.staging.errors import TableNotFoundError

            raise TableNotFoundError(
                f"table {self.target} does not exist: purpose 'replace' needs an existing table "
                "(use 'create_or_replace')"
            )

    def begin(self) -> None:
        self.check_target()
        if self.skipped:
            return
        record = AttemptRecord(
            attempt_id=self.attempt_id,
            kind=self.kind,
            target=self.target,
            purpose=self.purpose.value,
            location=self.staging_location(),
            catalog=self.catalog_ref(),
            task=self.task,
        )
        existing = self.journal.get(self.attempt_id)
        if existing is not None and existing.state is not AttemptState.BEGUN:
            raise CommitConflictError(
                f"attempt {self.attempt_id} of {self.target} is already {existing.state.value}"
            )
        if existing is None:
            self.journal.create(record)
        log.info("began staged %s of %s at %s", self.purpose.value, self.target, record.location)

    @property
    def location(self) -> str:
        return self.journal.require(self.attempt_id).location

    def written(self, manifest: dict[str, Any]) -> None:
        """Record the committable (what the job wrote); the attempt becomes WRITTEN."""
        if self.skipped:
            return
        with self.journal.locked(self.attempt_id):
            self.journal.transition(self.attempt_id, AttemptState.WRITTEN, manifest=manifest)

    def commit(self) -> None:
        if self.skipped:
            return
        with self.journal.locked(self.attempt_id):
            record = self.journal.require(self.attempt_id)
            if record.state is AttemptState.COMMITTED:
                return
            if record.state is AttemptState.ABORTED:
                raise CommitConflictError(
                    f"attempt {self.attempt_id} of {self.target} was aborted: cannot commit"
                )
            if record.state is not AttemptState.WRITTEN:
                raise StagingError(
                    f"attempt {self.attempt_id} of {self.target} has written nothing: cannot commit"
                )
            try:
                superseded = self.publish(record)
            except TableAlreadyExistsError:
                self.discard(record)
                self.journal.transition(
                    self.attempt_id, AttemptState.ABORTED, error="target created concurrently"
                )
                if self.purpose is StagingPurpose.CREATE_TABLE_AS_IF_NOT_EXISTS:
                    log.info("%s was created concurrently: this attempt aborted", self.target)
                    self.skipped = True
                    return
                raise
            record = self.journal.transition(
                self.attempt_id, AttemptState.COMMITTED, superseded_location=superseded
            )
        log.info("committed %s: %s is now %s", self.attempt_id, self.target, record.location)

    def housekeep(self) -> None:
        """Retention after a commit, kept out of it (readers already see the new version).

        Errors are logged, never raised: the next commit's or the sweep's housekeeping retries.
        """
        record = None if self.skipped else self.journal.get(self.attempt_id)
        if record is None or record.state is not AttemptState.COMMITTED:
            return
        try:
            self.after_commit(record)
        except Exception:
            log.exception("housekeeping after committing %s failed (left for the sweep)", self.target)

    def abort(self, reason: str | None = None) -> None:
        if self.skipped:
            return
        abort_attempt(self, reason)

    def finish(self) -> None:
        """Journal a commit that happened in the catalog but was not journaled (reconcile)."""
        with self.journal.locked(self.attempt_id):
            record = self.journal.require(self.attempt_id)
            if not record.state.ended:
                self.journal.transition(self.attempt_id, AttemptState.COMMITTED)


def abort_attempt(staged: JournaledStagedTable, reason: str | None = None) -> bool:
    """Discard and journal ABORTED unless the attempt already ended; return whether it aborted."""
    with staged.journal.locked(staged.attempt_id):
        record = staged.journal.get(staged.attempt_id)
        if record is None or record.state is AttemptState.COMMITTED:
            return False
        if record.state is AttemptState.ABORTED:
            # Aborted while the job still ran (on_kill): delete what stragglers wrote since.
            staged.discard(record)
            return False
        if staged.is_published(record):
            # The catalog already points at this data: deleting it would break the table.
            staged.journal.transition(staged.attempt_id, AttemptState.COMMITTED)
            return False
        staged.discard(record)
        staged.journal.transition(staged.attempt_id, AttemptState.ABORTED, error=reason)
    log.info("aborted %s of %s (%s)", staged.attempt_id, staged.target, reason or "no reason")
    return True
