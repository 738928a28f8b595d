"""The staged operator with engine connect (a Spark Connect gateway), for ``airflow dags test``."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator

with DAG("staged_connect", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):
    StagedCreateTableAsOperator(
        task_id="build",
        target=os.environ.get("STAGED_TEST_TARGET", "default.unset"),
        sql=os.environ.get("STAGED_TEST_SQL", "SELECT 1 AS x"),
        purpose=os.environ.get("STAGED_TEST_PURPOSE", "create_or_replace"),
        engine="connect",
        spark_conn_id=os.environ.get("STAGED_TEST_SPARK_CONN_ID"),
    )
