#!/usr/bin/env bash
# README command 1: set up, start the local stack (metastore, gateway, Airflow; 127.0.0.1 only), then
#   1. an atomic CTAS: the example DAG builds raw.orders and analytics.daily_orders;
#   2. a materialized table created through the workflow scheduler, one partition refreshed
#      through the REST API as the Trigger form does (a DAG run with conf), the partition shown.
# State lives in ./.staged; everything keeps running for you to explore; `staged down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export STAGED_HOME="${STAGED_HOME:-$PWD/.staged}"
export PATH="$PWD/.venv/bin:$PATH"
started=$(date +%s)

staged up
staged create-database raw analytics

echo "== 1. Atomic CTAS (DAG example_staged_ctas)"
staged run-dag example_staged_ctas
staged show analytics.daily_orders

echo "== 2. Materialized table analytics.orders_daily (dags/materialized/orders_daily.sql), refreshed for ds=2024-01-03"
# Created once its source raw.orders exists (a second demo run reuses the workflow); the stack
# serves the definitions `staged mt create` copies to $STAGED_HOME/materialized.
staged mt describe analytics.orders_daily >/dev/null 2>&1 || staged mt create dags/materialized/orders_daily.sql
staged mt refresh analytics.orders_daily --partition ds=2024-01-03 --wait 900
staged show analytics.orders_daily

ui=$(staged status --output json | python -c 'import json, sys; print(json.load(sys.stdin)["airflow"]["ui"])')
echo
echo "Done in $(( $(date +%s) - started ))s after set-up. Everything keeps running:"
echo "  Airflow UI:    $ui  (user admin; password: $STAGED_HOME/airflow/simple_auth_manager_passwords.json)"
echo "  Trigger form:  ${ui}dags/mt__analytics__orders_daily  (the Trigger button)"
echo "  CTAS DAG:      ${ui}dags/example_staged_ctas"
echo "  SQL client:    STAGED_HOME=$STAGED_HOME staged sql  (on the stack's warm gateway: staged:default>)"
echo "  More: STAGED_HOME=$STAGED_HOME staged status | staged mt list | staged show analytics.orders_daily"
echo "  Stop everything: STAGED_HOME=$STAGED_HOME .venv/bin/staged down"
