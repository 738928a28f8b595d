"""The Airflow binding of staged attempts: task identity, lifecycle callbacks, task states.

``staged_table_callbacks`` is the callbacks form for ANY operator: begin in
``on_execute_callback``, commit in ``on_success_callback``, abort in ``on_failure_callback``
and ``on_retry_callback``. Airflow 3 runs ``on_success_callback`` after it has reported
success and only logs a callback's error, so a commit there can fail silently: the journal
keeps the attempt WRITTEN and ``staged reconcile`` finishes it later.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import abort_attempt, commit_written
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState, TaskRef
from airflow_provider_staged.staging.kinds import from_record
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.manifest import MANIFEST_NAME, Manifest
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import read_text


def task_ref(context: Any) -> TaskRef:
    ti = context["ti"]
    map_index = getattr(ti, "map_index", None)
    return TaskRef(
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        run_id=ti.run_id,
        try_number=int(ti.try_number),
        map_index=int(map_index) if map_index is not None else -1,
    )


def staged_settings(conn_id: str) -> StagedSettings:
    from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook

    return StagedTableHook(conn_id).get_settings()


def abort_attempts_of_try(task: TaskRef, conn_id: str, reason: str) -> None:
    """Abort every open attempt of one task try (each by the kind that made it)."""
    settings = staged_settings(conn_id)
    for record in settings.journal.for_task(task):
        if not record.state.ended:
            abort_attempt(from_record(record, settings), reason)


def abort_callback(conn_id: str) -> Callable[[Any], None]:
    """A failure/retry callback that aborts the task try's attempts on ``conn_id``'s catalog."""
    return functools.partial(_abort_on, conn_id)


def _abort_on(conn_id: str, context: Any) -> None:
    abort_attempts_of_try(task_ref(context), conn_id, "task failed")


def staged_write_location(context: Any, staged_conn_id: str = DEFAULT_CONN_ID) -> str:
    """Inside a task using ``staged_table_callbacks``: where this try must write its data."""
    settings = staged_settings(staged_conn_id)
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
        settings = staged_settings(staged_conn_id)
        return HiveStagedTable(
            identifier, staging_purpose, settings.journal, settings.metastore_uri, settings.retention,
            task_ref(context), conn_id=staged_conn_id,
        )

    def begin(context: Any) -> None:
        staged(context).begin()

    def commit(context: Any) -> None:
        table = staged(context)
        record = table.journal.require(table.attempt_id)
        manifest = None
        if record.state is AttemptState.BEGUN:
            manifest = Manifest.from_json(read_text(f"{record.location}/{MANIFEST_NAME}"))
        commit_written(table, manifest)

    return {
        "on_execute_callback": begin,
        "on_success_callback": commit,
        "on_failure_callback": abort_callback(staged_conn_id),
        "on_retry_callback": abort_callback(staged_conn_id),
    }


def airflow_task_state(task: TaskRef) -> str | None:
    """The state of ``task``'s try in Airflow's database: ``superseded`` when a later try
    exists, None when unknown (``staged reconcile``). Inside a task (the maintenance DAG's
    reconcile), where Airflow 3 closes the ORM, the task instance's state through the Task SDK,
    without its try number (reconcile then asks the journal for a later try)."""
    if _in_task():
        return _task_state_from_supervisor(task)
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalar(
            select(TaskInstance).where(
                TaskInstance.dag_id == task.dag_id,
                TaskInstance.task_id == task.task_id,
                TaskInstance.run_id == task.run_id,
                TaskInstance.map_index == task.map_index,
            )
        )
        if ti is None:
            return None
        if ti.try_number > task.try_number:
            return "superseded"
        return str(ti.state) if ti.state is not None else None


def _in_task() -> bool:
    """Whether this process runs an Airflow 3 task (its supervisor's channel is open)."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:
        return False
    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


def _task_state_from_supervisor(task: TaskRef) -> str | None:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    states = RuntimeTaskInstance.get_task_states(
        dag_id=task.dag_id, task_ids=[task.task_id], run_ids=[task.run_id], map_index=task.map_index
    )
    key = task.task_id if task.map_index < 0 else f"{task.task_id}_{task.map_index}"
    state = states.get(task.run_id, {}).get(key)
    return str(state) if state is not None else None
