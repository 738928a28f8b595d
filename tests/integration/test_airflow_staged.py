"""The Airflow task lifecycle as the job-status hook, through real ``airflow dags test`` runs.

Faults are real: the metastore becomes unreachable (a proxy stops listening), the task
process gets SIGTERM or SIGKILL, the task times out.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3

import pytest

from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from tests.fixtures.tcp_proxy import BudgetProxy
from tests.integration.staged_helpers import (
    assert_aborted_unwritten,
    build,
    expected_snapshot,
    part_files,
    snapshot,
    staged_table,
    stop_group,
    version_dirs,
    wait_for_part_files,
    wait_until_group_gone,
)

SQL_V1 = "SELECT id, concat('v1-', id) AS label FROM range(5000)"
SQL_V2 = "SELECT id, concat('v2-', id) AS label FROM range(7000)"
# Each row sleeps 50 ms inside a Spark write task (the projection runs after the shuffle, in the
# stage that writes): the job writes its part files for about 50 s, long enough to be killed.
SQL_SLOW = (
    "SELECT id, reflect('java.lang.Thread', 'sleep', 50L) AS z "
    "FROM (SELECT /*+ REPARTITION(2) */ id FROM range(2000)) AS shuffled"
)
# Four times as long (~200 s of writing), for a timeout that fires while it writes: the timeout
# also covers the Spark session's start-up (28 s before the first part file with two such jobs on
# the 2 cores, with the suite's C1-only JVMs), so it leaves a margin of about as much again.
SQL_SLOWER = SQL_SLOW.replace("range(2000)", "range(8000)")
TIMEOUT = 75
# The metastore connections our client makes before the commit: begin reads the target once
# (the staging location comes from the same read). The commit would reuse that connection; the
# proxy cuts it while the Spark job runs (idle), so the commit finds the metastore gone.
CONNECTIONS_BEFORE_COMMIT = 1


@pytest.fixture
def journal_dir(tmp_path):
    return tmp_path / "journal"


def _env(airflow_cli, metastore, journal_dir, target, sql, port=None, **extra):
    return airflow_cli.task_env(metastore, journal_dir, target, port, STAGED_TEST_SQL=sql, **extra)


def _records(journal_dir, target):
    return [r for r in FileJournal(journal_dir).records() if r.target == target]


def _seed_v1(spark, metastore, journal_dir, target):
    build(spark, staged_table(metastore, FileJournal(journal_dir), target, "create"), SQL_V1)
    return snapshot(spark, target)


def test_dags_test_commits_and_emits_asset_event(airflow_cli, spark, metastore, journal_dir, target):
    env = _env(airflow_cli, metastore, journal_dir, target, SQL_V1, STAGED_TEST_PURPOSE="create")
    result = airflow_cli.run("dags", "test", "staged_operator", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    assert [r.state for r in _records(journal_dir, target)] == [AttemptState.COMMITTED]
    with sqlite3.connect(airflow_cli.home / "airflow.db") as db:
        extras = [json.loads(row[0]) for row in db.execute("SELECT extra FROM asset_event")]
    event = next(e for e in extras if e.get("target") == target)
    assert event["rows"] == 5000 and event["version"] == _records(journal_dir, target)[0].attempt_id


def test_audits_in_dags_test_report_and_quarantine(airflow_cli, spark, metastore, journal_dir, target):
    """A build that passes its audits (one warn failing) emits them in its asset event; one whose
    fail audit fails leaves its table as it was, its version quarantined (the failure callback
    does not discard it) and its error naming the audit."""
    second = f"{target}_b"
    before = _seed_v1(spark, metastore, journal_dir, second)
    env = _env(airflow_cli, metastore, journal_dir, target, SQL_V1, STAGED_TEST_TARGET_2=second)
    result = airflow_cli.run("dags", "test", "staged_audits", env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert f"audit(s) failed on {second}: few_rows (condition false)" in output, output[-3000:]
    assert "audit labelled [row, warn]: failed (warn: published), 1 failing" in output, output[-3000:]
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    assert snapshot(spark, second) == before
    (failed,) = [r for r in _records(journal_dir, second) if r.state is not AttemptState.COMMITTED]
    assert failed.state is AttemptState.WRITTEN and failed.audits["verdict"] == "quarantined"
    assert any(d.endswith(failed.attempt_id) for d in version_dirs(metastore, second))
    with sqlite3.connect(airflow_cli.home / "airflow.db") as db:
        extras = [json.loads(row[0]) for row in db.execute("SELECT extra FROM asset_event")]
    event = next(e for e in extras if e.get("target") == target)
    audits = {a["name"]: (a["passed"], a["failing"], a["value"]) for a in event["audits"]}
    assert audits == {"labelled": (False, 1, None), "id.unique_check": (True, None, 0),
                      "id.null_check": (True, None, 0)}


def test_metastore_unreachable_at_commit_then_retry(airflow_cli, spark, metastore, journal_dir, target):
    before = _seed_v1(spark, metastore, journal_dir, target)
    proxy = BudgetProxy(metastore.port, budget=CONNECTIONS_BEFORE_COMMIT)
    try:
        env = _env(airflow_cli, metastore, journal_dir, target, SQL_V2, port=proxy.port)
        failed = airflow_cli.run("dags", "test", "staged_operator", env=env)
    finally:
        proxy.close()
    assert "cannot reach the Hive Metastore" in failed.stdout + failed.stderr
    assert snapshot(spark, target) == before
    stuck = [r for r in _records(journal_dir, target) if r.state is AttemptState.WRITTEN]
    assert len(stuck) == 1  # written, never committed; the abort could not reach the metastore either

    retry = airflow_cli.run(
        "dags", "test", "staged_operator", env=_env(airflow_cli, metastore, journal_dir, target, SQL_V2)
    )
    assert retry.returncode == 0, retry.stdout[-3000:]
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V2)

    env = _env(airflow_cli, metastore, journal_dir, target, SQL_V2)
    reconciled = airflow_cli.staged("reconcile", env=env)
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert FileJournal(journal_dir).require(stuck[0].attempt_id).state is AttemptState.ABORTED
    assert not any(d.endswith(stuck[0].attempt_id) for d in version_dirs(metastore, target))


def test_callbacks_form_commit_raises_then_reconcile_commits(
    airflow_cli, spark, metastore, journal_dir, target
):
    proxy = BudgetProxy(metastore.port, budget=CONNECTIONS_BEFORE_COMMIT)
    try:
        env = _env(
            airflow_cli, metastore, journal_dir, target, SQL_V1, port=proxy.port, STAGED_TEST_PURPOSE="create"
        )
        result = airflow_cli.run("dags", "test", "staged_callbacks", env=env)
    finally:
        proxy.close()
    output = result.stdout + result.stderr
    assert "cannot reach the Hive Metastore" in output  # Airflow only logged the callback's error
    assert snapshot(spark, target) is None  # never half-visible
    assert [r.state for r in _records(journal_dir, target)] == [AttemptState.WRITTEN]

    env = _env(airflow_cli, metastore, journal_dir, target, SQL_V1)
    reconciled = airflow_cli.staged("reconcile", env=env)
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert "committed" in reconciled.stdout
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)


def _assert_killed_attempt_discarded(metastore, journal_dir, target, kill, before_dirs, reason):
    """The attempt seen writing at the kill point is ABORTED (for ``reason`` unless None), its
    directory (which held part files then) is gone, and the table's version directories are
    what they were."""
    record = FileJournal(journal_dir).require(kill.record.attempt_id)
    assert record.state is AttemptState.ABORTED
    assert_aborted_unwritten(record)
    if reason is not None:
        assert record.error == reason
    assert not kill.directory.exists(), f"{kill.directory} left behind: {part_files(kill.directory)}"
    assert version_dirs(metastore, target) == before_dirs
    assert [r.attempt_id for r in _records(journal_dir, target) if not r.state.ended] == []


def test_sigterm_while_spark_job_runs_aborts(airflow_cli, spark, metastore, journal_dir, target, tmp_path):
    before = _seed_v1(spark, metastore, journal_dir, target)
    before_dirs = version_dirs(metastore, target)
    env = _env(airflow_cli, metastore, journal_dir, target, SQL_SLOW)
    log_path = tmp_path / "dags-test.log"
    process = airflow_cli.start("dags", "test", "staged_operator", env=env, log_path=log_path)
    try:
        kill = wait_for_part_files(FileJournal(journal_dir), target, process)
        assert kill.files and all(f.startswith("_temporary/") for f in kill.files), kill.files
        os.kill(process.pid, signal.SIGTERM)
        returncode = process.wait(timeout=180)
        left = wait_until_group_gone(process.pid)
    finally:
        stop_group(process)
    log = log_path.read_text()
    assert returncode != 0, log[-3000:]
    assert "task was killed" in log or "cancelled" in log.lower(), log[-3000:]
    assert left == [], f"processes of the killed task still running: {left}"
    _assert_killed_attempt_discarded(metastore, journal_dir, target, kill, before_dirs, "task killed")
    assert snapshot(spark, target) == before


def test_timeout_aborts(airflow_cli, spark, metastore, journal_dir, target, tmp_path):
    before = _seed_v1(spark, metastore, journal_dir, target)
    before_dirs = version_dirs(metastore, target)
    env = _env(
        airflow_cli, metastore, journal_dir, target, SQL_SLOWER, STAGED_TEST_TIMEOUT_SECONDS=str(TIMEOUT)
    )
    log_path = tmp_path / "dags-test.log"
    process = airflow_cli.start("dags", "test", "staged_operator", env=env, log_path=log_path)
    try:
        # The kill point: the job is writing when Airflow's timeout fires (not during start-up).
        kill = wait_for_part_files(FileJournal(journal_dir), target, process, timeout=TIMEOUT + 120)
        returncode = process.wait(timeout=180)
        left = wait_until_group_gone(process.pid)
    finally:
        stop_group(process)
    log = log_path.read_text()
    assert returncode != 0, log[-3000:]
    assert "AirflowTaskTimeout" in log, log[-3000:]
    assert left == [], f"processes of the timed-out task still running: {left}"
    attempts = [r for r in _records(journal_dir, target) if r.purpose == "create_or_replace"]
    assert [r.attempt_id for r in attempts] == [kill.record.attempt_id]
    # The build's own failure handling aborts first (with the timeout as its reason), on_kill second.
    _assert_killed_attempt_discarded(metastore, journal_dir, target, kill, before_dirs, None)
    error = FileJournal(journal_dir).require(kill.record.attempt_id).error or ""
    assert error.startswith("job failed: AirflowTaskTimeout"), error
    assert snapshot(spark, target) == before


def test_sigkill_of_task_process_then_sweep(airflow_cli, spark, metastore, journal_dir, target, tmp_path):
    before = _seed_v1(spark, metastore, journal_dir, target)
    before_dirs = version_dirs(metastore, target)
    ttl_minutes = 10
    env = _env(
        airflow_cli, metastore, journal_dir, target, SQL_SLOW, conn_extra={"attempt_ttl_minutes": ttl_minutes}
    )
    log_path = tmp_path / "dags-test.log"
    process = airflow_cli.start("dags", "test", "staged_operator", env=env, log_path=log_path)
    try:
        kill = wait_for_part_files(FileJournal(journal_dir), target, process)
        os.killpg(process.pid, signal.SIGKILL)  # no callback can run
        process.wait(timeout=60)
        left = wait_until_group_gone(process.pid)
    finally:
        stop_group(process)
    assert left == [], f"processes of the killed task still running: {left}"
    journal = FileJournal(journal_dir)
    abandoned = journal.require(kill.record.attempt_id)
    assert abandoned.state is AttemptState.BEGUN
    assert part_files(kill.directory), "the killed job's files are the sweep's to delete"
    assert snapshot(spark, target) == before  # readers never saw the half-written attempt

    # Within the TTL the sweep leaves it alone...
    swept = airflow_cli.staged("reconcile", "--no-airflow", env=env)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert "left running" in swept.stdout and "expired" not in swept.stdout
    assert journal.require(abandoned.attempt_id).state is AttemptState.BEGUN
    # ...and expires it once its last heartbeat is older than the TTL (an injected clock).
    settings = StagedSettings(
        metastore.uri, metastore.warehouse, str(journal_dir), attempt_ttl_seconds=ttl_minutes * 60
    )
    actions = reconcile(settings, now=abandoned.heartbeat_at + ttl_minutes * 60 + 1)
    assert [(a.attempt_id, a.action) for a in actions] == [(abandoned.attempt_id, "expired")]
    _assert_killed_attempt_discarded(
        metastore, journal_dir, target, kill, before_dirs, "expired: no heartbeat within the attempt TTL"
    )
    assert snapshot(spark, target) == before


def test_non_atomic_path_when_disabled(airflow_cli, spark, metastore, journal_dir, target):
    env = _env(airflow_cli, metastore, journal_dir, target, SQL_V1, STAGED_TEST_ATOMIC="false")
    result = airflow_cli.run("dags", "test", "staged_operator", env=env)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "not atomic" in result.stdout + result.stderr
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    assert _records(journal_dir, target) == []
