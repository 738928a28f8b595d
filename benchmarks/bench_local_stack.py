"""Time ``staged up`` until the Airflow UI answers, and README command 1 (``bash scripts/demo.sh``).

On a machine where ``scripts/setup.sh`` has run; each round uses a fresh ``STAGED_HOME``:

* ``staged up`` (cold): a new home, so Derby and SQLite are created and Airflow's database is
  migrated; timed until ``staged up`` returns (every component healthy) and the UI's page loads;
* ``staged up`` (warm): the same home again after ``staged down`` (database migrated already);
* ``bash scripts/demo.sh``: README command 1 as a user runs it (set-up check included), from a
  stopped stack in a fresh home to the printed URLs.

Run it alone on the machine (it starts Spark and Airflow): ``python benchmarks/bench_local_stack.py``
(``--repeat 1 --skip-demo`` for a quick check). Prints a Markdown table for ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import REPO_ROOT, load, runs_text

STAGED = Path(sys.executable).with_name("staged")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STAGED_"))}
    return env | {"STAGED_HOME": str(home), "PATH": f"{STAGED.parent}:{env.get('PATH', '')}"}


def _staged(home: Path, *args: str) -> str:
    result = subprocess.run([str(STAGED), *args], env=_env(home), cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"staged {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def up_until_ui(home: Path) -> float:
    """Seconds from ``staged up`` to the UI's page (HTTP 200)."""
    start = time.perf_counter()
    _staged(home, "up")
    ui = json.loads(_staged(home, "status", "--output", "json"))["airflow"]["ui"]
    while httpx.get(ui, timeout=30).status_code != 200:
        time.sleep(0.2)
    return time.perf_counter() - start


def demo(home: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(["bash", "scripts/demo.sh"], env=_env(home), cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if result.returncode != 0 or "Trigger form:" not in result.stdout:
        raise SystemExit(f"scripts/demo.sh failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                         f"{result.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-demo", action="store_true", help="time `staged up` only")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"staged up (cold) to UI": [], "staged up (warm) to UI": [],
                                     "bash scripts/demo.sh": []}
    print(f"load before: {load()}", file=sys.stderr)
    for _ in range(args.repeat):
        home = Path(tempfile.mkdtemp(prefix="bench-local-stack-"))
        try:
            times["staged up (cold) to UI"].append(up_until_ui(home))
            _staged(home, "down")
            times["staged up (warm) to UI"].append(up_until_ui(home))
            _staged(home, "down")
            if not args.skip_demo:
                shutil.rmtree(home)
                times["bash scripts/demo.sh"].append(demo(home))
        finally:
            subprocess.run([str(STAGED), "down"], env=_env(home), cwd=REPO_ROOT, capture_output=True)
            shutil.rmtree(home, ignore_errors=True)
    print("| what | median s | runs s |\n|---|---:|---|")
    for what, values in times.items():
        if values:
            print(f"| {what} | {statistics.median(values):.1f} | {runs_text(values, 1)} |")
    print(f"\nload after: {load()} (1/5/15 min; 2 cores)")


if __name__ == "__main__":
    main()
