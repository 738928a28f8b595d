#!/usr/bin/env bash
# The compatibility run: the package at the lowest supported versions (scripts/lowest-versions.txt)
# in .venv-compat, and there the core subset (tests/compat) with the unit tests. The environment
# is kept between runs until the constraints or pyproject.toml change.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-compat
want=$(cat scripts/lowest-versions.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$venv/.versions-sha256" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -c scripts/lowest-versions.txt -e ".[dev]"
    echo "$want" >"$venv/.versions-sha256"
fi
echo "compat: $("$venv/bin/python" -m pip list 2>/dev/null |
    awk '$1 ~ /^(apache-airflow|apache-airflow-client|apache-airflow-providers-apache-spark|apache-airflow-providers-common-compat|pyspark|pyspark-client|sqlglot)$/ {printf "%s %s, ", $1, $2}')"
# The JVM dependencies of the main environment (the tests' S3 server; S3A's jars are used only
# with the Hadoop they were built for, which pyspark 3.5's is not).
export STAGED_JVM_DIR="$PWD/.venv/jvm"
# Left out, as they need what only the newest versions have: the local stack's Airflow
# (test_local_airflow_env), the Task SDK's DagSerialization (test_periodic_dst) and the
# OpenLineage provider, an extra this environment leaves out (test_assets).
"$venv/bin/python" -m pytest -p no:cacheprovider -q -n 2 --dist loadfile tests/compat tests/unit \
    --ignore tests/unit/test_local_airflow_env.py --ignore tests/unit/test_periodic_dst.py \
    --ignore tests/unit/test_assets.py
