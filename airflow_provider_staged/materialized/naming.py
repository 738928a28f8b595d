"""Names shared by the DAG factory and its clients: definition files, DAG ids and the tag.

Pure (no Airflow import): the client side (``staged mt``, the workflow scheduler) needs these
names without loading the factory's DAG-building imports.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_staged.staging.identifiers import TableIdentifier

DAG_ID_PREFIX = "mt__"
BROKEN_DAG_ID_PREFIX = "mt__broken__"
DEFINITION_GLOB = "*.sql"
TAG = "materialized-table"


def dag_id_for(identifier: TableIdentifier) -> str:
    return f"{DAG_ID_PREFIX}{identifier.database}__{identifier.table}"


def broken_dag_id(path: Path) -> str:
    return BROKEN_DAG_ID_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)


def manual_run_fields(now: datetime, is_periodic: bool, schedule_time: str | None) -> dict[str, Any]:
    """``run_after`` and ``dag_run_id`` of a refresh triggered at ``now`` (aware, UTC); none
    (Airflow's own) for a periodic refresh without ``schedule_time``.

    Airflow 3.3 starts a queued run once ``run_after <= now()`` in its database. On SQLite (the
    local stack) that compares the stored text ``'... HH:MM:SS.ffffff'`` with
    ``CURRENT_TIMESTAMP``, which has whole seconds: a run is due only in the second after its
    ``run_after``, 0.5 s of every trigger's wait on average. The last microsecond of the second
    before ``now`` is due at the scheduler's next loop. Not for a periodic refresh without
    ``schedule_time``: its partition follows ``run_after`` (a one-time refresh only shows it,
    as its schedule time when none is given: the second before). The run id keeps ``now``, as
    Airflow's own ``manual__<run_after>``: two triggers in one second stay two runs.
    """
    if is_periodic and not schedule_time:
        return {}
    return {"dag_run_id": f"manual__{now.isoformat()}",
            "run_after": now.replace(microsecond=0) - timedelta(microseconds=1)}
