"""One maintenance pass over a staged catalog (pure): reconcile, partition expiry, version sweeps.

Each step uses the guards the commit path uses, so a pass may run while refreshes and commits
run: reconcile settles only attempts whose task ended or whose heartbeat stopped, expiry drops
partitions as a journaled attempt under the table's metastore lock, and the version sweep never
deletes what the catalog points at or what an open attempt writes (it lists the version
directories first, then reads the journal, then the catalog).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.expiry import (
    SweepReport,
    delete_dropped_files,
    sweep_expiry,
    untracked_ttl_message,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds import from_record
from airflow_provider_staged.staging.kinds.hive_table import (
    EXPIRE_KIND,
    HIVE_KINDS,
    HiveStagedTable,
    list_versions,
    sweep_listed,
)
from airflow_provider_staged.staging.pruning import prune_journal
from airflow_provider_staged.staging.reconcile import ReconcileAction, TaskStateLookup, reconcile
from airflow_provider_staged.staging.storage_paths import JOBS_DIR
from airflow_provider_staged.storage.files import delete_dir, join, list_dir, normalize_location

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

# The PostgreSQL table kind (``kinds.jdbc_table``, which needs psycopg: imported only by the registry).
JDBC_KIND = "jdbc_table"


@dataclass
class VersionSweep:
    """Directories the version sweep deleted, per table; the journal records pruned after it."""

    deleted: dict[str, list[str]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    pruned: list[str] = field(default_factory=list)
    job_dirs: list[str] = field(default_factory=list)


def sweep_all_versions(settings: StagedSettings, now: float | None = None) -> VersionSweep:
    """Retention of every Hive table the journal knows, plus the files of expired partitions and
    the PostgreSQL tables that replaces renamed away; then the pruning of the journal's ended
    sink records (``staging.pruning``).

    Every table root is listed before the journal is read (once): an attempt journals BEGUN
    before it creates its directory, so no listed directory of a running attempt is missed.
    """
    now = settings.journal.now() if now is None else now
    roots: dict[str, str] = {}
    for record in sorted(settings.journal.records(), key=lambda r: r.updated_at):
        if record.kind in HIVE_KINDS:  # the newest attempt's root is the table's
            roots[record.target] = normalize_location(record.location).rpartition("/")[0]
    listed = {target: list_versions(root) for target, root in roots.items()}
    records = settings.journal.records()
    expired_targets = {
        r.target for r in records if r.kind == EXPIRE_KIND and r.state is AttemptState.COMMITTED
    }
    report = VersionSweep()
    for target in sorted(set(listed) | expired_targets):
        staged = HiveStagedTable(
            TableIdentifier.parse(target), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, settings.journal,
            settings.metastore_uri, settings.retention,
        )
        try:
            deleted, _ = sweep_listed(staged, settings.retention, listed.get(target, []), records, now)
            deleted += delete_dropped_files(staged, records, now)
        except Exception as error:  # one table's failure never stops the others
            log.exception("version sweep of %s failed", target)
            report.failures[target] = str(error)
            continue
        if deleted:
            report.deleted[target] = deleted
    _drop_superseded_tables(settings, records, report)
    try:
        report.job_dirs = sweep_job_dirs(settings, records)
    except Exception as error:
        log.exception("sweeping the submitted jobs' directories failed")
        report.failures[JOBS_DIR] = str(error)
    try:  # after the sweep: the records of the directories it deleted are no longer needed
        report.pruned = prune_journal(settings, now=now, records=records)
    except Exception as error:
        log.exception("pruning the journal failed")
        report.failures["journal"] = str(error)
    return report


def sweep_job_dirs(settings: StagedSettings, records: list[AttemptRecord]) -> list[str]:
    """The spec-and-manifest directories of submitted jobs whose attempt ended: the engine deletes
    its own when the job returns, so these are what a killed worker left."""
    ended = {record.attempt_id for record in records if record.state.ended}
    deleted = []
    for entry in list_dir(join(settings.warehouse, JOBS_DIR)):
        if entry.name in ended:
            delete_dir(entry.location)
            deleted.append(entry.location)
    return deleted


def _drop_superseded_tables(
    settings: StagedSettings, records: list[AttemptRecord], report: VersionSweep
) -> None:
    """The PostgreSQL tables that replaces renamed away and whose commits' housekeeping failed
    (a lock held by a reader, the server gone right after the commit): each table's newest commit
    drops every one the journal names, as its own housekeeping would have."""
    newest: dict[str, AttemptRecord] = {}
    commits = [r for r in records if r.kind == JDBC_KIND and r.state is AttemptState.COMMITTED]
    for record in sorted(commits, key=lambda r: r.updated_at):
        newest[record.target] = record
    for target, record in sorted(newest.items()):
        try:
            from_record(record, settings).after_commit(record)
        except Exception as error:  # one table's failure never stops the others
            log.exception("dropping the superseded tables of %s failed", target)
            report.failures[target] = str(error)


@dataclass
class MaintenanceReport:
    reconciled: list[ReconcileAction]
    expiry: SweepReport
    versions: VersionSweep

    def lines(self) -> list[str]:
        """What the pass did, one line each (the maintenance DAG's log)."""
        out = [f"reconcile {a.attempt_id} ({a.target}): {a.action}" for a in self.reconciled]
        for plan in self.expiry.plans:
            out.append(
                f"expiry {plan.target}: dropped {len(plan.expired)} partition(s) {sorted(plan.expired)}"
            )
            if plan.unparseable:
                out.append(f"expiry {plan.target}: no time in partition value(s) {plan.unparseable[:5]}")
        out.append(
            f"expiry: {self.expiry.tables_with_ttl} table(s) with a TTL, {self.expiry.skipped} not due, "
            f"{self.expiry.calls} metastore call(s) to find them"
        )
        out += [f"expiry {t}: FAILED {e}" for t, e in self.expiry.failures.items()]
        out += [f"expiry {t}: NOT EXPIRED: {untracked_ttl_message(t)}" for t in self.expiry.untracked]
        out += [f"retention {t}: deleted {d}" for t, d in self.versions.deleted.items()]
        out += [f"retention {t}: FAILED {e}" for t, e in self.versions.failures.items()]
        if self.versions.job_dirs:
            out.append(f"jobs: deleted {len(self.versions.job_dirs)} directory(ies) of ended attempts")
        if self.versions.pruned:
            out.append(f"journal: pruned {len(self.versions.pruned)} ended sink record(s)")
        return out

    @property
    def failed(self) -> bool:
        return bool(
            self.expiry.failures or self.versions.failures
            or any(a.action.startswith("failed") for a in self.reconciled)
        )


def run_maintenance(
    settings: StagedSettings,
    task_state: TaskStateLookup | None = None,
    now: float | None = None,
    conn_id: str | None = None,
) -> MaintenanceReport:
    """Reconcile, then expire partitions, then sweep versions (each step logs what it did)."""
    now = settings.journal.now() if now is None else now
    report = MaintenanceReport(
        reconcile(settings, task_state, now),
        sweep_expiry(settings, now, conn_id=conn_id),
        sweep_all_versions(settings, now),
    )
    for line in report.lines():
        log.info("%s", line)
    return report
