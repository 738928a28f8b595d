"""Refresh DAGs for the materialized tables defined in one folder (airflow DAG): ``dags/materialized/``,
or ``STAGED_MT_DEFINITIONS_DIR`` when set (``staged up`` sets it to ``$STAGED_HOME/materialized``,
where ``staged mt create`` writes, outside this repository). The CLI, the SQL client and the
Materialized tables page read the same folder, so every table with a DAG is in their views."""

from pathlib import Path

from airflow_provider_staged.discovery.embedded import definitions_folder
from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

build_dags(definitions_folder(Path(__file__).parent), globals())
