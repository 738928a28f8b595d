"""A rollback DAG for the Airflow-driven lifecycle tests: STAGED_TEST_TARGET, version from conf."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_staged.airflow.operators.staged_rollback import StagedRollbackOperator

with DAG("staged_rollback", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):
    StagedRollbackOperator(
        task_id="rollback",
        target=os.environ.get("STAGED_TEST_TARGET", "default.unset"),
        version="{{ dag_run.conf['version'] }}",
    )
