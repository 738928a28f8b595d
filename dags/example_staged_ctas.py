"""Example: build raw.orders, then analytics.daily_orders from it, each atomically.

Readers of either table see the previous complete version until the task commits; a failed,
retried, killed or timed-out task leaves them exactly as they were.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator

with DAG(
    dag_id="example_staged_ctas",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["staged", "example"],
    doc_md=__doc__,
) as dag:
    orders = StagedCreateTableAsOperator(
        task_id="build_raw_orders",
        target="raw.orders",
        sql="""
            SELECT id AS order_id,
                   date_add(DATE'2024-01-01', CAST(id % 7 AS INT)) AS order_date,
                   CAST(date_add(DATE'2024-01-01', CAST(id % 7 AS INT)) AS STRING) AS ds,
                   CAST(id % 97 AS DECIMAL(10, 2)) AS amount
            FROM range(10000)
        """,
        purpose="create_or_replace",
    )
    daily = StagedCreateTableAsOperator(
        task_id="build_daily_orders",
        target="analytics.daily_orders",
        sql="""
            SELECT order_date, count(*) AS orders, sum(amount) AS revenue
            FROM raw.orders GROUP BY order_date ORDER BY order_date
        """,
        purpose="create_or_replace",
        retries=1,
    )
    orders >> daily
