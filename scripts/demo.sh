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

echo "== 2. Materialized table analytics.revenue_daily, refreshed for ds=2024-01-03"
definition="$STAGED_HOME/demo/revenue_daily.sql"
mkdir -p "$(dirname "$definition")"
cat > "$definition" <<'SQL'
-- Revenue per day: each periodic run refreshes yesterday's partition; refresh any day on demand.
CREATE MATERIALIZED TABLE analytics.revenue_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM raw.orders GROUP BY ds;
SQL
# Created once: a second demo run reuses the workflow.
staged mt describe analytics.revenue_daily >/dev/null 2>&1 || staged mt create "$definition"
staged mt refresh analytics.revenue_daily --partition ds=2024-01-03 --wait 900
staged show analytics.revenue_daily

ui=$(staged status --output json | python -c 'import json, sys; print(json.load(sys.stdin)["airflow"]["ui"])')
echo
echo "Done in $(( $(date +%s) - started ))s after set-up. Everything keeps running:"
echo "  Airflow UI:    $ui  (user admin; password: $STAGED_HOME/airflow/simple_auth_manager_passwords.json)"
echo "  Trigger form:  ${ui}dags/mt__analytics__revenue_daily  (the Trigger button)"
echo "  CTAS DAG:      ${ui}dags/example_staged_ctas"
echo "  SQL client:    STAGED_HOME=$STAGED_HOME staged sql  (on the stack's warm gateway: staged:default>)"
echo "  More: STAGED_HOME=$STAGED_HOME staged status | staged mt list | staged show analytics.revenue_daily"
echo "  Stop everything: STAGED_HOME=$STAGED_HOME .venv/bin/staged down"
