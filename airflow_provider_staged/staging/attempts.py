"""The one commit path of every staged kind: begin → written(manifest) → commit → housekeep.

A kind (``staging.kinds``) supplies only its catalog operations — how to read the target's
current state under the kind's exclusive access, how to create it, how to switch it to the
attempt's data, how to tell whether the catalog already points at the attempt, and how to
delete the attempt's data. This class journals each step (BEGUN, WRITTEN, COMMITTED, ABORTED),
makes the create-or-replace decision once for all kinds (the pyiceberg pattern: load current →
shared checks → kind-specific switch), and makes ``commit`` and ``abort`` idempotent and
mutually exclusive. Recovery never deletes what the catalog points at: every discard is
preceded by the exact ``is_published`` check, and a catalog call whose reply was lost is
resolved by that same check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_staged.staging import groups
from airflow_provider_staged.staging.api import StagedTable, StagingJobStatusHook, StagingPurpose
from airflow_provider_staged.staging.audits import (
    JUDGED_AT_COMMIT,
    AuditFailedError,
    AuditResult,
    AuditSuite,
    change_results,
    failure_message,
    schema_results,
)
from airflow_provider_staged.staging.conflicts import retry_on_conflict
from airflow_provider_staged.staging.errors import (
    CommitConflictError,
    StagingError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from airflow_provider_staged.staging.faults import pause_point
from airflow_provider_staged.staging.journal import (
    AttemptJournal,
    AttemptRecord,
    AttemptState,
    TaskRef,
)
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.owner import ProcessRef
from airflow_provider_staged.staging.periodic import Periodic
from airflow_provider_staged.staging.versions import new_attempt_id

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)


class TaskKilledError(RuntimeError):
    """The build was killed (SIGTERM, timeout, mark-failed) while its job ran."""


# Audit verdicts (``AttemptRecord.audits["verdict"]``): only these may be committed.
PASSED, QUARANTINED, PUBLISHED_ANYWAY = "passed", "quarantined", "published_anyway"


def is_quarantined(record: AttemptRecord) -> bool:
    """Written, failed its audits and not (yet) published: kept for inspection, never committed
    nor aborted by the task's lifecycle; reconcile discards it after the quarantine period."""
    verdict = (record.audits or {}).get("verdict")
    return record.state is AttemptState.WRITTEN and verdict in (QUARANTINED, PUBLISHED_ANYWAY)


def unaudited(record: AttemptRecord) -> bool:
    """Declared audits whose verdict was never recorded (the task died during the audit)."""
    return bool(record.audits) and "verdict" not in (record.audits or {})


class JournaledStagedTable(StagedTable):
    """A ``StagedTable`` whose every transition is recorded in an ``AttemptJournal``."""

    kind: ClassVar[str]
    # The audits of the build (``staging.audits``); its builder sets them after construction.
    audits: AuditSuite = AuditSuite()

    def __init__(
        self,
        target: str,
        purpose: StagingPurpose,
        journal: AttemptJournal,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
        conn_id: str | None = None,
    ) -> None:
        self.target = target
        self.purpose = purpose
        self.journal = journal
        self.task = task
        self.conn_id = conn_id
        self.attempt_id = attempt_id or new_attempt_id(task)
        # True when CREATE_TABLE_AS_IF_NOT_EXISTS found (or lost the race to) an existing table.
        self.skipped = False
        # The commit group (``staging.groups``) this attempt belongs to; set before ``begin``.
        self.group: str | None = None

    # -- what a kind implements -------------------------------------------------------

    @classmethod
    @abstractmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> JournaledStagedTable:
        """Rebuild a journaled attempt exactly (abort, reconcile, the TTL sweep)."""

    @abstractmethod
    def target_exists(self) -> bool:
        """Whether the target exists now (raises for a missing database/schema)."""

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
        """Everything ``from_record`` needs besides the record's common fields (no secrets)."""

    @abstractmethod
    def catalog_transaction(self, exclusive: bool = True) -> contextlib.AbstractContextManager[Any]:
        """Access to the target's catalog for one operation; ``exclusive`` for a read-modify-write
        (a lock, a transaction). A create needs none where the catalog's create is itself atomic."""

    @abstractmethod
    def load_current(self, txn: Any) -> Any | None:
        """The target's current catalog state, or None when it does not exist."""

    @abstractmethod
    def create_target(self, txn: Any, record: AttemptRecord, manifest: Manifest) -> None:
        """Create the target from the attempt in one catalog operation (raise TableAlreadyExistsError)."""

    @abstractmethod
    def swap(
        self, txn: Any, current: Any, record: AttemptRecord, manifest: Manifest
    ) -> str | list[str] | None:
        """Switch the existing target to the attempt in one catalog operation; return what it superseded."""

    @abstractmethod
    def is_published(self, record: AttemptRecord) -> bool:
        """Whether the catalog points at this attempt's data now (exact; reads the catalog)."""

    @abstractmethod
    def discard(self, record: AttemptRecord) -> None:
        """Delete this attempt's staged data; must succeed when there is nothing to delete.

        Only called after ``is_published`` said False under the attempt's lock.
        """

    def missing_files(self, record: AttemptRecord) -> list[str]:
        """Of the attempt's staged files, those that are gone (none, for a kind that cannot tell);
        asked before the commit's catalog call, which must never point the target at nothing."""
        return []

    def complete_publish(self, record: AttemptRecord) -> None:
        """Finish a published attempt's catalog work that a crash may have cut short."""

    def recovered_superseded(self, record: AttemptRecord) -> str | list[str] | None:
        """What a commit that was not journaled superseded, as far as the kind can tell."""
        return None

    def after_commit(self, record: AttemptRecord) -> None:
        """Housekeeping after a commit (retention); errors are logged, never raised."""

    def supports_audits(self) -> bool:
        """Whether this kind's write runs audits (``run_staged_write``'s Parquet writer)."""
        return False

    def replaced_parts(self) -> dict[str, str]:
        """What a commit would replace now, part -> location ("" for a whole table, a partition
        path for a partition refresh; empty when nothing): the audit's change baseline, and what
        ``staged publish`` checks is still in place. Reads the catalog."""
        return {}

    def written_parts(self, manifest: Manifest) -> dict[str, int]:
        """The rows this attempt wrote per part (parts as in ``replaced_parts``)."""
        return {"": manifest.rows or 0}

    def recorded_rows(self, location: str) -> int | None:
        """The rows the journal recorded for the data at ``location`` (None: not recorded)."""
        return None

    def current_columns(self) -> list[tuple[str, str]] | None:
        """``(column, type)`` of what readers read now, None when there is nothing (or this kind
        cannot tell): the schema audit's baseline. Reads the catalog."""
        return None

    def written_columns(self, manifest: Manifest) -> list[tuple[str, str]]:
        """``(column, type)`` of the version this attempt wrote, in the catalog's type names."""
        return list(manifest.columns)

    def release_locks(self) -> list[int]:
        """Release the catalog locks this attempt took and left (its process died holding them);
        called under the attempt's journal lock, which every section holding one holds too.
        Returns their ids."""
        return []

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
            raise TableNotFoundError(
                f"table {self.target} does not exist: purpose 'replace' needs an existing table "
                "(use 'create_or_replace')"
            )

    def begin(self) -> None:
        self.check_target()
        if self.skipped:
            return
        if self.audits and not self.supports_audits():
            raise StagingError(f"audits are not supported on {self.kind} targets ({self.target}) yet")
        record = AttemptRecord(
            attempt_id=self.attempt_id,
            kind=self.kind,
            target=self.target,
            purpose=self.purpose.value,
            location=self.staging_location(),
            catalog=self.catalog_ref(),
            conn_id=self.conn_id,
            task=self.task,
            owner=None if self.task is not None else ProcessRef.current(),
            audits={"declared": self.audits.to_list()} if self.audits else None,
            group=self.group,
        )
        existing = self.journal.get(self.attempt_id)
        if existing is not None and existing.state is not AttemptState.BEGUN:
            raise CommitConflictError(
                f"attempt {self.attempt_id} of {self.target} is already {existing.state.value}"
            )
        if existing is None:
            self.journal.create(record)
        spec = record.partitions_text
        log.info("began staged %s%s of %s: version %s at %s", record.operation, f" ({spec})" if spec else "",
                 self.target, self.attempt_id, record.location)

    @property
    def location(self) -> str:
        return self.journal.require(self.attempt_id).location

    def written(self, manifest: Manifest | dict[str, Any]) -> None:
        """Record the committable (what the job wrote); the attempt becomes WRITTEN."""
        if self.skipped:
            return
        data = Manifest.from_dict(manifest).to_dict()
        with self.journal.locked(self.attempt_id):
            self.journal.transition(self.attempt_id, AttemptState.WRITTEN, manifest=data)

    def write_spec_audited(self) -> dict[str, Any]:
        """``write_spec`` with the audits the job runs (row and table expectations)."""
        spec = self.write_spec()
        if self.audits:
            spec["audits"] = self.audits.to_list()
        return spec

    def audit(self) -> list[AuditResult]:
        """Judge the written attempt before its commit: the job's row and table results, and the
        row-count change against what the catalog serves now (as the journal recorded it).
        Journals the results and the verdict; a blocking failure quarantines the attempt (the
        table unchanged, the staged data kept) and raises :class:`AuditFailedError`."""
        if self.skipped or not self.audits:
            return []
        suite = self.audits
        record = self.journal.require(self.attempt_id)
        manifest = Manifest.from_dict(record.manifest or {})
        reported = {item["name"] for item in manifest.audits}
        missing = [e.name for e in suite.expectations
                   if e.kind not in JUDGED_AT_COMMIT and e.name not in reported]
        if missing:
            # A job that ran none of them (an older package on the cluster) must not publish unaudited.
            raise StagingError(
                f"the Spark job reported no result for audit(s) {missing} of {self.target}: not published"
            )
        results = [AuditResult.from_dict(item) for item in manifest.audits]
        changes = suite.of_kind("change")
        # The catalog is read for a change audit, or for `staged publish` of a quarantined version
        # to tell whether the table moved on; a build whose job audits passed skips the read.
        replaced = self.replaced_parts() if changes or any(r.blocks for r in results) else {}
        previous = {part: self.recorded_rows(location) for part, location in replaced.items()}
        results += change_results(changes, self.written_parts(manifest), previous)
        if schemas := suite.of_kind("schema"):
            results += schema_results(schemas, self.current_columns(), self.written_columns(manifest))
        for result in results:
            log.info("%s", result.line())
        pause_point("audit")  # tests: the task is killed during its audit
        verdict = QUARANTINED if any(result.blocks for result in results) else PASSED
        audits = {**(record.audits or {}), "results": [result.to_dict() for result in results],
                  "verdict": verdict, "audited_at": self.journal.now(), "replaced": replaced}
        with self.journal.locked(self.attempt_id):
            self.journal.transition(self.attempt_id, AttemptState.WRITTEN, audits=audits)
        if verdict == QUARANTINED:
            raise AuditFailedError(failure_message(self.target, self.attempt_id, results))
        return results

    def publish(self, record: AttemptRecord) -> str | list[str] | None:
        """The catalog operation of a commit: load current → the shared checks → create or swap."""
        manifest = Manifest.from_dict(record.manifest or {})
        # A create-only purpose skips the read: create_target refuses an existing target itself.
        with self.catalog_transaction(exclusive=self.purpose.replaces) as txn:
            current = self.load_current(txn) if self.purpose.replaces else None
            if current is None:
                if not self.purpose.creates:
                    raise TableNotFoundError(f"table {self.target} was dropped before the commit")
                self.create_target(txn, record, manifest)
                return None
            if not self.purpose.replaces:
                raise TableAlreadyExistsError(
                    f"table {self.target} was created by someone else before this commit"
                )
            return self.swap(txn, current, record, manifest)

    def commit(self) -> None:
        if self.skipped:
            return
        with self.journal.locked(self.attempt_id):
            record = self.journal.require(self.attempt_id)
            if record.state is AttemptState.COMMITTED:
                return
            if record.state in (AttemptState.ABORTING, AttemptState.ABORTED):
                raise CommitConflictError(
                    f"attempt {self.attempt_id} of {self.target} was aborted: cannot commit"
                )
            if record.state is not AttemptState.WRITTEN:
                raise StagingError(
                    f"attempt {self.attempt_id} of {self.target} has written nothing: cannot commit"
                )
            verdict = (record.audits or {}).get("verdict", PASSED if not record.audits else None)
            if verdict not in (PASSED, PUBLISHED_ANYWAY):
                raise StagingError(
                    f"attempt {self.attempt_id} of {self.target} "
                    f"{'failed its audits' if verdict else 'has audits that were not recorded'}: "
                    "cannot commit"
                )
            missing = self.missing_files(record)
            if missing:
                reason = f"{len(missing)} staged file(s) gone before the commit, e.g. {missing[0]}"
                if self._discard_unpublished(record, reason):
                    raise StagingError(
                        f"commit of {self.target} refused: attempt {self.attempt_id} has {reason}; "
                        f"aborted, {self.target} is unchanged"
                    )
                return  # the catalog already pointed at it: journaled as committed
            pause_point("publish")  # tests: the host dies or loses its network here
            try:
                # A compare-and-set refused (another writer came between read and write)
                # changed nothing: publish again from a fresh read.
                superseded = retry_on_conflict(lambda: self.publish(record), f"commit of {self.target}")
            except TableAlreadyExistsError:
                self._discard_unpublished(record, "target created concurrently")
                if self.purpose is StagingPurpose.CREATE_TABLE_AS_IF_NOT_EXISTS:
                    log.info("%s was created concurrently: this attempt aborted", self.target)
                    self.skipped = True
                    return
                raise
            except StagingError:
                raise  # a decision of the checks or a refused lock: the catalog is unchanged
            except Exception as error:
                superseded = self._resolve_lost_reply(record, error)
            record = self.journal.transition(
                self.attempt_id, AttemptState.COMMITTED, superseded_location=superseded
            )
        # "version" as `staged show` and `staged versions` say it: the attempt that wrote the data.
        log.info("committed version %s of %s: %s", self.attempt_id, self.target, record.location)

    def _resolve_lost_reply(self, record: AttemptRecord, error: Exception) -> str | list[str] | None:
        """A catalog call that failed without a verdict may have landed: ask the catalog."""
        try:
            published = self.is_published(record)
        except Exception as check_error:
            raise StagingError(
                f"commit of {self.target} failed ({error!r}) and the catalog cannot be read to tell "
                f"whether it landed ({check_error!r}): {self.target} is either its previous or its new "
                f"version, never partial; `staged reconcile` settles attempt {self.attempt_id}"
            ) from error
        if not published:
            raise StagingError(
                f"commit of {self.target} failed ({error!r}); it did not land: "
                f"{self.target} is still its previous version"
            ) from error
        log.warning("commit of %s landed although its reply was lost (%r)", self.target, error)
        self.complete_publish(record)
        return self.recovered_superseded(record)

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
                self._journal_published(record)
        self.housekeep()

    def _journal_published(self, record: AttemptRecord) -> None:
        self.complete_publish(record)
        self.journal.transition(
            self.attempt_id, AttemptState.COMMITTED, superseded_location=self.recovered_superseded(record)
        )

    def _discard_unpublished(self, record: AttemptRecord, reason: str | None) -> bool:
        """Discard and journal ABORTED, unless the catalog points at the data (then COMMITTED).

        The caller holds the attempt's lock. Returns whether the attempt was aborted.
        """
        if record.state is not AttemptState.ABORTING and self.is_published(record):
            # The catalog already points at this data: deleting it would break the table.
            log.warning("%s of %s is published: journaled as committed, not aborted", self.attempt_id,
                        self.target)
            self._journal_published(record)
            return False
        if record.state is not AttemptState.ABORTING:
            self.journal.transition(self.attempt_id, AttemptState.ABORTING, error=reason)
        self.discard(record)
        self.journal.transition(self.attempt_id, AttemptState.ABORTED)
        return True


def abort_attempt(
    staged: JournaledStagedTable, reason: str | None = None, discard_quarantined: bool = False
) -> bool:
    """Discard and journal ABORTED unless the attempt already ended, or is quarantined and
    ``discard_quarantined`` is not given (its failed task's callbacks leave it for inspection);
    return whether it aborted.

    A member of a commit group aborts its group first (CommitConflictError once it was decided).
    """
    record = staged.journal.get(staged.attempt_id)
    group = record.group if record is not None else staged.group
    if group is None:
        return _abort_alone(staged, reason, discard_quarantined)
    with staged.journal.locked(group):  # the group's lock before the member's, as the decision
        groups.abort_undecided(staged.journal, group, reason)
        return _abort_alone(staged, reason, discard_quarantined)


def _abort_alone(staged: JournaledStagedTable, reason: str | None, discard_quarantined: bool) -> bool:
    with staged.journal.locked(staged.attempt_id):
        record = staged.journal.get(staged.attempt_id)
        if record is None or record.state is AttemptState.COMMITTED:
            return False
        if is_quarantined(record) and not discard_quarantined:
            log.info("%s of %s is quarantined: kept for inspection (%s)", staged.attempt_id, staged.target,
                     reason or "no reason")
            return False
        if record.state is AttemptState.ABORTED:
            # Aborted while the job still ran (on_kill): delete what stragglers wrote since.
            if not staged.is_published(record):
                staged.discard(record)
            return False
        aborted = staged._discard_unpublished(record, reason)
    if aborted:
        log.info("aborted %s of %s (%s)", staged.attempt_id, staged.target, reason or "no reason")
    return aborted


def commit_written(staged: JournaledStagedTable, manifest: Manifest | dict[str, Any] | None = None) -> None:
    """Record ``manifest`` (when the attempt has not), commit and housekeep: the commit step of
    the operator, the callbacks form, the refresh and reconcile alike."""
    if manifest is not None:
        record = staged.journal.require(staged.attempt_id)
        if record.state is AttemptState.BEGUN:
            staged.written(manifest)
    staged.commit()
    staged.housekeep()


def attempt_heartbeat(staged: JournaledStagedTable, ttl_seconds: float) -> Periodic:
    """Refresh the attempt's heartbeat while the job runs, so only dead attempts expire."""
    return journal_heartbeat(staged.journal, staged.attempt_id, ttl_seconds)


def journal_heartbeat(journal: AttemptJournal, attempt_id: str, ttl_seconds: float) -> Periodic:
    """Refresh a record's heartbeat (an attempt's, a group's) while its process works on it."""
    return Periodic(
        max(1.0, min(30.0, ttl_seconds / 4)),
        lambda: journal.heartbeat(attempt_id),
        "staged-heartbeat",
    )


def run_attempt(
    staged: JournaledStagedTable,
    write: Callable[[dict[str, Any]], Manifest | dict[str, Any]],
    ttl_seconds: float,
    killed: threading.Event | None = None,
) -> Manifest | None:
    """The whole path: begin, ``write(spec)`` (the Spark job), written, commit, housekeep.

    Any failure (or a kill) aborts the attempt and re-raises. Returns the committed manifest,
    or None when a create_if_not_exists found the table.
    """
    killed = killed or threading.Event()
    status = StagingJobStatusHook(staged)
    job_id = staged.attempt_id
    status.on_created(job_id)
    if staged.skipped:
        log.info("%s exists and purpose is create_if_not_exists: nothing to do", staged.target)
        return None
    log.info("staged attempt %s writes into %s", job_id, staged.location)

    def check_killed() -> None:
        if killed.is_set():
            raise TaskKilledError(f"task was killed while building {staged.target}")

    try:
        with attempt_heartbeat(staged, ttl_seconds):
            manifest = Manifest.from_dict(write(staged.write_spec_audited()))
            check_killed()
            staged.written(manifest)
            check_killed()
            staged.audit()
            check_killed()
            status.on_finished(job_id)
    except BaseException as error:
        try:
            if killed.is_set():
                status.on_canceled(job_id)
            else:
                status.on_failed(job_id, error)
        except Exception:
            # Keep the original error; the callbacks, reconcile or the TTL sweep retry the abort.
            log.exception("abort of %s failed; left to the sweep", job_id)
        raise
    staged.housekeep()
    return None if staged.skipped else manifest


def run_group(
    members: list[JournaledStagedTable],
    write: Callable[[JournaledStagedTable, dict[str, Any]], Manifest | dict[str, Any]],
    ttl_seconds: float,
) -> tuple[list[Manifest], float]:
    """All of ``members`` published or none (``staging.groups``): journal the group, begin and
    ``write(member, spec)`` each member in turn, decide, then commit every member.

    Any failure before the decision aborts the group and every member, and re-raises. Returns the
    members' manifests and the seconds from the first member's commit to the end of the last
    one's: the longest a reader can see some targets new and others old.
    """
    journal = members[0].journal
    group = groups.begin_group(journal, [(m.attempt_id, m.target) for m in members], members[0].conn_id)
    manifests = []
    try:
        with journal_heartbeat(journal, group, ttl_seconds):
            for staged in members:
                staged.group = group
                staged.begin()
                with attempt_heartbeat(staged, ttl_seconds):
                    manifest = Manifest.from_dict(write(staged, staged.write_spec()))
                    staged.written(manifest)
                manifests.append(manifest)
            pause_point("group_decision")  # tests: the process dies before the decision
            groups.decide(journal, group)
    except BaseException as error:
        _abort_group(members, group, f"statement set failed: {error!r}"[:500])
        raise
    started = time.monotonic()
    failed = []
    for index, staged in enumerate(members):
        if index == 1:
            pause_point("group_commit")  # tests: the process dies between member commits
        try:
            staged.commit()
        except Exception as error:  # decided: the other members still commit
            log.exception("commit of %s (group %s) failed", staged.target, group)
            failed.append(f"{staged.target}: {error}")
    window = time.monotonic() - started
    for staged in members:  # retention after every commit: it would widen the window
        staged.housekeep()
    if failed:
        raise StagingError(f"statement set {group} was decided but {len(failed)} commit(s) failed "
                           f"({'; '.join(failed)}): `staged reconcile` commits them")
    log.info("statement set %s committed %d tables within %.3f s", group, len(members), window)
    return manifests, window


def _abort_group(members: list[JournaledStagedTable], group: str, reason: str) -> None:
    """Abort the undecided group and every member it began (errors are logged: reconcile retries)."""
    journal = members[0].journal
    try:
        with journal.locked(group):
            groups.abort_undecided(journal, group, reason)
    except Exception:
        log.exception("abort of statement set %s failed; left to reconcile", group)
        return  # decided after all (a lost reply): reconcile rolls it forward
    for staged in members:
        try:
            abort_attempt(staged, reason)
        except Exception:
            log.exception("abort of %s (group %s) failed; left to reconcile", staged.target, group)
