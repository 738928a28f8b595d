"""The lifecycle binding shared by every operator that runs one staged attempt.

The task lifecycle is the job-status hook: the subclass's ``execute`` begins, writes and
commits (so a failed commit fails the task); this base aborts the try's attempts from
``on_failure_callback`` / ``on_retry_callback`` (failures, zombies, timeouts) and from
``on_kill`` (SIGTERM), after which ``execute`` raises because ``killed`` is set.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_staged.airflow.callbacks import abort_callback, staged_settings
from airflow_provider_staged.airflow.operators.targets import target_dataset
from airflow_provider_staged.engine.base import Engine
from airflow_provider_staged.lineage.datasets import Lineage, attempt_lineage, hive_namespace, planned_lineage
from airflow_provider_staged.lineage.openlineage import LineageReporting
from airflow_provider_staged.staging.attempts import JournaledStagedTable


class StagedAttemptOperator(LineageReporting, BaseOperator):
    """Base of the staged operators: abort callbacks on ``staged_conn_id`` and ``on_kill``;
    OpenLineage facets of the attempt (at the start the query's inputs and the target; at the
    end the inputs and, once committed, the output)."""

    # Airflow deep-copies operators (3.0's `dags test` does), and an Event cannot be: a copy,
    # made before any try runs, shares the original's unset one.
    shallow_copy_attrs = ("_killed",)

    def __init__(self, *, staged_conn_id: str, **kwargs: Any) -> None:
        for name in ("on_failure_callback", "on_retry_callback"):
            kwargs[name] = _prepend(abort_callback(staged_conn_id), kwargs.get(name))
        super().__init__(**kwargs)
        self.staged_conn_id = staged_conn_id
        self._engine: Engine | None = None
        self._staged: JournaledStagedTable | None = None
        self._killed = threading.Event()

    def on_kill(self) -> None:
        """Cancel the Spark job and abort; ``execute`` then raises so the task fails.

        Airflow calls this from its SIGTERM handler on the main thread, which may be inside
        a py4j call or hold the attempt's lock: the work runs in its own thread, bounded.
        """
        self._killed.set()
        worker = threading.Thread(target=self._cancel_and_abort, name="staged-on-kill", daemon=True)
        worker.start()
        worker.join(timeout=30)

    def lineage_sql(self) -> str | None:
        """The query the attempt ran (its tables are the inputs); None: no input lineage."""
        return None

    def lineage_target(self) -> str:
        """The table the attempt writes: ``database.table`` or ``jdbc://<conn id>/<schema>.<table>``."""
        raise NotImplementedError

    def lineage_plan(self) -> Lineage | None:
        metastore_uri = staged_settings(self.staged_conn_id).metastore_uri
        dataset = target_dataset(self.lineage_target(), metastore_uri)
        return planned_lineage(self.lineage_sql(), hive_namespace(metastore_uri), dataset)

    def lineage_report(self, succeeded: bool) -> Lineage | None:
        # Whatever the task's outcome, the journal says whether the attempt committed: an
        # aborted attempt reports no output.
        if self._staged is None:
            return None
        metastore_uri = staged_settings(self.staged_conn_id).metastore_uri
        record = self._staged.journal.get(self._staged.attempt_id)
        dataset = target_dataset(self.lineage_target(), metastore_uri)
        return attempt_lineage(self.lineage_sql(), hive_namespace(metastore_uri), dataset, record)

    def _cancel_and_abort(self) -> None:
        try:
            if self._engine is not None:
                self._engine.cancel()
            if self._staged is not None:
                self._staged.abort("task killed")
        except Exception:
            self.log.exception("cancel/abort on kill failed; execute or the sweep retries it")


def _prepend(callback: Any, existing: Any) -> list[Any]:
    if existing is None:
        return [callback]
    return [callback, *(existing if isinstance(existing, list) else [existing])]
