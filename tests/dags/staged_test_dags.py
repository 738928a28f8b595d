"""DAGs for the Airflow-driven tests; what they build comes from STAGED_TEST_* variables."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_provider_staged.airflow.callbacks import staged_table_callbacks, staged_write_location
from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator
from airflow_provider_staged.staging.audits import RowExpectation

TARGET = os.environ.get("STAGED_TEST_TARGET", "default.unset")
SQL = os.environ.get("STAGED_TEST_SQL", "SELECT 1 AS x")
PURPOSE = os.environ.get("STAGED_TEST_PURPOSE", "create_or_replace")
TIMEOUT = os.environ.get("STAGED_TEST_TIMEOUT_SECONDS")
START = pendulum.datetime(2024, 1, 1, tz="UTC")

with DAG("staged_operator", schedule=None, start_date=START, catchup=False):
    StagedCreateTableAsOperator(
        task_id="build",
        target=TARGET,
        sql=SQL,
        purpose=PURPOSE,
        atomic=os.environ.get("STAGED_TEST_ATOMIC", "true") == "true",
        execution_timeout=timedelta(seconds=float(TIMEOUT)) if TIMEOUT else None,
        jdbc_options=json.loads(os.environ.get("STAGED_TEST_JDBC_OPTIONS", "{}")),
    )

if not TARGET.startswith("jdbc://"):  # audits are wired for Hive targets only
    with DAG("staged_audits", schedule=None, start_date=START, catchup=False):
        # One build that passes its audits (a warn failing), one that fails: one `dags test`, one JVM.
        passes = StagedCreateTableAsOperator(
            task_id="passes",
            target=TARGET,
            sql=SQL,
            purpose=PURPOSE,
            audits=[
                RowExpectation("labelled", "label NOT LIKE '%-7'", "warn"),
                {"column_mapping": {"id": {"unique_check": {"equal_to": 0}, "null_check": {"equal_to": 0}}}},
            ],
        )
        fails = StagedCreateTableAsOperator(
            task_id="fails",
            target=os.environ.get("STAGED_TEST_TARGET_2", "default.unset"),
            sql=SQL,
            purpose=PURPOSE,
            audits=[{"checks": {"few_rows": {"check_statement": "COUNT(*) < 10"}}}],
        )
        passes >> fails

with DAG("staged_spark_submit", schedule=None, start_date=START, catchup=False):
    # The same build on a cluster: spark-submit through the Spark provider's connection.
    StagedCreateTableAsOperator(
        task_id="build",
        target=TARGET,
        sql=SQL,
        purpose=PURPOSE,
        engine="spark_submit",
        spark_conn_id=os.environ.get("STAGED_TEST_SPARK_CONN_ID", "spark_default"),
        spark_conf=json.loads(os.environ.get("STAGED_TEST_SPARK_CONF", "{}")),
    )


def write_with_spark(**context):
    from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
    from airflow_provider_staged.engine.runners import EmbeddedEngine

    location = staged_write_location(context)
    engine = EmbeddedEngine(StagedTableHook().get_settings())
    engine.run(SQL, {"location": location, "manifest_path": f"{location}/_STAGED_MANIFEST.json"}, {})


if not TARGET.startswith("jdbc://"):  # the callbacks form stages Hive tables only
    with DAG("staged_callbacks", schedule=None, start_date=START, catchup=False):
        PythonOperator(
            task_id="build",
            python_callable=write_with_spark,
            **staged_table_callbacks(TARGET, PURPOSE),
        )
