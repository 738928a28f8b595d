"""Read task-instance states from the Airflow metadata database (for ``staged reconcile``)."""

from __future__ import annotations

from airflow_provider_staged.staging.journal import TaskRef


def airflow_task_state(task: TaskRef) -> str | None:
    """The state of ``task``'s try: ``superseded`` when a later try exists, None when unknown."""
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
