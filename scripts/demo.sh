#!/usr/bin/env bash
# README command 1: set up, start the embedded services, run the example DAG with
# `airflow dags test`, and print the table it built. State lives in ./.staged.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export STAGED_HOME="$PWD/.staged"
export AIRFLOW_HOME="$STAGED_HOME/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export SPARK_LOCAL_IP=127.0.0.1
export PATH="$PWD/.venv/bin:$PATH"
staged services up
staged create-database raw analytics
airflow db migrate >/dev/null
airflow dags test example_staged_ctas
staged show analytics.daily_orders
echo "The metastore keeps running for you to explore (staged show, staged attempts); stop it with:"
echo "  STAGED_HOME=$STAGED_HOME .venv/bin/staged services down"
