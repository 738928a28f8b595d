#!/usr/bin/env bash
# Set up, then run the whole test suite (README command 2; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
STAGED_SETUP_TESTS=1 bash scripts/setup.sh
.venv/bin/ruff check airflow_provider_staged dags tests benchmarks
set +e
.venv/bin/python -m pytest -p no:cacheprovider -ra "$@"
status=$?
set -e
# pytest exits 5 when it collected no test: that must fail CI.
exit $status
