"""Chain latency on the README's stack: an upstream commit -> the downstream refresh started.

The stack of ``bench_click_to_commit`` (``staged up`` from the repository, the demo's
``analytics.orders_daily`` over a seeded ``raw.orders``) plus ``analytics.orders_report``, a
``FRESHNESS = DOWNSTREAM`` table that reads it. Each rep triggers a one-time refresh of one
``orders_daily`` partition asked to propagate (``refreshDownstream``, what ``staged mt refresh
--downstream`` and the page send), waits for both tables, and measures, on one clock:

* upstream COMMITTED (its attempt's journal record) -> the downstream DAG run's ``start_date``
  (Airflow's scheduler created it from the upstream's asset event and started it): the target,
  p50 <= 5 s;
* the same -> the downstream attempt BEGUN (its refresh task began writing), for context.

Run it alone on the machine (it starts the stack):
``.venv/bin/python benchmarks/bench_chain_latency.py`` (``--reps 3`` for a smoke run).
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime

from _common import latency_line, load
from bench_click_to_commit import DAG_ID, PARTITION, TABLE, ReadmeStack
from bench_local_stack import _staged as staged

from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState

TARGET_SECONDS = 5.0
REPORT = "analytics.orders_report"
REPORT_DAG_ID = "mt__analytics__orders_report"
REPORT_DEFINITION = f"""CREATE MATERIALIZED TABLE {REPORT}
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = DOWNSTREAM
AS SELECT ds, orders, revenue / orders AS average FROM {TABLE};
"""


class ChainStack(ReadmeStack):
    """The README's stack with a DOWNSTREAM table below the demo's."""

    def set_up(self) -> None:
        super().set_up()
        # A table reading a materialized one is created once that one exists (its first refresh).
        staged(self.home, "mt", "refresh", TABLE, "--partition", f"ds={PARTITION}", "--wait", "600")
        definition = self.home / "orders_report.sql"
        definition.write_text(REPORT_DEFINITION)
        staged(self.home, "mt", "create", str(definition))

    def commit_to_downstream(self) -> tuple[float, float]:
        """(seconds to the downstream run's start, to its attempt's BEGUN) after the upstream
        commit; waits until both tables' runs ended."""
        for dag_id in (DAG_ID, REPORT_DAG_ID):
            self.wait_idle(dag_id)
        before = {record.attempt_id for record in self.journal.records()}
        runs_before = {run["dag_run_id"] for run in self._runs(REPORT_DAG_ID)}
        conf = {"isPeriodic": False, "staticPartitions": {"ds": PARTITION}, "refreshDownstream": True}
        self._checked(self.http.post(f"/api/v2/dags/{DAG_ID}/dagRuns",
                                     json={"logical_date": None, "conf": conf}))
        upstream = self.ended_record(TABLE, before)
        downstream = self.ended_record(REPORT, before)
        committed = _at(upstream, AttemptState.COMMITTED)
        self.wait_idle(REPORT_DAG_ID)
        (run,) = [run for run in self._runs(REPORT_DAG_ID) if run["dag_run_id"] not in runs_before]
        started = datetime.fromisoformat(run["start_date"]).timestamp()
        return started - committed, _at(downstream, AttemptState.BEGUN) - committed

    def ended_record(self, table: str, before: set[str]) -> AttemptRecord:
        """The new attempt on ``table``, once COMMITTED (any other end stops the benchmark)."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            for record in self.journal.records():
                if record.target == table and record.attempt_id not in before and record.state.ended:
                    if record.state is not AttemptState.COMMITTED:
                        raise SystemExit(f"refresh of {table} ended {record.state}: {record.error}")
                    return record
            time.sleep(0.05)
        raise SystemExit(f"no refresh of {table} committed within 600 s")

    def _runs(self, dag_id: str) -> list[dict]:
        return self.http.get(f"/api/v2/dags/{dag_id}/dagRuns").raise_for_status().json()["dag_runs"]


def _at(record: AttemptRecord, state: AttemptState) -> float:
    return next(at for name, at in record.history if name == state.value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=12, help="counted reps (after one warm-up)")
    args = parser.parse_args()
    print(f"load average {load()}", flush=True)
    stack = ChainStack()
    try:
        stack.commit_to_downstream()  # warm-up: the first task of each DAG waits for the forkserver
        pairs = [stack.commit_to_downstream() for _ in range(args.reps)]
    finally:
        stack.close()
    print(f"upstream commit -> downstream refresh, one partition down a two-table chain on the README's "
          f"stack, {args.reps} reps; load average {load()}")
    print(latency_line("run started", [p[0] for p in pairs], TARGET_SECONDS))
    print(latency_line("attempt BEGUN", [p[1] for p in pairs]))

if __name__ == "__main__":
    main()
