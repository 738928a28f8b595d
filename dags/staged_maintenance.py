"""The ``staged_maintenance`` DAG: reconcile, partition expiry and version sweeps (airflow DAG)."""

from pathlib import Path

from airflow_provider_staged.airflow.maintenance import build_maintenance_dag

build_maintenance_dag(globals(), Path(__file__).with_name("materialized"))
