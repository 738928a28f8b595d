"""Where the wall time of ``staged sql --gateway … -e "SELECT 1"`` goes, phase by phase.

Each sample is a fresh interpreter (as a user's command is) that takes the command's steps in its
order with the client's own functions, timestamped: our CLI's imports, typer's parameter
coercion (it imports pydantic), pyspark's Spark Connect client, the session, the statement (a
SELECT is one round trip: its SQL relation, limited, collected), the output, releasing the
server's session, and the interpreter's exit (measured from outside: the process end after its
last timestamp). Wall and CPU milliseconds per phase, median over the samples; the process
total beside them.

Starts its own metastore and a warm gateway (``local[2]``) in a temp home; stops both.
``.venv/bin/python benchmarks/probes/profile_sql_client.py --samples 9``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import _benchmarks_path  # noqa: F401 (benchmarks/ on sys.path)
from _common import client_gateway, load

# The probe: the phases of `staged sql --gateway URL -e "SELECT 1" -o csv`, each timestamped.
PROBE = r"""
import atexit, gc, json, os, sys, time
marks = [("probe start", time.perf_counter(), time.process_time())]
def mark(name):
    marks.append((name, time.perf_counter(), time.process_time()))
import airflow_provider_staged.cli.main
atexit.register(gc.freeze)  # as cli.main does
mark("import staged CLI (cli.py: typer, rich, ...)")
from airflow_provider_staged.cli import sql as client
mark("import sql.client (sqlglot's Spark tokenizer)")
import typer._adapters
mark("typer's parameter coercion (pydantic)")
client.quiet_spark_errors()
spark = client.gateway_spark(os.environ["PROBE_URL"])
mark("import pyspark.sql.connect.session, session object (no round trip)")
from airflow_provider_staged.sql.properties import SessionProperties
session = client.make_session(spark, SessionProperties({}), lambda: None)
mark("sql.session import")
from airflow_provider_staged.sql.splitting import split_statements
statement = split_statements("SELECT 1")[0]
result = session.execute(statement)
mark("the statement: one round trip (its relation, limit + collect)")
client.Printer(session.properties, client.ScriptOutput.csv, False)(result)
sys.stdout.flush()
mark("print")
spark.stop()
mark("release the server session, close the channel")
phases = [(name, 1000 * (wall - prev_wall), 1000 * (cpu - prev_cpu))
          for (_, prev_wall, prev_cpu), (name, wall, cpu) in zip(marks, marks[1:])]
print(json.dumps({"phases": phases, "end": time.time()}), file=sys.stderr)
"""


def sample(env: dict[str, str]) -> tuple[list[tuple[str, float, float]], float, float]:
    """One fresh process: its phases, its total wall seconds and the exit's seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    end = time.time()
    total = time.perf_counter() - start
    if done.returncode != 0 or done.stdout.split() != ["1", "1"]:
        raise SystemExit(f"probe failed:\n{done.stdout}\n{done.stderr}")
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return [tuple(phase) for phase in report["phases"]], total, end - report["end"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=9)
    args = parser.parse_args()

    with client_gateway("profile-sql-client") as (gateway, env):
        env["PROBE_URL"] = gateway.url
        sample(env)  # warm-up: the page cache, the gateway's first session
        runs = [sample(env) for _ in range(args.samples)]
    print(f"{'phase':66s} {'wall ms':>8s} {'cpu ms':>7s}   (median of {args.samples})")
    for index, (name, _, _) in enumerate(runs[0][0]):
        wall = statistics.median(run[0][index][1] for run in runs)
        cpu = statistics.median(run[0][index][2] for run in runs)
        print(f"{name:66s} {wall:8.0f} {cpu:7.0f}")
    totals = [run[1] for run in runs]
    starts = [total - sum(phase[1] for phase in phases) / 1000 - exit for phases, total, exit in runs]
    print(f"{'interpreter start (the rest of the total)':66s} {1000 * statistics.median(starts):8.0f}")
    print(f"{'interpreter exit (after the last timestamp, from outside)':66s} "
          f"{1000 * statistics.median(run[2] for run in runs):8.0f}")
    print(f"process total: median {statistics.median(totals):.2f} s  runs "
          f"{' '.join(f'{value:.2f}' for value in totals)}; load average {load()}")


if __name__ == "__main__":
    main()
