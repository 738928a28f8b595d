"""``MetastoreClient.read_for_update``: a read-modify-write starts from a table two reads agree on,
and ``alter_table`` sends the revision of that read (fake Thrift: pure logic)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import REVISION_KEY, MetastoreClient
from airflow_provider_staged.staging.errors import CatalogConflictError, StagingError


def _table(revision: str, location: str) -> ttypes.Table:
    return ttypes.Table(
        dbName="db",
        tableName="t",
        parameters={REVISION_KEY: revision},
        sd=ttypes.StorageDescriptor(location=location),
    )


class FakeThrift:
    """Answers ``get_table_req`` from a script of reads; records ``alter_table`` calls."""

    def __init__(self, reads: list[ttypes.Table]) -> None:
        self.reads: Iterator[ttypes.Table] = iter(reads)
        self.altered: list[tuple[ttypes.Table, dict[str, str]]] = []

    def get_table_req(self, request: ttypes.GetTableRequest) -> ttypes.GetTableResult:
        return ttypes.GetTableResult(table=copy.deepcopy(next(self.reads)))

    def alter_table_with_environment_context(self, db: str, name: str, table: Any, context: Any) -> None:
        self.altered.append((table, context.properties))


def _client(reads: list[ttypes.Table]) -> tuple[MetastoreClient, FakeThrift]:
    client = MetastoreClient("thrift://127.0.0.1:9083")
    fake = FakeThrift(reads)
    client._client = fake  # type: ignore[assignment]
    return client, fake


def test_a_read_joining_two_commits_is_read_again() -> None:
    # The first read joins commit 2's revision to commit 1's location (a torn read).
    torn, settled = _table("r2", "file:/t/_v=1"), _table("r2", "file:/t/_v=2")
    client, fake = _client([torn, settled, settled])
    table = client.read_for_update("db", "t")
    assert table == settled
    table.parameters["status"] = "ACTIVATED"
    client.alter_table(table)
    ((written, context),) = fake.altered
    assert context["expected_parameter_key"] == REVISION_KEY and context["expected_parameter_value"] == "r2"
    assert written.parameters[REVISION_KEY] not in ("r1", "r2")
    assert written.sd.location == "file:/t/_v=2"


def test_a_table_that_never_reads_the_same_twice_is_a_conflict() -> None:
    client, fake = _client([_table(f"r{i}", f"file:/t/_v={i}") for i in range(100)])
    with pytest.raises(CatalogConflictError, match=r"db\.t changed on each of 20 reads in a row"):
        client.read_for_update("db", "t")
    assert fake.altered == []


def test_a_write_without_its_read_is_refused_before_any_call() -> None:
    client, fake = _client([_table("r1", "file:/t/_v=1")] * 2)
    assert client.get_table("db", "t") is not None  # a plain read does not arm a write
    with pytest.raises(StagingError, match=r"alter_table of db\.t without read_for_update first"):
        client.alter_table(_table("r1", "file:/t/_v=9"))
    assert fake.altered == []
