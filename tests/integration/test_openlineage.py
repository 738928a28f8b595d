"""OpenLineage events of a real staged build (``airflow dags test``), captured by the file transport.

The provider's listener calls the operator's ``get_openlineage_facets_on_start`` /
``_on_complete`` / ``_on_failure`` in the task process; the events are read back from the
transport's file. The table's Airflow Asset and its dataset are one name, and a spark-submit
build passes its task's job and run to Spark as openlineage-spark's parent.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.lineage.datasets import hive_namespace, location_dataset
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from tests.fixtures.airflow_cli import REPO, staged_connection

pytest.importorskip("airflow.providers.openlineage", reason="needs the [openlineage] extra")

JOB = "staged_operator.build"
NAMESPACE = "staged-tests"
# What the OpenLineage provider's inject_parent_job_information_into_spark_properties sets.
PARENT_KEYS = (
    "spark.openlineage.parentJobNamespace",
    "spark.openlineage.parentJobName",
    "spark.openlineage.parentRunId",
)


def events(path: Path, job: str = JOB) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e.get("job", {}).get("name") == job]


def openlineage_env(events_file: Path) -> dict[str, str]:
    """The OpenLineage provider's settings: the file transport into ``events_file``."""
    transport = json.dumps({"type": "file", "log_file_path": str(events_file), "append": True})
    # The listener kills its emitting process after execution_timeout (10 s by default): on a
    # loaded 2-core machine a failed task's FAIL event once took longer and was never written.
    return {"AIRFLOW__OPENLINEAGE__TRANSPORT": transport, "AIRFLOW__OPENLINEAGE__NAMESPACE": NAMESPACE,
            "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "120"}


def run_build(airflow_cli, metastore, journal_dir: Path, target: str, sql: str, events_file: Path):
    env = airflow_cli.task_env(
        metastore,
        journal_dir,
        target,
        STAGED_TEST_SQL=sql,
        STAGED_TEST_PURPOSE="create_or_replace",
        **openlineage_env(events_file),
    )
    return airflow_cli.run("dags", "test", "staged_operator", env=env)


def asset_uris(airflow_cli, dag_id: str, name: str) -> set[str]:
    """The URIs of the assets of table ``name`` (``db.table``) that ``dag_id``'s tasks emitted
    events for (an asset is named by its URI, ``hive://<host>:<port>/<db>/<table>``)."""
    database, table = name.split(".")
    with sqlite3.connect(airflow_cli.home / "airflow.db") as db:
        rows = db.execute(
            "SELECT asset.uri FROM asset_event JOIN asset ON asset.id = asset_event.asset_id "
            "WHERE asset_event.source_dag_id = ? AND asset.uri LIKE ?",
            (dag_id, f"hive://%/{database}/{table}"),
        )
        return {uri for (uri,) in rows}


def joined(dataset: dict[str, Any]) -> str:
    """A Hive dataset's namespace and name as one URI, joined as the asset's is."""
    return f"{dataset['namespace']}/{dataset['name'].replace('.', '/')}"


def test_lineage_of_create_overwrite_and_none_for_an_aborted_output(airflow_cli, spark, metastore, tmp_path):
    database = "ol_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(database, metastore.warehouse)
    spark.createDataFrame([(i, f"v{i % 3}") for i in range(30)], "id bigint, v string").write.saveAsTable(
        f"{database}.src"
    )
    target, journal_dir, events_file = f"{database}.t", tmp_path / "journal", tmp_path / "ol.jsonl"
    namespace = hive_namespace(metastore.uri)

    sql = f"SELECT v AS label, sum(id) AS total, upper(v) AS shout FROM {database}.src GROUP BY v"
    result = run_build(airflow_cli, metastore, journal_dir, target, sql, events_file)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (record,) = FileJournal(journal_dir).records()
    assert record.state is AttemptState.COMMITTED
    # START names what the build is about to read and write.
    (start,) = [e for e in events(events_file) if e["eventType"] == "START"]
    assert [(d["namespace"], d["name"]) for d in start["inputs"]] == [(namespace, f"{database}.src")]
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [(namespace, target)]
    (complete,) = [e for e in events(events_file) if e["eventType"] == "COMPLETE"]
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [(namespace, f"{database}.src")]
    (output,) = complete["outputs"]
    assert (output["namespace"], output["name"]) == (namespace, target)
    # One name: the asset the task emitted its event for is the dataset, joined.
    assert asset_uris(airflow_cli, "staged_operator", target) == {joined(output)}
    assert output["facets"]["version"]["datasetVersion"] == record.attempt_id
    # The table is primary; openlineage-spark's name for this version is its directory.
    location = location_dataset(record.location)
    assert [(i["namespace"], i["name"], i["type"]) for i in output["facets"]["symlinks"]["identifiers"]] == [
        (namespace, target, "TABLE"),
        (location.namespace, location.name, "LOCATION"),
    ]
    stats = output["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (
        3,
        record.manifest["bytes"],
        len(record.manifest["files"]),
    )
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["label", "total", "shout"]
    columns = output["facets"]["columnLineage"]["fields"]
    assert {
        c: [(f["name"], f["field"], f["transformations"][0]["subtype"]) for f in v["inputFields"]]
        for c, v in columns.items()
    } == {
        "label": [(f"{database}.src", "v", "IDENTITY")],
        "total": [(f"{database}.src", "id", "AGGREGATION")],
        "shout": [(f"{database}.src", "v", "TRANSFORMATION")],
    }

    # The job fails while it writes: the attempt is aborted and the FAIL event names the input
    # but no output (the table keeps its committed version, which the event does not touch).
    failing = f"SELECT id, CASE WHEN id = 29 THEN raise_error('boom') END AS x FROM {database}.src"
    result = run_build(airflow_cli, metastore, journal_dir, target, failing, events_file)
    assert result.returncode != 0
    failed = [r for r in FileJournal(journal_dir).records() if r.attempt_id != record.attempt_id]
    assert [r.state for r in failed] == [AttemptState.ABORTED]
    (fail,) = [e for e in events(events_file) if e["eventType"] == "FAIL"]
    assert [d["name"] for d in fail["inputs"]] == [f"{database}.src"]
    assert fail["outputs"] == []
    # OVERWRITE (a commit that supersedes a version) is asserted by the refresh test below: the
    # same reporting code, without a third ~40 s `dags test` run here.


EVENTS_DEFINITION = """
CREATE MATERIALIZED TABLE {db}.events
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd',
      'partition.expiration-time' = '7 d',
      'engine' = 'connect')
FRESHNESS = INTERVAL '1' DAY
AS SELECT id, IF(id = 999, raise_error('bad row'), ds) AS ds FROM {db}.src;
"""


def test_lineage_of_refresh_tasks_and_of_the_maintenance_expiry(
    airflow_cli, spark, metastore, spark_gateway, staged_home, tmp_path
):
    """A refresh DAG's task (CREATE, then OVERWRITE of its partitions; nothing for an aborted one)
    and the maintenance DAG's expiry (DROP of the expired partition), as the file transport got them.
    The refreshes run on the session's gateway (found under its STAGED_HOME): the lineage is the
    task's, whatever the engine, and a task then starts no Spark of its own."""
    db = "oll_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(db, metastore.warehouse)
    today = "date_format(current_date(), 'yyyy-MM-dd')"
    source = f"SELECT id, IF(id < 40, '2020-01-01', {today}) AS ds FROM range(100)"
    spark.sql(f"CREATE TABLE {db}.src USING parquet AS {source}")
    dags = tmp_path / "dags"
    (dags / "materialized").mkdir(parents=True)
    for name in ("materialized_tables.py", "staged_maintenance.py"):
        shutil.copy(REPO / "dags" / name, dags / name)
    (dags / "materialized" / "events.sql").write_text(EVENTS_DEFINITION.format(db=db))
    journal_dir, events_file = tmp_path / "journal", tmp_path / "ol.jsonl"
    env = airflow_cli.env(
        STAGED_HOME=str(staged_home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_STAGED_DEFAULT=staged_connection(
            metastore.port, metastore.uri, journal_dir, metastore.warehouse
        ),
        **openlineage_env(events_file),
    )
    namespace, dag_id = hive_namespace(metastore.uri), f"mt__{db}__events"

    def refresh() -> Any:
        return airflow_cli.run("dags", "test", dag_id, "--conf", json.dumps({"isPeriodic": False}), env=env)

    for _ in range(2):  # creates the table, then overwrites its partitions
        result = refresh()
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    spark.sql(f"INSERT INTO {db}.src VALUES (999, '2020-01-01')")  # the next refresh fails writing
    assert refresh().returncode != 0
    records = FileJournal(journal_dir).records()
    refreshes = sorted((r for r in records if r.target == f"{db}.events"), key=lambda r: r.created_at)
    assert [r.state for r in refreshes] == [AttemptState.COMMITTED] * 2 + [AttemptState.ABORTED]

    completes = [e for e in events(events_file, f"{dag_id}.refresh") if e["eventType"] == "COMPLETE"]
    assert len(completes) == 2
    for event, record, change in zip(completes, refreshes[:2], ["CREATE", "OVERWRITE"], strict=True):
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [(namespace, f"{db}.src")]
        (output,) = event["outputs"]
        assert (output["namespace"], output["name"]) == (namespace, f"{db}.events")
        assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == change
        assert output["facets"]["version"]["datasetVersion"] == record.attempt_id
        stats = output["outputFacets"]["outputStatistics"]
        assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (
            100,
            record.manifest["bytes"],
            len(record.manifest["files"]),
        )
        written = output["outputFacets"]["subset"]["outputCondition"]["partitions"]
        assert sorted(p["identifier"] for p in written)[0] == "ds=2020-01-01" and len(written) == 2
    (fail,) = [e for e in events(events_file, f"{dag_id}.refresh") if e["eventType"] == "FAIL"]
    assert [d["name"] for d in fail["inputs"]] == [f"{db}.src"] and fail["outputs"] == []
    assert asset_uris(airflow_cli, dag_id, f"{db}.events") == {joined(output)}

    result = airflow_cli.run("dags", "test", "staged_maintenance", env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    (expiry,) = [
        e for e in events(events_file, "staged_maintenance.expire_partitions") if e["eventType"] == "COMPLETE"
    ]
    # The sweep covers every TTL table of the catalog (other tests' too): this table's output.
    (dropped,) = [o for o in expiry["outputs"] if o["name"] == f"{db}.events"]
    assert dropped["namespace"] == namespace
    assert dropped["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "DROP"
    partitions = dropped["outputFacets"]["subset"]["outputCondition"]["partitions"]
    assert [(p["identifier"], p["dimensions"]) for p in partitions] == [
        ("ds=2020-01-01", {"ds": "2020-01-01"})
    ]
    assert "outputStatistics" not in dropped["outputFacets"]


def test_spark_submit_passes_the_task_run_as_openlineage_spark_parent(
    airflow_cli, spark_cluster, spark, metastore, tmp_path
):
    """With ``[openlineage] spark_inject_parent_job_info`` (as for the Spark provider's operator)
    the spark-submit command carries the task's OpenLineage job and run: the run of its events."""
    from tests.integration.test_spark_submit import dags_test_env

    database = "olsub_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {database}")
    target, events_file = f"{database}.t", tmp_path / "ol.jsonl"
    env = dags_test_env(
        airflow_cli,
        spark_cluster,
        metastore,
        tmp_path / "journal",
        target,
        "SELECT id FROM range(10)",
        "create",
        uuid.uuid4().hex,
    )
    env.update(openlineage_env(events_file), AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO="true")

    result = airflow_cli.run("dags", "test", "staged_spark_submit", env=env)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    (command,) = [line for line in output.splitlines() if "Spark-Submit cmd" in line]
    passed = dict(re.findall(r"--conf (spark\.openlineage\.\w+)=(\S+)", command))
    job = "staged_spark_submit.build"
    (start,) = [e for e in events(events_file, job) if e["eventType"] == "START"]
    (complete,) = [e for e in events(events_file, job) if e["eventType"] == "COMPLETE"]
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert {key: passed.get(key) for key in PARENT_KEYS} == {
        "spark.openlineage.parentJobNamespace": NAMESPACE,
        "spark.openlineage.parentJobName": job,
        "spark.openlineage.parentRunId": complete["run"]["runId"],
    }
    (written,) = complete["outputs"]
    assert asset_uris(airflow_cli, "staged_spark_submit", target) == {joined(written)}
