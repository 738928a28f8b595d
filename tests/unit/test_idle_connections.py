"""Reuse of metastore connections within a process (pure logic: a fake Thrift client, no server)."""

from __future__ import annotations

import itertools
import os
import re

import pytest

from airflow_provider_staged.catalogs.metastore import client as client_module
from airflow_provider_staged.catalogs.metastore.client import METASTORE_CONNECTIONS, MetastoreClient
from airflow_provider_staged.staging.errors import StagingError

URI = "thrift://127.0.0.1:9"


class FakeThrift:
    """Answers ``getStatus`` until the server is said to have ended the connection."""

    ids = itertools.count(1)

    def __init__(self) -> None:
        self.id = next(self.ids)
        self.closed = False
        self.ended_by_server = False

    def getStatus(self) -> int:
        if self.ended_by_server:
            raise ConnectionResetError("connection reset by peer")
        return 2  # fb_status.ALIVE

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[FakeThrift]:
    """Every connection the client opens (none reach a network)."""
    made: list[FakeThrift] = []

    def connect(uri: str, timeout_ms: int) -> FakeThrift:
        made.append(FakeThrift())
        return made[-1]

    monkeypatch.setattr(client_module, "_connect", connect)
    METASTORE_CONNECTIONS.close_all()
    yield made
    METASTORE_CONNECTIONS.close_all()


def test_a_returned_connection_is_lent_again(opened: list[FakeThrift]) -> None:
    with MetastoreClient(URI) as first:
        conn = first.thrift
    with MetastoreClient(URI) as again:
        assert again.thrift is conn
        with MetastoreClient(URI) as other:  # lent to one borrower at a time
            assert other.thrift is not conn
    assert len(opened) == 2 and not any(c.closed for c in opened)


def test_keyed_by_uri_and_timeout(opened: list[FakeThrift]) -> None:
    with MetastoreClient(URI):
        pass
    with MetastoreClient("thrift://127.0.0.1:10"), MetastoreClient(URI, timeout_ms=5):
        pass
    assert len(opened) == 3


def test_a_block_that_raised_closes_its_connection(opened: list[FakeThrift]) -> None:
    with pytest.raises(TimeoutError), MetastoreClient(URI):
        raise TimeoutError("read timed out")  # a reply may be half read: never reuse it
    assert opened[0].closed
    with MetastoreClient(URI) as again:
        assert again.thrift is opened[1]


def test_a_connection_the_server_ended_is_replaced(opened: list[FakeThrift]) -> None:
    with MetastoreClient(URI):
        pass
    opened[0].ended_by_server = True
    with MetastoreClient(URI) as again:
        assert again.thrift is opened[1]
    assert opened[0].closed


def test_outside_its_block_the_client_has_no_connection(opened: list[FakeThrift]) -> None:
    client = MetastoreClient(URI)
    with pytest.raises(RuntimeError, match="outside its with block"):
        client.thrift  # noqa: B018
    with client:
        pass
    with pytest.raises(RuntimeError, match="outside its with block"):
        client.thrift  # noqa: B018


def test_a_bad_uri_fails_before_any_connection(opened: list[FakeThrift]) -> None:
    with pytest.raises(ValueError, match="'http://x:1'"):
        MetastoreClient("http://x:1")
    assert opened == []


def test_an_unreachable_metastore_is_a_clear_error() -> None:
    METASTORE_CONNECTIONS.close_all()
    message = re.escape(f"cannot reach the Hive Metastore at {URI}")
    with pytest.raises(StagingError, match=message), MetastoreClient(URI, timeout_ms=2000):
        pass


def test_a_forked_child_leaves_the_parents_connections_alone(opened: list[FakeThrift]) -> None:
    with MetastoreClient(URI):
        pass
    child = os.fork()
    if child == 0:
        # The child starts with no idle connection; closing all (atexit) closes none of the parent's.
        code = 0 if METASTORE_CONNECTIONS._idle == {} else 1
        METASTORE_CONNECTIONS.close_all()
        os._exit(code)
    assert os.waitpid(child, 0)[1] == 0
    with MetastoreClient(URI) as again:
        assert again.thrift is opened[0] and not opened[0].closed
