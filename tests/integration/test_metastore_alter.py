"""``alter_partitions`` on the embedded metastore (``java/BatchedAlterHandler.java``, and
``java/SnapshotReadsStore.java``'s direct write of a switch): Hive's result, all or nothing, with
the old partitions read in one batch."""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.local.metastore import derby_conf, jdk_tool, start_metastore, stop_metastore
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


def _create(metastore: MetastoreInfo, database: str, name: str, **params: str) -> str:
    """Table ``name`` with partitions ds=d0..d4, each at <root>/v0/ds=dN; returns the root."""
    root = f"file:{metastore.warehouse}/{database}.db/{name}"
    with MetastoreClient(metastore.uri) as client:
        client.create_table(ttypes.Table(
            tableName=name, dbName=database, owner="test", sd=_storage(COLUMNS, root),
            partitionKeys=[ttypes.FieldSchema("ds", "string", None)], parameters={},
            tableType="EXTERNAL_TABLE",
        ))
        client.add_partitions([
            ttypes.Partition(values=[f"d{i}"], dbName=database, tableName=name,
                             sd=_storage(COLUMNS, f"{root}/v0/ds=d{i}"),
                             parameters={"numFiles": "1", **params})
            for i in range(5)
        ])
    return root


@pytest.fixture
def table(metastore: MetastoreInfo) -> tuple[str, str]:
    """A table with partitions ds=d0..d4, each at <root>/v0/ds=dN."""
    database = new_database(metastore, "alter")
    return database, _create(metastore, database, "t")


def _partitions(metastore: MetastoreInfo, database: str, name: str = "t") -> dict[str, ttypes.Partition]:
    with MetastoreClient(metastore.uri) as client:
        return {p.values[0]: p for p in client.partitions(database, name)}


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
    jcmd = jdk_tool("jcmd") or "jcmd"
    histogram = subprocess.run(
        [jcmd, str(metastore.pid), "GC.class_histogram"], capture_output=True, text=True, check=True
    ).stdout
    handlers = {line.split()[-1] for line in histogram.splitlines() if "AlterHandler" in line}
    assert "org.apache.hadoop.hive.metastore.BatchedAlterHandler" in handlers, handlers


# SnapshotReadsStore's statement moving a storage descriptor, as Derby logs it.
DIRECT_MOVE = 'UPDATE "SDS" SET "LOCATION" = ? WHERE "SD_ID" = ?'
DDL_TIME = "1700000000"  # given, so that the handler keeps it: two calls' partitions compare equal


@pytest.fixture(scope="module")
def logged_metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MetastoreInfo, Path]]:
    """A metastore of its own whose Derby logs every statement (``derby.log``): which write ran."""
    home = tmp_path_factory.mktemp("logged-metastore")
    # A failed write is retried as Hive's is (10 times), here without Hive's 2 s between tries.
    database = {**derby_conf(home), "hive.hmshandler.retry.interval": "10ms"}
    with pytest.MonkeyPatch.context() as patch:
        options = os.environ.get("JAVA_TOOL_OPTIONS", "")
        patch.setenv("JAVA_TOOL_OPTIONS", f"{options} -Dderby.language.logStatementText=true".strip())
        info = start_metastore(home, database=database)
    try:
        yield info, home / "derby.log"
    finally:
        stop_metastore(home)


def _direct_moves(log: Path) -> int:
    return log.read_text(errors="replace").count(DIRECT_MOVE)


def _as_in(partition: ttypes.Partition, root: str) -> ttypes.Partition:
    """``partition`` as if of table ``t`` at ``ROOT``: partitions of two tables compared."""
    same = copy.deepcopy(partition)
    same.tableName = "t"
    same.sd.location = same.sd.location.replace(root, "ROOT")
    return same


def test_a_switch_is_written_directly_and_reads_back_as_hives_own_write(logged_metastore):
    """Partitions that only move (location, parameters, times) are written with direct statements;
    the same moves in a call that Hive's own write does (one more partition changes its serde)
    leave exactly the same partitions behind."""
    metastore, log = logged_metastore
    database = new_database(metastore, "direct")
    roots = {name: _create(metastore, database, name, dropped="x") for name in ("direct", "hive")}

    def switch(name: str) -> list[ttypes.Partition]:
        old, root = _partitions(metastore, database, name), roots[name]
        moved = [
            _moved(old[f"d{i}"], f"{root}/v1/ds=d{i}", numFiles=str(i + 2), transient_lastDdlTime=DDL_TIME)
            for i in range(4)
        ]
        del moved[0].parameters["dropped"]  # parameters are replaced whole
        for part in moved:  # both tables' partitions were added at their own second
            part.createTime = 1234
        moved[1].lastAccessTime = 5678
        return moved

    before = _direct_moves(log)
    with MetastoreClient(metastore.uri) as client:
        client.alter_partitions(database, "direct", switch("direct"))
    direct = _direct_moves(log)
    assert direct > before, "the switch did not take the direct write"

    reserialized = _moved(_partitions(metastore, database, "hive")["d4"], f"{roots['hive']}/v1/ds=d4")
    reserialized.sd.serdeInfo.parameters = {"serialization.format": "1"}
    with MetastoreClient(metastore.uri) as client:
        client.alter_partitions(database, "hive", [*switch("hive"), reserialized])
    assert _direct_moves(log) == direct, "a call changing a serde took the direct write"

    after = {name: _partitions(metastore, database, name) for name in roots}
    for value in ("d0", "d1", "d2", "d3"):
        assert _as_in(after["direct"][value], roots["direct"]) == _as_in(after["hive"][value], roots["hive"])
    moved = after["direct"]
    assert moved["d0"].sd.location == f"{roots['direct']}/v1/ds=d0"
    assert moved["d0"].parameters == {"numFiles": "2", "transient_lastDdlTime": DDL_TIME}
    assert moved["d2"].parameters == {"numFiles": "4", "dropped": "x", "transient_lastDdlTime": DDL_TIME}
    assert (moved["d1"].createTime, moved["d1"].lastAccessTime) == (1234, 5678)
    assert moved["d4"].sd.location == f"{roots['direct']}/v0/ds=d4"


def test_a_direct_switch_that_fails_changes_nothing(logged_metastore):
    """A value Derby refuses (over 4000 characters), in the last partition's parameters: the direct
    write fails as Hive's does, all of it rolled back, and the next switch goes through."""
    metastore, log = logged_metastore
    database = new_database(metastore, "failed")
    root = _create(metastore, database, "t")
    before = _partitions(metastore, database)
    moved = [_moved(before[f"d{i}"], f"{root}/v1/ds=d{i}") for i in range(5)]
    moved[-1].parameters["note"] = "x" * 4001
    started = _direct_moves(log)
    with MetastoreClient(metastore.uri) as client, pytest.raises(ttypes.MetaException):
        client.alter_partitions(database, "t", moved)
    assert _direct_moves(log) > started
    assert _partitions(metastore, database) == before

    del moved[-1].parameters["note"]
    with MetastoreClient(metastore.uri) as client:
        client.alter_partitions(database, "t", moved)
    assert {p.sd.location for p in _partitions(metastore, database).values()} == {
        f"{root}/v1/ds=d{i}" for i in range(5)
    }
