"""Refresh DAGs for the materialized tables defined in ``dags/materialized/*.sql`` (airflow DAG)
and, when ``STAGED_MT_DEFINITIONS_DIR`` is set (``staged up`` sets it), in that folder, where
``staged mt create`` writes definitions (so that they stay out of this repository)."""

import os
from pathlib import Path

from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

build_dags(Path(__file__).with_name("materialized"), globals())
if os.environ.get("STAGED_MT_DEFINITIONS_DIR"):
    build_dags(os.environ["STAGED_MT_DEFINITIONS_DIR"], globals())
