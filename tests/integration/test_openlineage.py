"""OpenLineage events of a real staged build (``airflow dags test``), captured by the file transport.

The provider's listener calls the operator's ``get_openlineage_facets_on_complete`` /
``_on_failure`` in the task process; the events are read back from the transport's file.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_staged.lineage import hive_namespace
from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptState

pytest.importorskip("airflow.providers.openlineage", reason="needs the [openlineage] extra")

JOB = "staged_operator.build"


def events(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e.get("job", {}).get("name") == JOB]


def run_build(airflow_cli, metastore, journal_dir: Path, target: str, sql: str, events_file: Path):
    transport = json.dumps({"type": "file", "log_file_path": str(events_file), "append": True})
    env = airflow_cli.task_env(metastore, journal_dir, target, STAGED_TEST_SQL=sql,
                               STAGED_TEST_PURPOSE="create_or_replace",
                               AIRFLOW__OPENLINEAGE__TRANSPORT=transport,
                               AIRFLOW__OPENLINEAGE__NAMESPACE="staged-tests")
    return airflow_cli.run("dags", "test", "staged_operator", env=env)


def test_lineage_of_create_overwrite_and_none_for_an_aborted_output(airflow_cli, spark, metastore, tmp_path):
    database = "ol_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(database, metastore.warehouse)
    spark.createDataFrame([(i, f"v{i % 3}") for i in range(30)], "id bigint, v string") \
        .write.saveAsTable(f"{database}.src")
    target, journal_dir, events_file = f"{database}.t", tmp_path / "journal", tmp_path / "ol.jsonl"
    namespace = hive_namespace(metastore.uri)

    sql = f"SELECT v AS label, sum(id) AS total, upper(v) AS shout FROM {database}.src GROUP BY v"
    result = run_build(airflow_cli, metastore, journal_dir, target, sql, events_file)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (record,) = AttemptJournal(journal_dir).records()
    assert record.state is AttemptState.COMMITTED
    (complete,) = [e for e in events(events_file) if e["eventType"] == "COMPLETE"]
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [(namespace, f"{database}.src")]
    (output,) = complete["outputs"]
    assert (output["namespace"], output["name"]) == (namespace, target)
    stats = output["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (
        3, record.manifest["bytes"], len(record.manifest["files"]))
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["label", "total", "shout"]
    columns = output["facets"]["columnLineage"]["fields"]
    assert {c: [(f["name"], f["field"], f["transformations"][0]["subtype"]) for f in v["inputFields"]]
            for c, v in columns.items()} == {
        "label": [(f"{database}.src", "v", "IDENTITY")],
        "total": [(f"{database}.src", "id", "AGGREGATION")],
        "shout": [(f"{database}.src", "v", "TRANSFORMATION")],
    }

    # The job fails while it writes: the attempt is aborted and the FAIL event names the input
    # but no output (the table keeps its committed version, which the event does not touch).
    failing = f"SELECT id, CASE WHEN id = 29 THEN raise_error('boom') END AS x FROM {database}.src"
    result = run_build(airflow_cli, metastore, journal_dir, target, failing, events_file)
    assert result.returncode != 0
    failed = [r for r in AttemptJournal(journal_dir).records() if r.attempt_id != record.attempt_id]
    assert [r.state for r in failed] == [AttemptState.ABORTED]
    (fail,) = [e for e in events(events_file) if e["eventType"] == "FAIL"]
    assert [d["name"] for d in fail["inputs"]] == [f"{database}.src"]
    assert fail["outputs"] == []

    # A second successful build replaces the committed table: its COMPLETE event says OVERWRITE.
    result = run_build(airflow_cli, metastore, journal_dir, target, sql, events_file)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    changes = [[o["facets"]["lifecycleStateChange"]["lifecycleStateChange"] for o in e["outputs"]]
               for e in events(events_file) if e["eventType"] == "COMPLETE"]
    assert changes == [["CREATE"], ["OVERWRITE"]]
