"""``staged sql -e "SELECT 1"``: gateway mode (a warm Spark Connect server) against embedded mode.

Both arms run the real command in a fresh process, as a user does, and are timed from the
process start to its exit (interpreter start, imports, the session, the query, the output):

- ``gateway``: ``staged sql --gateway sc://localhost:PORT/;token=… -e "SELECT 1"`` against one
  gateway started (and warmed) once for the whole run;
- ``embedded``: ``staged sql -e "SELECT 1"``: an in-process Spark (a JVM per run) against the
  same metastore (``--no-embedded`` leaves it out: the gateway arm alone, or against a baseline).

- ``pyspark`` (with ``--pyspark``): the floor under the gateway arm: a bare Python program that
  does the same with pyspark alone (import the Connect client, the session, ``spark.sql(QUERY)``,
  collect, print, ``stop()``): what the client costs that is not ours;
- ``baseline`` (with ``--baseline DIR``): the gateway arm's command on another version of the
  package, e.g. ``git archive REV airflow_provider_staged | tar -x -C DIR`` (``PYTHONPATH=DIR``
  shadows the installed one): what a change to the start-up path gained, paired.

Fairness: every run is its own session (process group); the next run starts only once every
process of it has exited (the embedded run's JVM outlives its client by a moment) and then
``--settle`` seconds later. Each run's CPU seconds (user + system of the client's Python process,
which other sessions' load barely changes; not the embedded run's JVM, which it does not reap)
and the machine's busy share during it (``/proc/stat``: other sessions' load) are printed beside
its wall time.

The arms alternate (``_common.arm_order``) after one uncounted warm-up round; every rep's
seconds and the paired ratios are printed, then p50/p90 per arm and the paired-ratio statistics.
Target: gateway p50 <= 1.5 s.

Starts its own metastore and gateway in a temp home; stops both. Run it alone on the machine:
``.venv/bin/python benchmarks/bench_sql_client.py`` (``--reps 4`` for a quick check).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _common import alternating_rounds, client_gateway, load, paired_ratios, percentile_ms, runs_text

STAGED = Path(sys.executable).with_name("staged")
QUERY = "SELECT 1"
# The pyspark arm: the gateway arm's work with pyspark's Connect client alone, printed as csv.
PYSPARK_ONLY = f"""
import sys
from pyspark.sql.connect.session import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
rows = spark.sql({QUERY!r}).limit(101).collect()
print(*rows[0].__fields__, sep=","); print(*rows[0], sep=",")
spark.stop()
"""


def staged_sql(*args: str) -> list[str]:
    return [str(STAGED), "sql", *args, "-e", QUERY, "--output", "csv"]


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot (``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(field) for field in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def session_alive(session_id: int) -> bool:
    """Whether any process of the session ``session_id`` still runs."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session_id:
                    return True
            except OSError:  # it exited while listing
                continue
    return False


class Runner:
    """Runs ``command`` once per call; keeps each run's CPU seconds and the machine's busy share."""

    def __init__(self, env: dict[str, str], command: list[str], settle: float) -> None:
        self.env = env
        self.command = command
        self.settle = settle
        self.cpu: list[float] = []
        self.busy: list[float] = []

    def __call__(self) -> float:
        rusage = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy, total = machine_ticks()
        start = time.perf_counter()
        # A session of its own: the embedded run's JVM is found and waited for below.
        process = subprocess.Popen(self.command, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        stdout, stderr = process.communicate(timeout=600)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy_after, total_after = machine_ticks()
        if process.returncode != 0 or stdout.split() != ["1", "1"]:
            raise SystemExit(f"{self.command[:3]} failed:\n{stdout}\n{stderr}")
        self.cpu.append(after.ru_utime + after.ru_stime - rusage.ru_utime - rusage.ru_stime)
        self.busy.append((busy_after - busy) / max(1, total_after - total))
        deadline = time.monotonic() + 60
        while session_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(self.settle)
        return seconds

    def forget_warmup(self) -> None:
        self.cpu.clear()
        self.busy.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8, help="timed reps per arm (even: ABBA balanced)")
    parser.add_argument("--baseline", type=Path, help="a source tree of the package to compare with")
    parser.add_argument("--no-embedded", dest="embedded", action="store_false",
                        help="leave the embedded arm out")
    parser.add_argument("--pyspark", action="store_true",
                        help="add the arm of pyspark's Connect client alone (the floor)")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds between a run's last process exiting and the next run")
    args = parser.parse_args()

    with client_gateway("bench-sql-client") as (gateway, env):
        arms = {"gateway": Runner(env, staged_sql("--gateway", gateway.url), args.settle)}
        if args.pyspark:
            arms["pyspark"] = Runner(env, [sys.executable, "-c", PYSPARK_ONLY, gateway.url], args.settle)
        if args.embedded:
            arms["embedded"] = Runner(env, staged_sql("--master", "local[2]"), args.settle)
        if args.baseline is not None:
            baseline_env = {**env, "PYTHONPATH": str(args.baseline.resolve())}
            arms["baseline"] = Runner(baseline_env, staged_sql("--gateway", gateway.url), args.settle)

        def on_rep(rep: int, order: list[str], seconds: dict[str, float]) -> None:
            runs = "  ".join(f"{name} {seconds[name]:.2f}s (cpu {arms[name].cpu[-1]:.2f}s, machine busy "
                             f"{arms[name].busy[-1]:.0%})" for name in order)
            print(f"rep {rep + 1}: {runs}  (load {load()})", flush=True)

        def after_warmup() -> None:
            for runner in arms.values():
                runner.forget_warmup()

        times = alternating_rounds(arms, args.reps, on_rep=on_rep, after_warmup=after_warmup)
    for name, values in times.items():
        cpu, busy = arms[name].cpu, arms[name].busy
        print(f"{name:9s} p50 {percentile_ms(values, 0.5) / 1000:.2f}s  p90 "
              f"{percentile_ms(values, 0.9) / 1000:.2f}s  runs {runs_text(values)}  |  cpu p50 "
              f"{percentile_ms(cpu, 0.5) / 1000:.2f}s  p90 {percentile_ms(cpu, 0.9) / 1000:.2f}s  "
              f"runs {runs_text(cpu)}  |  machine busy p50 {percentile_ms(busy, 0.5) / 1000:.0%}")
    for other in ("embedded", "baseline", "pyspark"):
        if other in times:
            print(f"gateway/{other}: {paired_ratios(times['gateway'], times[other]).describe()}")
    p50 = percentile_ms(times["gateway"], 0.5) / 1000
    print(f"target gateway p50 <= 1.5 s: {'met' if p50 <= 1.5 else 'NOT met'} ({p50:.2f} s); "
          f"load average {load()}")


if __name__ == "__main__":
    main()
