"""Kill/restart soak of the unified sink's streaming path: exactly once after many crashes.

One streaming query (``tests.integration.sink_workers``, the driver of the exactly-once tests)
reads JSON files, one per micro-batch, into the Hive or the PostgreSQL sink. Each cycle adds
new input files, starts the driver from the same checkpoint and SIGKILLs its whole process
group at a random point: either at a random time after start (anywhere in JVM start-up,
planning, writing, committing or checkpointing) or, one cycle in three, at a random named
point of the sink's commit path (``STAGED_SINK_FAULT``: after the writers, after the sink's
commit but before the checkpoint, during the global commit). After ``--cycles`` kills a last
run finishes the input. Printed: the kill points, then the rows lost and duplicated (both must
be 0) and the staged leftovers. Exits 1 if any row is lost or duplicated or anything is left.

Run (bounded: about 20-30 s per cycle on 2 cores):
``/work/heavy .venv/bin/python benchmarks/soak_sink.py --cycles 20 --sink hive``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from _common import hive_services, load

from airflow_provider_staged.sink.file_stream import LOG_DIR
from tests.integration.sink_workers import run_driver

FAULT_POINTS = ("after_writers", "after_commit", "global_commit")
ROWS_PER_FILE = 25


def _add_input(directory: Path, first_file: int, files: int) -> None:
    """Files ``first_file``..: ids ``file * ROWS_PER_FILE + i``, so every id is written once."""
    for index in range(first_file, first_file + files):
        first = index * ROWS_PER_FILE
        lines = [json.dumps({"id": first + i, "v": f"f{index}"}) for i in range(ROWS_PER_FILE)]
        staging = directory / f".part-{index}.json"  # the file source ignores dot files
        staging.write_text("\n".join(lines) + "\n")
        os.replace(staging, directory / f"part-{index}.json")


def _random_time_kill(rng: random.Random, low: float, high: float):
    """A ``kill_when`` that fires once a random number of seconds in [low, high] has passed."""
    deadline = time.monotonic() + rng.uniform(low, high)
    return lambda: time.monotonic() >= deadline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="kills before the final run")
    parser.add_argument("--sink", choices=("hive", "postgres"), default="hive")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--files-per-cycle", type=int, default=3)
    parser.add_argument("--kill-after", default="4,25", help="random kill time: low,high seconds")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    low, high = (float(value) for value in args.kill_after.split(","))
    print(f"seed {seed}; load average {load()}", flush=True)
    with ExitStack() as stack:
        services = stack.enter_context(hive_services("soak-sink", "soak"))
        work = services.home / "soak"
        (work / "input").mkdir(parents=True)
        spec = {
            "mode": "stream", "metastore_uri": services.metastore_uri, "warehouse": str(services.warehouse),
            "journal_dir": str(work / "journal"), "sink": args.sink, "input": str(work / "input"),
            "checkpoint": str(work / "checkpoint"), "row_sleep_ms": 20,
        }
        read_ids, leftovers = _target(stack, services, spec)
        files = 0
        outcomes: Counter[str] = Counter()
        started = time.monotonic()
        for cycle in range(args.cycles):
            _add_input(work / "input", files, args.files_per_cycle)
            files += args.files_per_cycle
            if cycle % 3 == 2:
                point = rng.choice(FAULT_POINTS)
                code, output = run_driver(spec, work, fault=point)
            else:
                point = "random time"
                code, output = run_driver(spec, work, kill_when=_random_time_kill(rng, low, high))
            outcome = "killed" if code == -signal.SIGKILL else ("finished" if code == 0 else f"exit {code}")
            outcomes[f"{point}: {outcome}"] += 1
            print(f"cycle {cycle + 1:2d}: {point:13s} -> {outcome}", flush=True)
            if code not in (0, -signal.SIGKILL):
                print(output[-3000:])
                return 1
        code, output = run_driver(spec, work)
        if code != 0:
            print(output[-3000:])
            return 1
        ids = read_ids()
        expected = files * ROWS_PER_FILE
        counts = Counter(ids)
        lost = sum(1 for value in range(expected) if value not in counts)
        duplicated = sum(count - 1 for count in counts.values() if count > 1)
        left = leftovers()
        elapsed = time.monotonic() - started
        print(f"\n{args.cycles} cycles + final run in {elapsed:.0f}s; load average {load()}")
        for key, count in sorted(outcomes.items()):
            print(f"  {key}: {count}")
        print(f"rows expected {expected}, read {len(ids)}: lost {lost}, duplicated {duplicated}; "
              f"staged leftovers {left}")
        return 0 if lost == duplicated == 0 and not left else 1


def _target(stack: ExitStack, services, spec: dict):
    """Point ``spec`` at a fresh target; return (read its ids, list staged leftovers)."""
    if spec["sink"] == "hive":
        spec["table"] = "soak.events"
        root = services.warehouse / "soak.db" / "events"

        def read_hive() -> list[int]:
            services.spark.catalog.refreshTable(spec["table"])
            return [row.id for row in services.spark.sql(f"SELECT id FROM {spec['table']}").collect()]

        staging = root / "_staging"

        def leftovers() -> list[str]:
            """Staged files, but the stream's file sink log (it lives as long as the checkpoint)."""
            return sorted(str(path.relative_to(staging)) for path in staging.rglob("*")
                          if path.is_file() and LOG_DIR not in path.parts) if staging.exists() else []

        return read_hive, leftovers

    import psycopg

    from tests.fixtures.postgres_server import start_postgres, stop_postgres

    server = start_postgres()
    stack.callback(stop_postgres, server)
    os.environ["AIRFLOW_CONN_STAGED_SOAK_PG"] = server.airflow_uri()
    name = "events_" + uuid.uuid4().hex[:6]
    spec["table"] = f"jdbc://staged_soak_pg/public.{name}"

    def query(sql: str, *params: str) -> list[tuple]:
        with psycopg.connect(server.conninfo()) as conn:
            return conn.execute(sql, params).fetchall()

    return (
        lambda: [row[0] for row in query(f"SELECT id FROM public.{name}")],
        lambda: [row[0] for row in query("SELECT relname FROM pg_class WHERE starts_with(relname, %s)",
                                         f"{name}__s")],
    )


if __name__ == "__main__":
    sys.exit(main())
