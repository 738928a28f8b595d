"""Binding staged attempts to Airflow task lifecycles: callbacks, task identity, reconcile.

``staged_table_callbacks`` is the callbacks form for ANY operator: begin in
``on_execute_callback``, commit in ``on_success_callback``, abort in ``on_failure_callback``
and ``on_retry_callback``. Airflow 3 runs ``on_success_callback`` after it has reported
success and only logs a callback's error, so a commit there can fail silently: the journal
keeps the attempt WRITTEN and ``reconcile`` finishes it later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_staged.assets import DEFAULT_CONN_ID
from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.settings import StagedSettings
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable, abort_attempt
from airflow_provider_staged.staging.hive import HiveStagedTable
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.manifest import MANIFEST_NAME
from airflow_provider_staged.storage import read_text

log = logging.getLogger(__name__)

def task_ref(context: Any) -> TaskRef:
    ti = context["ti"]
    return TaskRef(
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        run_id=ti.run_id,
        try_number=int(ti.try_number),
        map_index=int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", None) is not None else -1),
    )


def _settings(conn_id: str) -> StagedSettings:
    from airflow_provider_staged.hooks.staged_table import StagedTableHook

    return StagedTableHook(conn_id).get_settings()


def staged_from_record(record: AttemptRecord, settings: StagedSettings) -> JournaledStagedTable:
    """Rebuild the staged table of a journaled attempt (for abort, reconcile, sweep)."""
    purpose = StagingPurpose.parse(record.purpose)
    if record.kind == "hive":
        return HiveStagedTable(
            TableIdentifier.parse(record.target),
            purpose,
            settings.journal,
            # The journal belongs to the connection: its metastore is authoritative, the
            # address recorded at attempt time may be stale.
            settings.metastore_uri,
            settings.retention,
            record.task,
            record.attempt_id,
        )
    if record.kind == "jdbc":
        from airflow_provider_staged.staging.jdbc import jdbc_staged_from_record

        return jdbc_staged_from_record(record, settings.journal)
    raise ValueError(f"attempt {record.attempt_id} has unknown kind {record.kind!r}")


def abort_task_attempts(context: Any) -> None:
    """Failure/retry callback: abort every open attempt of this task try."""
    conn_id = getattr(context.get("task"), "staged_conn_id", DEFAULT_CONN_ID)
    _abort_for_task(task_ref(context), conn_id, "task failed")


def _abort_for_task(task: TaskRef, conn_id: str, reason: str) -> None:
    settings = _settings(conn_id)
    for record in settings.journal.for_task(task):
        if not record.state.ended:
            abort_attempt(staged_from_record(record, settings), reason)


def staged_write_location(context: Any, staged_conn_id: str = DEFAULT_CONN_ID) -> str:
    """Inside a task using ``staged_table_callbacks``: where this try must write its data."""
    settings = _settings(staged_conn_id)
    records = [r for r in settings.journal.for_task(task_ref(context)) if not r.state.ended]
    if not records:
        raise RuntimeError("no open staged attempt for this task try: is on_execute_callback set?")
    return records[-1].location


def staged_table_callbacks(
    target: str, purpose: str = "create", staged_conn_id: str = DEFAULT_CONN_ID
) -> dict[str, Callable[[Any], None]]:
    """Callbacks that make ANY operator's write into ``staged_write_location`` atomic.

    The operator writes Parquet plus the job's manifest (``engine.spark_job``) into the
    location; use as ``MyOperator(..., **staged_table_callbacks("db.t", "create_or_replace"))``.
    """
    identifier = TableIdentifier.parse(target)
    staging_purpose = StagingPurpose.parse(purpose)

    def staged(context: Any) -> HiveStagedTable:
        settings = _settings(staged_conn_id)
        return HiveStagedTable(
            identifier, staging_purpose, settings.journal, settings.metastore_uri, settings.retention,
            task_ref(context),
        )

    def begin(context: Any) -> None:
        staged(context).begin()

    def commit(context: Any) -> None:
        table = staged(context)
        record = table.journal.require(table.attempt_id)
        if record.state is AttemptState.BEGUN:
            manifest = read_text(f"{record.location}/{MANIFEST_NAME}")
            import json

            table.written(json.loads(manifest))
        table.commit()
        table.housekeep()

    def abort(context: Any) -> None:
        _abort_for_task(task_ref(context), staged_conn_id, "task failed")

    return {
        "on_execute_callback": begin,
        "on_success_callback": commit,
        "on_failure_callback": abort,
        "on_retry_callback": abort,
    }


@dataclass(frozen=True)
class ReconcileAction:
    attempt_id: str
    target: str
    action: str


TaskStateLookup = Callable[[TaskRef], str | None]
_FAILED_STATES = {"failed", "upstream_failed", "skipped", "removed", "up_for_retry", "superseded"}


def reconcile(
    settings: StagedSettings, task_state: TaskStateLookup | None = None, now: float | None = None
) -> list[ReconcileAction]:
    """Finish or roll back open attempts whose task has ended; expire the abandoned ones.

    - published in the catalog but not journaled → journaled COMMITTED ("finished");
    - task succeeded and the data is WRITTEN → committed (a commit callback that failed);
    - task failed, was retried or is gone → aborted;
    - nothing knows the task and its heartbeat is older than the TTL → aborted ("expired").
    """
    now = time.time() if now is None else now
    actions = []
    for record in settings.journal.open_attempts():
        staged = staged_from_record(record, settings)
        state = task_state(record.task) if task_state is not None and record.task is not None else None
        if record.state is AttemptState.WRITTEN and staged.is_published(record):
            staged.finish()
            action = "finished"
        elif state == "success" and record.state is AttemptState.WRITTEN:
            staged.commit()
            staged.housekeep()
            action = "committed"
        elif state == "success" or state in _FAILED_STATES:
            abort_attempt(staged, f"task {state}")
            action = "aborted"
        elif now - record.heartbeat_at > settings.attempt_ttl_seconds:
            abort_attempt(staged, "expired: no heartbeat within the attempt TTL")
            action = "expired"
        else:
            action = "left running"
        log.info("reconcile %s (%s): %s", record.attempt_id, record.target, action)
        actions.append(ReconcileAction(record.attempt_id, record.target, action))
    return actions
