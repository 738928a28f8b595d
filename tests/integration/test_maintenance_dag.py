"""The generated ``staged_maintenance`` DAG under ``airflow dags test``, next to a refresh DAG whose
definition carries a partition TTL (real Airflow, Spark and metastore)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.staging.journal_files import FileJournal
from tests.fixtures.airflow_cli import REPO, staged_connection
from tests.integration.staged_helpers import build, snapshot, staged_table

DEFINITION = """
CREATE MATERIALIZED TABLE {db}.events
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd',
      'partition.expiration-time' = '7 d',
      'partition.expiration-check-interval' = '30 min')
FRESHNESS = INTERVAL '1' DAY
AS SELECT id, ds FROM {db}.source;
"""


def test_maintenance_dag_drops_what_a_refresh_dag_stored_with_its_ttl(
    airflow_cli, metastore, spark, tmp_path
):
    db = "md_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(db, metastore.warehouse)
    journal_dir = tmp_path / "journal"
    today = "date_format(current_date(), 'yyyy-MM-dd')"
    source = f"SELECT id, IF(id < 50, '2020-01-01', {today}) AS ds FROM range(100)"
    build(spark, staged_table(metastore, FileJournal(journal_dir), f"{db}.source", "create"), source)
    dags = tmp_path / "dags"
    (dags / "materialized").mkdir(parents=True)
    for name in ("materialized_tables.py", "staged_maintenance.py"):
        shutil.copy(REPO / "dags" / name, dags / name)
    (dags / "materialized" / "events.sql").write_text(DEFINITION.format(db=db))
    env = airflow_cli.env(
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_STAGED_DEFAULT=staged_connection(
            metastore.port, metastore.uri, journal_dir, metastore.warehouse
        ),
    )
    # A one-time refresh of every partition: ds=2020-01-01 is long past its 7 days.
    conf = json.dumps({"isPeriodic": False})
    result = airflow_cli.run("dags", "test", f"mt__{db}__events", "--conf", conf, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    with MetastoreClient(metastore.uri) as client:
        table = client.get_table(db, "events")
        assert table.parameters["partition.expiration-time"] == "7 d"
        assert table.parameters["partition.timestamp-formatter"] == "yyyy-MM-dd"  # from the date-formatter
        assert len(client.partitions(db, "events")) == 2

    dry = airflow_cli.staged("expire", f"{db}.events", "--dry-run", env=env)
    assert dry.returncode == 0, dry
    assert f"would drop {db}.events ds=2020-01-01 (" in dry.stdout
    assert "would drop 1 partition(s)" in dry.stdout
    with MetastoreClient(metastore.uri) as client:
        assert len(client.partitions(db, "events")) == 2  # a dry run changes nothing

    result = airflow_cli.run("dags", "test", "staged_maintenance", env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"expiry {db}.events: dropped 1 partition(s) ['ds=2020-01-01']" in output, output[-4000:]
    assert "reconcile: nothing to do" in output and "sweep_versions:" in output
    with MetastoreClient(metastore.uri) as client:
        assert [p.values for p in client.partitions(db, "events")] != [] and all(
            p.values != ["2020-01-01"] for p in client.partitions(db, "events")
        )
    # The sweep covers every TTL table of the catalog (other tests' too): look at this one's.
    journal = FileJournal(journal_dir).records()
    dropped = [r for r in journal if r.kind == "hive_expire" and r.target == f"{db}.events"]
    assert [r.state.value for r in dropped] == ["COMMITTED"]


def test_rollback_task_commits_and_emits_its_asset_event(airflow_cli, metastore, spark, tmp_path):
    db = "rb_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(db, metastore.warehouse)
    target, journal = f"{db}.t", FileJournal(tmp_path / "journal")
    first = build(spark, staged_table(metastore, journal, target, "create"), "SELECT id FROM range(10)")
    build(spark, staged_table(metastore, journal, target, "replace"), "SELECT id FROM range(20)")
    env = airflow_cli.task_env(metastore, tmp_path / "journal", target)
    result = airflow_cli.run(
        "dags", "test", "staged_rollback", "--conf", json.dumps({"version": "nope"}), env=env
    )
    assert result.returncode != 0 and "unknown version 'nope'" in result.stdout + result.stderr
    assert snapshot(spark, target)[0] == 20  # nothing changed

    conf = json.dumps({"version": first.attempt_id})
    result = airflow_cli.run("dags", "test", "staged_rollback", "--conf", conf, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert snapshot(spark, target)[0] == 10
    rollbacks = [r for r in journal.records() if r.kind == "hive_rollback"]
    assert [r.state.value for r in rollbacks] == ["COMMITTED"] and rollbacks[
        0
    ].task.dag_id == "staged_rollback"
    with sqlite3.connect(airflow_cli.home / "airflow.db") as conn:
        extras = [json.loads(row[0]) for row in conn.execute("SELECT extra FROM asset_event")]
    event = next(e for e in extras if e.get("target") == target and "rollback" in e)
    assert event["version"] == first.attempt_id and event["rows"] == 10
