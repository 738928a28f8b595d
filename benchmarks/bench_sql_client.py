"""``staged sql -e "SELECT 1"``: gateway mode (a warm Spark Connect server) against embedded mode.

Both arms run the real command in a fresh process, as a user does, and are timed from the
process start to its exit (interpreter start, imports, the session, the query, the output):

- ``gateway``: ``staged sql --gateway sc://localhost:PORT/;token=… -e "SELECT 1"`` against one
  gateway started (and warmed) once for the whole run;
- ``embedded``: ``staged sql -e "SELECT 1"``: an in-process Spark (a JVM per run) against the
  same metastore.

- ``baseline`` (with ``--baseline DIR``): the gateway arm's command on another version of the
  package, e.g. ``git archive REV airflow_provider_staged | tar -x -C DIR`` (``PYTHONPATH=DIR``
  shadows the installed one): what a change to the start-up path gained, paired.

The arms alternate (``_common.arm_order``) after one uncounted warm-up round; every rep's
seconds and the paired ratio gateway/embedded are printed, then the paired-ratio statistics.
Target: gateway p50 <= 1.5 s.

Starts its own metastore and gateway in a temp home; stops both. Run it alone on the machine:
``.venv/bin/python benchmarks/bench_sql_client.py`` (``--reps 4`` for a quick check).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import alternating_rounds, load, paired_ratios, percentile_ms, runs_text

STAGED = Path(sys.executable).with_name("staged")
QUERY = "SELECT 1"


def run_sql(env: dict[str, str], *args: str) -> float:
    """Wall seconds of one ``staged sql`` process; it must print the one-row result."""
    start = time.perf_counter()
    done = subprocess.run([str(STAGED), "sql", *args, "-e", QUERY, "--output", "csv"], env=env,
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if done.returncode != 0 or done.stdout.split() != ["1", "1"]:
        raise SystemExit(f"staged sql {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8, help="timed reps per arm (even: ABBA balanced)")
    parser.add_argument("--baseline", type=Path, help="a source tree of the package to compare with")
    args = parser.parse_args()

    from airflow_provider_staged.services.gateway import start_gateway, stop_gateway
    from airflow_provider_staged.services.metastore import start_metastore, stop_metastore

    home = Path(tempfile.mkdtemp(prefix="bench-sql-client-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "STAGED_"))}
    try:
        metastore = start_metastore(home)
        started = time.perf_counter()
        gateway = start_gateway(metastore.uri, metastore.warehouse, home, master="local[2]")
        print(f"gateway up in {time.perf_counter() - started:.0f}s; load average {load()}", flush=True)
        env |= {"STAGED_HOME": str(home), "STAGED_METASTORE_URI": metastore.uri}
        arms = {
            "gateway": lambda: run_sql(env, "--gateway", gateway.url),
            "embedded": lambda: run_sql(env, "--master", "local[2]"),
        }
        if args.baseline is not None:
            baseline_env = {**env, "PYTHONPATH": str(args.baseline.resolve())}
            arms["baseline"] = lambda: run_sql(baseline_env, "--gateway", gateway.url)

        def on_rep(rep: int, order: list[str], seconds: dict[str, float]) -> None:
            print(f"rep {rep + 1}: " + "  ".join(f"{name} {seconds[name]:.2f}s" for name in order)
                  + f"  ratio {seconds['gateway'] / seconds['embedded']:.3f}  (load {load()})", flush=True)

        times = alternating_rounds(arms, args.reps, on_rep=on_rep)
    finally:
        stop_gateway(home)
        stop_metastore(home)
        shutil.rmtree(home, ignore_errors=True)
    for name, values in times.items():
        print(f"{name:9s} p50 {percentile_ms(values, 0.5) / 1000:.2f}s  p90 "
              f"{percentile_ms(values, 0.9) / 1000:.2f}s  runs {runs_text(values)}")
    ratios = paired_ratios(times["gateway"], times["embedded"])
    print(f"gateway/embedded: {ratios.describe()}")
    if args.baseline is not None:
        print(f"gateway/baseline: {paired_ratios(times['gateway'], times['baseline']).describe()}")
    p50 = percentile_ms(times["gateway"], 0.5) / 1000
    print(f"target gateway p50 <= 1.5 s: {'met' if p50 <= 1.5 else 'NOT met'} ({p50:.2f} s); "
          f"load average {load()}")


if __name__ == "__main__":
    main()
