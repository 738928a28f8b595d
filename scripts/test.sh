#!/usr/bin/env bash
# Set up, then run the whole test suite (README command 2; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
STAGED_SETUP_TESTS=1 bash scripts/setup.sh
.venv/bin/ruff check airflow_provider_staged dags tests benchmarks
# The lowest supported versions, in their own environment (scripts/compat.sh), beside the suite
# and niced: the suite spends most of its time waiting on JVMs and Airflow, and the compatibility
# run fills those idle cores instead of adding ~2 minutes before it. Its output follows the suite's.
compat_log=$(mktemp)
trap 'rm -f "$compat_log"' EXIT
nice -n 19 bash scripts/compat.sh >"$compat_log" 2>&1 &
compat_pid=$!
set +e
# Two workers, a test module each at a time (module fixtures stay on one worker): most of the
# suite's time is spent waiting on JVMs and Airflow, so two modules at once fill the 2 cores.
# --durations: the slowest tests in the log, to watch the suite's time budget.
.venv/bin/python -m pytest -p no:cacheprovider -ra -n 2 --dist loadfile --durations=25 "$@"
status=$?
wait "$compat_pid"
compat_status=$?
set -e
echo "--- compatibility run (scripts/compat.sh, exit $compat_status) ---"
cat "$compat_log"
# pytest exits 5 when it collected no test: that must fail CI.
[ $status -ne 0 ] || status=$compat_status
exit $status
