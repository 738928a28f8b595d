"""One staged build: begin, run the Spark job, record the committable, commit; abort on failure.

Shared by the operator and the materialized-table refresh; no Airflow import.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from airflow_provider_staged.engine.runners import Engine
from airflow_provider_staged.staging.api import StagingJobStatusHook
from airflow_provider_staged.staging.attempts import JournaledStagedTable

log = logging.getLogger(__name__)


class TaskKilledError(RuntimeError):
    """The build was killed (SIGTERM, timeout, mark-failed) while its job ran."""


class Heartbeat:
    """Refresh the attempt's heartbeat while the job runs, so only dead attempts expire."""

    def __init__(self, staged: JournaledStagedTable, ttl_seconds: float) -> None:
        self.staged = staged
        self.interval = max(1.0, min(30.0, ttl_seconds / 4))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="staged-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            self.staged.journal.heartbeat(self.staged.attempt_id)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def execute_staged(
    staged: JournaledStagedTable,
    engine: Engine,
    sql: str,
    spec_extra: dict[str, Any],
    ttl_seconds: float,
    killed: threading.Event | None = None,
) -> dict[str, Any] | None:
    """Build ``staged`` from ``sql``; return the committed manifest, or None when skipped."""
    killed = killed or threading.Event()
    status = StagingJobStatusHook(staged)
    job_id = staged.attempt_id
    status.on_created(job_id)
    if staged.skipped:
        log.info("%s exists and purpose is create_if_not_exists: nothing to do", staged.target)
        return None
    spec = {**staged.write_spec(), **spec_extra}
    log.info("staged attempt %s writes into %s", job_id, staged.location)

    def check_killed() -> None:
        if killed.is_set():
            raise TaskKilledError(f"task was killed while building {staged.target}")

    try:
        with Heartbeat(staged, ttl_seconds):
            manifest = engine.run(sql, spec, staged.job_env())
            check_killed()
            staged.written(manifest)
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
