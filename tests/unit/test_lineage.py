"""Lineage of a staged attempt (pure): inputs and column origins by sqlglot, the committed output."""

from __future__ import annotations

import importlib.util

import pytest

from airflow_provider_staged.lineage.datasets import (
    AGGREGATION,
    CREATE,
    IDENTITY,
    OVERWRITE,
    TRANSFORMATION,
    ColumnOrigin,
    DatasetName,
    attempt_lineage,
    dropped,
    hive_namespace,
    location_dataset,
    planned_lineage,
    query_lineage,
)
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState

NS = "hive://127.0.0.1:9083"


def ds(name: str) -> DatasetName:
    return DatasetName(NS, name)


def test_namespace_follows_the_openlineage_naming_spec() -> None:
    assert hive_namespace("thrift://127.0.0.1:9083") == NS
    assert hive_namespace("thrift://metastore") == "hive://metastore:9083"


@pytest.mark.parametrize(
    ("location", "namespace", "name"),
    [  # as openlineage-java's FilesystemDatasetUtils.fromLocation names them
        ("file:/w/db.db/t/_v=1", "file", "/w/db.db/t/_v=1"),
        ("file:///w/db.db/t/_v=1/", "file", "/w/db.db/t/_v=1"),
        ("/w/t", "file", "/w/t"),
        ("s3a://bucket/w/t/_v=1/", "s3://bucket", "w/t/_v=1"),
        ("s3://bucket", "s3://bucket", "/"),
        ("gs://bucket/w/t", "gs://bucket", "w/t"),
        ("hdfs://namenode:8020/w/t/", "hdfs://namenode:8020", "/w/t"),
    ],
)
def test_a_location_is_named_as_openlineage_spark_names_it(location: str, namespace: str, name: str) -> None:
    assert location_dataset(location) == DatasetName(namespace, name)


def test_inputs_and_column_origins() -> None:
    sql = (
        "WITH a AS (SELECT id, v FROM raw.x) "
        "SELECT a.id, a.v * 2 AS v2, sum(c.amount) AS total, count(*) AS n "
        "FROM a JOIN customers c ON a.id = c.id GROUP BY a.id, a.v"
    )
    derived = query_lineage(sql, NS)
    assert derived.inputs == (ds("raw.x"), ds("default.customers"))  # the CTE is no input
    assert derived.columns == {
        "id": (ColumnOrigin(ds("raw.x"), "id", IDENTITY),),
        "v2": (ColumnOrigin(ds("raw.x"), "v", TRANSFORMATION),),
        "total": (ColumnOrigin(ds("default.customers"), "amount", AGGREGATION),),
    }  # count(*) reads no column


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM range(10)",  # a table function is no dataset
        "SELECT * FROM raw.t",  # no schema: '*' is not expanded
        "SELECT id FROM a JOIN b ON a.k = b.k",  # ambiguous without a schema
        "DELETE FROM raw.t",
        "SELECT ((",
    ],
)
def test_nothing_is_guessed(sql: str) -> None:
    assert query_lineage(sql, NS).columns == {}


def record(
    state: AttemptState, superseded: object, partition_columns: list[str] | None = None
) -> AttemptRecord:
    files = [
        {"path": "ds=2024-01-01/part-0.parquet", "rows": 2, "bytes": 10},
        {"path": "ds=2024-01-02/part-0.parquet", "rows": 1, "bytes": 5},
    ]
    manifest = {
        "location": "/w/t/_v=1",
        "columns": [["ds", "string"], ["orders", "bigint"]],
        "partition_columns": partition_columns or [],
        "files": files,
        "rows": 3,
        "bytes": 15,
    }
    return AttemptRecord(
        "a1",
        "hive_partitions",
        "db.t",
        "create_or_replace",
        "/w/t/_v=1",
        state=state,
        manifest=manifest,
        superseded_location=superseded,
    )


def test_committed_output_with_statistics_lifecycle_and_partitions() -> None:
    sql = "SELECT ds, count(*) AS orders FROM raw.orders GROUP BY ds"
    created = attempt_lineage(sql, NS, ds("db.t"), record(AttemptState.COMMITTED, None))
    (output,) = created.outputs
    assert (output.lifecycle, output.rows, output.bytes, output.files) == (CREATE, 3, 15, 2)
    # The version is the committed attempt; its directory is the table's location-based name.
    assert (output.version, output.location) == ("a1", DatasetName("file", "/w/t/_v=1"))
    assert output.schema == (("ds", "string"), ("orders", "bigint"))
    assert output.columns == {"ds": (ColumnOrigin(ds("raw.orders"), "ds", IDENTITY),)}
    assert created.inputs == (ds("raw.orders"),)

    refreshed = attempt_lineage(sql, NS, ds("db.t"), record(AttemptState.COMMITTED, [], ["ds"]))
    assert refreshed.outputs[0].lifecycle == OVERWRITE
    assert refreshed.outputs[0].partitions == ({"ds": "2024-01-01"}, {"ds": "2024-01-02"})


def test_a_jdbc_output_has_no_location() -> None:
    table = DatasetName("postgres://db:5432", "reports.public.t")
    (output,) = attempt_lineage(None, None, table, record(AttemptState.COMMITTED, None)).outputs
    assert (output.version, output.location) == ("a1", None)


def test_planned_lineage_names_the_inputs_and_the_target() -> None:
    planned = planned_lineage("SELECT ds, count(*) AS n FROM raw.orders GROUP BY ds", NS, ds("db.t"))
    assert planned.inputs == (ds("raw.orders"),)
    (output,) = planned.outputs
    assert output.dataset == ds("db.t") and (output.lifecycle, output.version, output.rows) == (None,) * 3


@pytest.mark.parametrize("state", [AttemptState.ABORTED, AttemptState.WRITTEN, AttemptState.BEGUN])
def test_uncommitted_attempt_reports_inputs_only(state: AttemptState) -> None:
    lineage = attempt_lineage("SELECT a FROM raw.s", NS, ds("db.t"), record(state, None))
    assert (lineage.inputs, lineage.outputs) == ((ds("raw.s"),), ())


@pytest.mark.skipif(
    importlib.util.find_spec("airflow.providers.openlineage") is None, reason="needs the [openlineage] extra"
)
def test_operator_lineage_facets() -> None:
    from openlineage.client.serde import Serde

    from airflow_provider_staged.lineage.openlineage import operator_lineage

    sql = "SELECT ds, count(*) AS orders FROM raw.orders GROUP BY ds"
    lineage = attempt_lineage(sql, NS, ds("db.t"), record(AttemptState.COMMITTED, [], ["ds"]))
    converted = operator_lineage(lineage)
    (output,) = [Serde.to_dict(o) for o in converted.outputs]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 3
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"
    assert output["facets"]["columnLineage"]["fields"]["ds"]["inputFields"][0]["name"] == "raw.orders"
    partitions = output["outputFacets"]["subset"]["outputCondition"]["partitions"]
    assert [p["identifier"] for p in partitions] == ["ds=2024-01-01", "ds=2024-01-02"]
    assert output["facets"]["version"]["datasetVersion"] == "a1"
    assert [(i["namespace"], i["name"], i["type"]) for i in output["facets"]["symlinks"]["identifiers"]] == [
        (NS, "db.t", "TABLE"),
        ("file", "/w/t/_v=1", "LOCATION"),
    ]
    drop = Serde.to_dict(
        operator_lineage(type(lineage)(outputs=(dropped(ds("db.t"), [{"ds": "2024-01-01"}]),))).outputs[0]
    )
    assert drop["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "DROP"
    assert operator_lineage(None) is None


@pytest.mark.skipif(
    importlib.util.find_spec("airflow.providers.openlineage") is None, reason="needs the [openlineage] extra"
)
def test_audits_of_a_committed_version_are_data_quality_assertions() -> None:
    from openlineage.client.serde import Serde

    from airflow_provider_staged.lineage.openlineage import operator_lineage

    committed = record(AttemptState.COMMITTED, None)
    committed.audits = {"verdict": "passed", "results": [
        {"name": "pos", "kind": "row", "mode": "drop", "passed": True, "failing": 3, "value": None},
        {"name": "id_unique", "kind": "table", "mode": "fail", "passed": True, "failing": None, "value": 0},
        {"name": "label", "kind": "row", "mode": "warn", "passed": False, "failing": 1, "value": None},
    ]}
    (output,) = operator_lineage(attempt_lineage(None, None, ds("db.t"), committed)).outputs
    found = Serde.to_dict(output)["facets"]["dataQualityAssertions"]["assertions"]
    assert [(a["name"], a["assertion"], a["success"], a["severity"], a["actual"]) for a in found] == [
        ("pos", "row", False, "warn", "3"),  # dropped rows: issues found, nothing blocked
        ("id_unique", "table", True, "error", "0"),
        ("label", "row", False, "warn", "1"),
    ]


def test_expiry_reports_drop_of_the_dropped_partitions() -> None:
    from airflow_provider_staged.lineage.datasets import expiry_lineage

    lineage = expiry_lineage(
        "thrift://127.0.0.1:9083", {"db.t": ["ds=2024-01-01/h=3", "ds=2024%2F01/h=4"], "db.none": []}
    )
    (output,) = lineage.outputs
    assert (output.dataset, output.lifecycle) == (ds("db.t"), "DROP")
    assert output.partitions == ({"ds": "2024-01-01", "h": "3"}, {"ds": "2024/01", "h": "4"})
    assert lineage.inputs == ()


def test_without_the_provider_nothing_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from airflow_provider_staged.lineage.openlineage import LineageReporting, operator_lineage

    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)  # import fails
    lineage = attempt_lineage("SELECT a FROM raw.s", NS, ds("db.t"), record(AttemptState.COMMITTED, None))
    assert operator_lineage(lineage) is None

    class Reporter(LineageReporting):
        def lineage_report(self, succeeded: bool):
            return lineage

    assert Reporter().get_openlineage_facets_on_complete(None) is None
