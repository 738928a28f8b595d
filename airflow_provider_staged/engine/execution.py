"""One staged build on an engine: the one commit path with the engine's Spark job as its write.

Shared by the operator and the materialized-table refresh; no Airflow import.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow_provider_staged.engine.base import Engine
from airflow_provider_staged.staging.attempts import JournaledStagedTable, run_attempt
from airflow_provider_staged.staging.manifest import Manifest


def execute_staged(
    staged: JournaledStagedTable,
    engine: Engine,
    sql: str,
    spec_extra: dict[str, Any],
    ttl_seconds: float,
    killed: threading.Event | None = None,
) -> Manifest | None:
    """Build ``staged`` from ``sql`` on ``engine``; return the committed manifest, or None when skipped."""
    return run_attempt(
        staged,
        lambda spec: engine.run(sql, {**spec, **spec_extra}, staged.job_env()),
        ttl_seconds,
        killed,
    )
