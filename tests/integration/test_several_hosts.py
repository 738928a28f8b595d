"""Tables on object storage built by Airflow workers on two hosts (``tests/fixtures/hosts.py``):
no state on any one worker's disk.

Two Celery workers, each in a network namespace of its own with its own directories, share only
the metastore, the S3 server, Airflow's database and the journal on PostgreSQL. CTAS builds and
partition refreshes land on both hosts; a host killed mid-commit (every process in its
namespace, SIGKILL) is reconciled from the other (the maintenance DAG's run there, once the
attempt's heartbeat expired); a host whose cable is pulled mid-commit and
plugged back ends exact too. Mid-commit is the ``publish`` pause point (``staging/faults.py``):
the attempt is WRITTEN, its journal lock held, its catalog call not yet made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.reader import read_table
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.journal_postgres import PostgresJournal
from tests.fixtures.hosts import Cluster, Host
from tests.fixtures.s3 import listed_entries
from tests.integration.test_mt_workflow_e2e import RUN_TIMEOUT
from tests.integration.test_mt_workflow_e2e import Rest as WorkflowRest

pytestmark = pytest.mark.slow

CTAS_DAG = "staged_operator"  # tests/dags/staged_test_dags.py, building raw.orders
REFRESH_DAG = "mt__analytics__orders_daily"
MAINTENANCE_DAG = "staged_maintenance"  # dags/staged_maintenance.py: reconcile, expiry, sweeps
ATTEMPT_TTL = 20.0  # seconds: the connection's attempt_ttl_minutes
TARGET = "raw.orders"
ENDED = (AttemptState.COMMITTED, AttemptState.ABORTED)


class Rest(WorkflowRest):
    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger ``dag_id`` once parsed (unpaused); return the run id without waiting."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while self.dag(dag_id).status_code != 200:
            assert time.monotonic() < deadline, f"DAG {dag_id} not parsed within {RUN_TIMEOUT}s"
            time.sleep(1)
        self.http.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        run = self.http.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        return run.raise_for_status().json()["dag_run_id"]


@pytest.fixture(scope="module")
def rest(cluster: Cluster) -> Iterator[Rest]:
    client = Rest(cluster.airflow)
    yield client
    client.http.close()


@pytest.fixture(scope="module")
def journal(cluster: Cluster) -> PostgresJournal:
    return PostgresJournal(cluster.postgres.url(), cluster.journal_schema)


def hostname(cluster: Cluster, dag_id: str, run_id: str) -> str | None:
    with cluster.database("airflow") as db:
        row = db.execute(
            "SELECT hostname FROM task_instance WHERE dag_id = %s AND run_id = %s", (dag_id, run_id)
        ).fetchone()
    return row[0] if row and row[0] else None


def start_on(cluster: Cluster, rest: Rest, host: Host, dag_id: str, conf: dict | None = None) -> str:
    """Trigger a run whose task lands on ``host``: only its worker consumes until the task started."""
    cluster.only(host)
    try:
        run_id = rest.trigger(dag_id, conf)
        deadline = time.monotonic() + RUN_TIMEOUT
        while hostname(cluster, dag_id, run_id) is None:
            assert time.monotonic() < deadline, f"{dag_id} {run_id} did not start on {host.address}"
            time.sleep(0.5)
    finally:
        cluster.everyone()
    assert hostname(cluster, dag_id, run_id) == host.address
    return run_id


def served_run(cluster: Cluster) -> str:
    """The run whose build raw.orders serves: all 30 rows name one run."""
    snapshot = read_table(cluster.metastore.uri, TableIdentifier.parse(TARGET), limit=100)
    runs = {dict(zip(snapshot.columns, row, strict=True))["run_id"] for row in snapshot.rows}
    assert snapshot.total_rows == 30 and len(runs) == 1, (snapshot.total_rows, runs)
    return runs.pop()


def records(journal: PostgresJournal) -> list[AttemptRecord]:
    return [record for record in journal.records() if record.target == TARGET]


def assert_exact(cluster: Cluster, journal: PostgresJournal, runs: set[str]) -> str:
    """raw.orders serves exactly one of ``runs``' builds, its directory is there, no directory
    is an orphan (each is the live one or a committed version), every attempt has ended."""
    served = served_run(cluster)
    assert served in runs, (served, runs)
    found = records(journal)
    assert all(record.state in ENDED for record in found), [(r.attempt_id, r.state) for r in found]
    with MetastoreClient(cluster.metastore.uri) as client:
        live = client.get_table("raw", "orders").sd.location.rstrip("/").rsplit("/", 1)[1]
    versions = listed_entries(f"{cluster.warehouse}/raw.db/orders")
    committed = {f"_v={r.attempt_id}" for r in found if r.state is AttemptState.COMMITTED}
    assert live in versions and live in committed, (live, versions)
    assert versions <= committed, f"orphans: {versions - committed}"
    return served


def arm(host: Host) -> None:
    (host.pause_dir / "publish").touch()
    (host.pause_dir / "publish.reached").unlink(missing_ok=True)


def wait_reached(host: Host) -> int:
    """Until a process of ``host`` waits at the pause point; its pid, checked to be there."""
    reached = host.pause_dir / "publish.reached"
    deadline = time.monotonic() + RUN_TIMEOUT
    while not reached.exists() or not reached.read_text():
        assert time.monotonic() < deadline, f"no commit reached the pause point on {host.address}"
        time.sleep(0.2)
    pid = int(reached.read_text())
    assert pid in host.processes(), f"{pid} is not in {host.namespace}"
    return pid


def open_attempt(journal: PostgresJournal) -> AttemptRecord:
    (record,) = [record for record in records(journal) if record.state not in ENDED]
    assert record.state is AttemptState.WRITTEN
    return record


def reconcile_on(cluster: Cluster, host: Host) -> list[dict[str, str]]:
    done = cluster.staged(host, "reconcile", "--output", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    # Airflow's log lines (the task-state lookup) come first on stdout: the JSON is the rest.
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("["))
    return json.loads("\n".join(lines[start:]))


def settle_from(cluster: Cluster, journal: PostgresJournal, host: Host, attempt_id: str) -> list[dict]:
    """``staged reconcile`` on ``host`` once the attempt's heartbeat is older than the TTL."""
    record = journal.get(attempt_id)
    assert record is not None
    time.sleep(max(0.0, record.heartbeat_at + ATTEMPT_TTL + 1 - journal.now()))
    return reconcile_on(cluster, host)


def test_builds_and_refreshes_land_on_both_hosts(cluster: Cluster, rest: Rest, journal) -> None:
    first, second = cluster.hosts
    created = cluster.staged(first, "create-database", "raw", "analytics")
    assert created.returncode == 0 and "database raw: created" in created.stdout, created

    built = start_on(cluster, rest, first, CTAS_DAG)
    assert rest.wait_for_run(CTAS_DAG, built)["state"] == "success"
    # A replace on one host while the other refreshes a partition from the table.
    replaced = start_on(cluster, rest, second, CTAS_DAG)
    refresh = {"isPeriodic": False, "staticPartitions": {"ds": "2024-01-01"}}
    refreshed = start_on(cluster, rest, first, REFRESH_DAG, refresh)
    assert rest.wait_for_run(CTAS_DAG, replaced)["state"] == "success"
    assert rest.wait_for_run(REFRESH_DAG, refreshed)["state"] == "success"
    refresh = {"isPeriodic": False, "staticPartitions": {"ds": "2024-01-02"}}
    refreshed_again = start_on(cluster, rest, second, REFRESH_DAG, refresh)
    assert rest.wait_for_run(REFRESH_DAG, refreshed_again)["state"] == "success"

    assert {hostname(cluster, CTAS_DAG, run) for run in (built, replaced)} == {first.address, second.address}
    assert {hostname(cluster, REFRESH_DAG, run) for run in (refreshed, refreshed_again)} == {
        first.address,
        second.address,
    }
    assert assert_exact(cluster, journal, {built, replaced}) == replaced
    daily = read_table(cluster.metastore.uri, TableIdentifier.parse("analytics.orders_daily"), limit=10)
    assert daily.location.startswith(f"{cluster.warehouse}/analytics.db/")
    assert sorted(daily.partition_rows) == ["ds=2024-01-01", "ds=2024-01-02"]
    orders = {row[daily.columns.index("ds")]: row[daily.columns.index("orders")] for row in daily.rows}
    assert orders == {"2024-01-01": 10, "2024-01-02": 10}
    # Nothing of it on either host's disk: each one's STAGED_HOME holds no journal.
    assert not any((host.root / "staged" / "journal").exists() for host in cluster.hosts)


def test_a_host_killed_mid_commit_is_reconciled_from_the_other(cluster: Cluster, rest: Rest, journal) -> None:
    victim, survivor = cluster.hosts
    before = served_run(cluster)
    arm(victim)
    run_id = start_on(cluster, rest, victim, CTAS_DAG)
    wait_reached(victim)
    attempt = open_attempt(journal)
    assert attempt.task is not None and attempt.task.run_id == run_id

    killed = victim.kill_all()
    assert killed and not victim.processes()
    # The maintenance DAG's reconcile, run by the other host's worker once the heartbeat expired.
    time.sleep(max(0.0, attempt.heartbeat_at + ATTEMPT_TTL + 1 - journal.now()))
    maintenance = start_on(cluster, rest, survivor, MAINTENANCE_DAG)
    try:
        assert rest.wait_for_run(MAINTENANCE_DAG, maintenance)["state"] == "success"
    finally:
        rest.http.patch(f"/dags/{MAINTENANCE_DAG}", json={"is_paused": True}).raise_for_status()
    ended = journal.get(attempt.attempt_id)
    assert ended is not None and ended.state is AttemptState.ABORTED
    assert assert_exact(cluster, journal, {before}) == before
    # The host comes back: its worker takes tasks again.
    cluster.start_worker(victim)


def test_a_host_cut_off_mid_commit_ends_exact(cluster: Cluster, rest: Rest, journal) -> None:
    host, other = cluster.hosts[1], cluster.hosts[0]
    before = served_run(cluster)
    arm(host)
    run_id = start_on(cluster, rest, host, CTAS_DAG)
    wait_reached(host)
    attempt = open_attempt(journal)
    host.link(up=False)
    try:
        (host.pause_dir / "publish").unlink()  # the commit goes on, towards a dead network
        time.sleep(10)
    finally:
        host.link(up=True)
    rest.wait_for_run(CTAS_DAG, run_id)
    if journal.get(attempt.attempt_id).state not in ENDED:
        settle_from(cluster, journal, other, attempt.attempt_id)
    served = assert_exact(cluster, journal, {before, run_id})
    ended = journal.get(attempt.attempt_id)
    expected = AttemptState.COMMITTED if served == run_id else AttemptState.ABORTED
    assert ended is not None and ended.state is expected, (served, ended)
