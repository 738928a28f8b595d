#!/usr/bin/env bash
# Set up, then run the whole test suite (README command 2; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
STAGED_SETUP_TESTS=1 bash scripts/setup.sh
.venv/bin/ruff check airflow_provider_staged dags tests benchmarks
# Spark's scratch directories (SPARK_LOCAL_DIRS) and pytest's temporary ones live in one
# directory, removed at the end: a Spark driver that a test kills leaves its scratch behind.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/staged-tests.XXXXXX")
trap 'rm -rf "$run_tmp"' EXIT
export SPARK_LOCAL_DIRS="$run_tmp/spark"
mkdir -p "$SPARK_LOCAL_DIRS"
echo "disk free for the run: $(df -h --output=avail "$run_tmp" | tail -1 | tr -d ' ')"
# The lowest supported versions, in their own environment (scripts/compat.sh), beside the suite
# and niced: the suite spends most of its time waiting on JVMs and Airflow, and the compatibility
# run fills those idle cores instead of adding ~2 minutes before it. Its output follows the suite's.
compat_log="$run_tmp/compat.log"
nice -n 19 bash scripts/compat.sh >"$compat_log" 2>&1 &
compat_pid=$!
set +e
# Two workers, a test module each at a time (module fixtures stay on one worker): most of the
# suite's time is spent waiting on JVMs and Airflow, so two modules at once fill the 2 cores.
# --durations: the slowest tests in the log, to watch the suite's time budget. tests/compat runs
# in the compatibility run; its steps at the newest versions are in tests/integration.
.venv/bin/python -m pytest -p no:cacheprovider -ra -n 2 --dist loadfile --durations=25 \
    --basetemp "$run_tmp/pytest" --ignore tests/compat "$@"
status=$?
echo "disk free after the run: $(df -h --output=avail "$run_tmp" | tail -1 | tr -d ' ')"
wait "$compat_pid"
compat_status=$?
set -e
echo "--- compatibility run (scripts/compat.sh, exit $compat_status) ---"
cat "$compat_log"
# pytest exits 5 when it collected no test: that must fail CI.
[ $status -ne 0 ] || status=$compat_status
exit $status
