#!/usr/bin/env bash
# Set up, then run the whole test suite (README command 2; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
STAGED_SETUP_TESTS=1 bash scripts/setup.sh
.venv/bin/ruff check airflow_provider_staged dags tests benchmarks
# The lowest supported versions, in their own environment (scripts/compat.sh); the suite runs anyway.
compat_status=0
bash scripts/compat.sh || compat_status=$?
set +e
# Two workers, a test module each at a time (module fixtures stay on one worker): most of the
# suite's time is spent waiting on JVMs and Airflow, so two modules at once fill the 2 cores.
# --durations: the slowest tests in the log, to watch the suite's time budget.
.venv/bin/python -m pytest -p no:cacheprovider -ra -n 2 --dist loadfile --durations=25 "$@"
status=$?
set -e
# pytest exits 5 when it collected no test: that must fail CI.
[ $status -ne 0 ] || status=$compat_status
exit $status
