"""The ``staged_maintenance`` DAG: reconcile, partition expiry and version sweeps (airflow DAG)."""

from pathlib import Path

from airflow_provider_staged.airflow.maintenance import build_maintenance_dag
from airflow_provider_staged.discovery.embedded import definitions_folder

build_maintenance_dag(globals(), definitions_folder(Path(__file__).parent))
