"""``alter_partitions`` on the embedded metastore (``java/BatchedAlterHandler.java``): Hive's
result, all or nothing, with the old partitions read in one batch."""

from __future__ import annotations

import copy
import subprocess

import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.services.metastore import MetastoreInfo, _jdk_tool
from tests.fixtures.metastore import new_database

PARQUET = "org.apache.hadoop.hive.ql.io.parquet"


def _storage(columns: list[tuple[str, str]], location: str) -> ttypes.StorageDescriptor:
    return ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema(name, kind, None) for name, kind in columns],
        location=location,
        inputFormat=f"{PARQUET}.MapredParquetInputFormat",
        outputFormat=f"{PARQUET}.MapredParquetOutputFormat",
        serdeInfo=ttypes.SerDeInfo(serializationLib=f"{PARQUET}.serde.ParquetHiveSerDe", parameters={}),
        parameters={},
    )


COLUMNS = [("id", "bigint"), ("label", "string")]


@pytest.fixture
def table(metastore: MetastoreInfo) -> tuple[str, str]:
    """A table with partitions ds=d0..d4, each at <root>/v0/ds=dN."""
    database = new_database(metastore, "alter")
    root = f"file:{metastore.warehouse}/{database}.db/t"
    with MetastoreClient(metastore.uri) as client:
        client.create_table(ttypes.Table(
            tableName="t", dbName=database, owner="test", sd=_storage(COLUMNS, root),
            partitionKeys=[ttypes.FieldSchema("ds", "string", None)], parameters={},
            tableType="EXTERNAL_TABLE",
        ))
        client.add_partitions([
            ttypes.Partition(values=[f"d{i}"], dbName=database, tableName="t",
                             sd=_storage(COLUMNS, f"{root}/v0/ds=d{i}"), parameters={"numFiles": "1"})
            for i in range(5)
        ])
    return database, root


def _partitions(metastore: MetastoreInfo, database: str) -> dict[str, ttypes.Partition]:
    with MetastoreClient(metastore.uri) as client:
        return {p.values[0]: p for p in client.partitions(database, "t")}


def _moved(partition: ttypes.Partition, location: str, **params: str) -> ttypes.Partition:
    changed = copy.deepcopy(partition)
    changed.sd.location = location
    changed.parameters = {**changed.parameters, **params}
    return changed


def test_alter_partitions_changes_exactly_the_partitions_given(metastore, table):
    database, root = table
    before = _partitions(metastore, database)
    with MetastoreClient(metastore.uri) as client:
        client.alter_partitions(database, "t", [
            _moved(before[v], f"{root}/v1/ds={v}", numFiles="7") for v in ("d1", "d3")
        ])
    after = _partitions(metastore, database)
    for value in ("d1", "d3"):
        assert after[value].sd.location == f"{root}/v1/ds={value}"
        assert after[value].parameters["numFiles"] == "7"
        assert int(after[value].parameters["transient_lastDdlTime"]) > 0
    for value in ("d0", "d2", "d4"):
        assert after[value].sd.location == before[value].sd.location
        assert after[value].parameters == before[value].parameters


def test_alter_partitions_with_a_missing_partition_changes_none(metastore, table):
    database, root = table
    before = _partitions(metastore, database)
    missing = _moved(before["d0"], f"{root}/v1/ds=zz")
    missing.values = ["zz"]
    with MetastoreClient(metastore.uri) as client, pytest.raises(ttypes.InvalidOperationException):
        client.alter_partitions(database, "t", [_moved(before["d0"], f"{root}/v1/ds=d0"), missing])
    assert _partitions(metastore, database) == before


def test_alter_partitions_that_change_columns_take_hives_own_path(metastore, table):
    database, root = table
    before = _partitions(metastore, database)
    widened = _moved(before["d2"], f"{root}/v1/ds=d2")
    widened.sd.cols = [ttypes.FieldSchema("id", "bigint", None), ttypes.FieldSchema("amount", "double", None)]
    with MetastoreClient(metastore.uri) as client:
        client.alter_partitions(database, "t", [widened, _moved(before["d4"], f"{root}/v1/ds=d4")])
    after = _partitions(metastore, database)
    assert [(c.name, c.type) for c in after["d2"].sd.cols] == [("id", "bigint"), ("amount", "double")]
    assert after["d2"].sd.location == f"{root}/v1/ds=d2"
    assert after["d4"].sd.location == f"{root}/v1/ds=d4"
    assert after["d0"] == before["d0"]


def test_the_embedded_metastore_runs_the_batched_handler(metastore, table):
    """The server's ``--hiveconf`` settings reach the handlers (not only Hive's named settings)."""
    database, root = table
    before = _partitions(metastore, database)
    with MetastoreClient(metastore.uri) as client:
        client.alter_partitions(database, "t", [_moved(before["d0"], f"{root}/v1/ds=d0")])
    jcmd = _jdk_tool("jcmd") or "jcmd"
    histogram = subprocess.run(
        [jcmd, str(metastore.pid), "GC.class_histogram"], capture_output=True, text=True, check=True
    ).stdout
    handlers = {line.split()[-1] for line in histogram.splitlines() if "AlterHandler" in line}
    assert "org.apache.hadoop.hive.metastore.BatchedAlterHandler" in handlers, handlers
