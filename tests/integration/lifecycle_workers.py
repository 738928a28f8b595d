"""A maintenance loop in its own process, for tests that run it beside refreshes and commits.

``python -m tests.integration.lifecycle_workers SETTINGS_JSON EXPIRY_NOW STOP_FILE``: reconcile,
expire partitions as of EXPIRY_NOW (the injected clock), sweep versions (real clock), again and
again until STOP_FILE exists; prints one line per pass and exits 1 on any failure.

``housekeep_killed_at`` (started with multiprocessing's spawn): a commit's housekeeping, the
version sweep with its retention mark, SIGKILLed at one point of it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.expiry import sweep_expiry
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds import hive_table
from airflow_provider_staged.staging.maintenance import sweep_all_versions
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import local_path


def settings_of(raw: dict) -> StagedSettings:
    """Settings from their JSON form (the retention policy as a dict)."""
    raw = dict(raw)
    retention = RetentionPolicy(**raw.pop("retention"))
    return StagedSettings(**raw, retention=retention)


# Where ``housekeep_killed_at`` dies: half-way through deleting the second doomed version; with
# every doomed version deleted, before the retention mark is written; right after it is written.
KILL_POINTS = ("mid_delete", "before_mark", "after_mark")


def housekeep_killed_at(raw: dict, target: str, attempt_id: str, now: float, point: str) -> None:
    """``after_commit`` of committed attempt ``attempt_id`` (the sweep with its retention mark)
    as of ``now`` (the injected clock), SIGKILLing this process at ``point``."""
    settings = settings_of(raw)
    deleted: list[str] = []
    real_delete, real_mark = hive_table.delete_dir, FileJournal.set_retention_mark

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def delete_dir(location: str) -> None:
        deleted.append(location)
        if point == "mid_delete" and len(deleted) == 2:
            files = sorted(path for path in local_path(location).rglob("*") if path.is_file())
            for path in files[: len(files) // 2]:  # what a recursive delete did before the kill
                path.unlink()
            die()
        real_delete(location)

    def set_retention_mark(journal: FileJournal, target: str, superseded_at: float) -> None:
        if point == "before_mark":
            die()
        real_mark(journal, target, superseded_at)
        if point == "after_mark":
            die()

    hive_table.delete_dir = delete_dir
    FileJournal.set_retention_mark = set_retention_mark  # type: ignore[method-assign]
    time.time = lambda: now
    staged = hive_table.HiveStagedTable(
        TableIdentifier.parse(target), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, settings.journal,
        settings.metastore_uri, settings.retention, attempt_id=attempt_id,
    )
    staged.after_commit(settings.journal.require(attempt_id))
    sys.exit(f"the housekeeping of {attempt_id} ended without reaching {point} (deleted {deleted})")


def main(argv: list[str]) -> int:
    settings = settings_of(json.loads(argv[0]))
    expiry_now, stop = float(argv[1]), Path(argv[2])
    passes = 0
    while not stop.exists():
        actions = reconcile(settings, None)
        expiry = sweep_expiry(settings, now=expiry_now)
        versions = sweep_all_versions(settings)
        failed = [a for a in actions if a.action.startswith("failed")] or expiry.failures or versions.failures
        dropped = sum(len(plan.expired) for plan in expiry.plans)
        deleted = sum(len(found) for found in versions.deleted.values())
        print(f"pass {passes}: dropped {dropped}, deleted {deleted}, failed {failed}", flush=True)
        if failed:
            return 1
        passes += 1
    return 0 if passes else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
