"""What journal pruning saves a stream's readers of the journal, and what it costs (no Spark).

A CONTINUOUS table at 30 s freshness journals 2,880 sink records a day. Two journals of one
such stream, in temp directories: ``unbounded``, a day of ended ``hive_append`` records (each a
JSON file and its lock file, as the commit path leaves them), and ``pruned``, the same after
``staging.pruning.prune_journal`` (the last grace hour's records stay). Each rep times, in each
arm in alternating order (``_common.arm_order``):

- ``replay``: the records of one micro-batch (``journal.records(prefix)``, what
  ``settle_earlier_runs`` reads for a restarted run's first batch: a glob over the directory);
- ``full``: every record (``journal.records()``: the version sweep of the maintenance pass, the
  task callbacks' ``for_task``, reconcile's ``open_attempts``).

Printed: p50 per arm and operation, the paired ratios pruned/unbounded, and the cost of pruning:
the one-off prune of the day's journal, and one steady-state prune (100 new records beside the
kept ones, what every 100th micro-batch does) per micro-batch. Run:
``.venv/bin/python benchmarks/bench_journal_pruning.py --reps 30``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from _common import arm_order, load, paired_ratios, percentile_ms, stopwatch

from airflow_provider_staged.sink.recovery import PRUNE_EVERY_BATCHES, batch_prefix
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.pruning import prune_journal
from airflow_provider_staged.staging.settings import StagedSettings

INTERVAL = 30.0  # seconds between micro-batches
DAY_BATCHES = 2880
QUERY = "q0123456789abcdef"
ROOT = "file:/nonexistent/warehouse/db.db/live"


def write_records(journal_dir: Path, first: int, count: int, now: float) -> None:
    """Micro-batches ``first`` .. ``first + count - 1`` of one run, committed every INTERVAL seconds
    up to ``now`` (written directly: the commit path's fsyncs would only slow the set-up)."""
    journal_dir.mkdir(parents=True, exist_ok=True)
    last = first + count - 1
    for batch in range(first, first + count):
        attempt_id = f"{batch_prefix(QUERY, batch)}w0123456789abcdef"
        at = now - (last - batch) * INTERVAL
        record = AttemptRecord(
            attempt_id, "hive_append", "db.live", "create_or_replace", f"{ROOT}/_staging/{attempt_id}",
            catalog={"root": ROOT, "query_id": QUERY, "batch_id": batch}, state=AttemptState.COMMITTED,
            created_at=at, updated_at=at, heartbeat_at=at,
        )
        (journal_dir / f"{attempt_id}.json").write_text(record.to_json())
        (journal_dir / f"{attempt_id}.lock").touch()


def settings_at(journal_dir: Path) -> StagedSettings:
    return StagedSettings("thrift://127.0.0.1:9", "/nonexistent", str(journal_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-journal-pruning-"))
    try:
        now = time.time()
        unbounded, pruned = home / "unbounded", home / "pruned"
        write_records(unbounded, 0, DAY_BATCHES, now)
        shutil.copytree(unbounded, pruned)
        one_off = stopwatch(lambda: prune_journal(settings_at(pruned), now=now))
        kept = len(list(pruned.glob("*.json")))
        # Steady state: 100 more micro-batches beside the kept ones, then the prune of every 100th.
        steady = home / "steady"
        shutil.copytree(pruned, steady)
        write_records(steady, DAY_BATCHES, PRUNE_EVERY_BATCHES, now + PRUNE_EVERY_BATCHES * INTERVAL)
        steady_prune = stopwatch(
            lambda: prune_journal(settings_at(steady), now=now + PRUNE_EVERY_BATCHES * INTERVAL)
        )
        journals = {"unbounded": settings_at(unbounded).journal, "pruned": settings_at(pruned).journal}
        newest = batch_prefix(QUERY, DAY_BATCHES - 1)
        times: dict[tuple[str, str], list[float]] = {}
        print(f"{args.reps} reps, 2 arms; load {load()}", flush=True)
        for rep in range(args.reps + 1):  # rep 0: warm-up, not counted
            for arm in arm_order(list(journals), rep):
                journal = journals[arm]
                replay = stopwatch(lambda journal=journal: journal.records(newest))
                full = stopwatch(journal.records)
                if rep:
                    times.setdefault((arm, "replay"), []).append(replay)
                    times.setdefault((arm, "full"), []).append(full)
        print(f"records: unbounded {DAY_BATCHES} (a day at {INTERVAL:.0f} s), pruned {kept}")
        for operation in ("replay", "full"):
            mine, theirs = times[("pruned", operation)], times[("unbounded", operation)]
            print(f"{operation:6s} p50 ms: pruned {percentile_ms(mine, 0.5):8.2f}  "
                  f"unbounded {percentile_ms(theirs, 0.5):8.2f}")
            print(f"{operation:6s} pruned/unbounded: {paired_ratios(mine, theirs).describe()}")
        print(f"prune: one-off of the day's journal {one_off * 1000:.0f} ms; steady state "
              f"{steady_prune * 1000:.1f} ms every {PRUNE_EVERY_BATCHES} micro-batches = "
              f"{steady_prune * 1000 / PRUNE_EVERY_BATCHES:.2f} ms per micro-batch")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
