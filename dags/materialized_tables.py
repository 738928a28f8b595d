"""Refresh DAGs for the materialized tables defined in ``dags/materialized/*.sql`` (airflow DAG)."""

from pathlib import Path

from airflow_provider_staged.materialized.factory import build_dags

build_dags(Path(__file__).with_name("materialized"), globals())
