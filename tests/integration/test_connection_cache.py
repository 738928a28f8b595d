"""Reusing PostgreSQL connections within a process, against the real server."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest

from airflow_provider_staged.catalogs.postgres_connections import (
    POSTGRES_CONNECTIONS,
    ConnectionCache,
    PostgresConnection,
)
from tests.fixtures.postgres_server import PostgresServer


@pytest.fixture
def params(postgres: PostgresServer) -> PostgresConnection:
    return PostgresConnection(
        postgres.host, postgres.port, postgres.database, postgres.user, postgres.password
    )


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def test_a_returned_connection_is_lent_again(params: PostgresConnection) -> None:
    cache = ConnectionCache()
    with cache.connection(params, params.connect) as first:
        pid = backend_pid(first)
    with cache.connection(params, params.connect) as again:
        assert backend_pid(again) == pid
        with cache.connection(params, params.connect) as second:  # lent to one borrower at a time
            assert backend_pid(second) != pid
    cache.close_all()
    assert first.closed and second.closed


def test_a_connection_the_server_ended_is_replaced(
    params: PostgresConnection, postgres: PostgresServer
) -> None:
    cache = ConnectionCache()
    with cache.connection(params, params.connect) as first:
        pid = backend_pid(first)
    with psycopg.connect(postgres.conninfo(), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    with cache.connection(params, params.connect) as replacement:
        assert backend_pid(replacement) != pid
    assert first.closed
    cache.close_all()


def test_a_connection_left_in_a_transaction_is_not_kept(params: PostgresConnection) -> None:
    cache = ConnectionCache()
    with cache.connection(params, params.connect) as conn:
        pid = backend_pid(conn)
        conn.execute("BEGIN")
    assert conn.closed
    with cache.connection(params, params.connect) as other:
        assert backend_pid(other) != pid
    cache.close_all()


def test_a_wrong_password_fails_at_once_with_the_server_error(params: PostgresConnection) -> None:
    wrong = PostgresConnection(params.host, params.port, params.database, params.user, "not-the-password")
    cache = ConnectionCache()
    with (
        pytest.raises(psycopg.OperationalError, match="password authentication failed"),
        cache.connection(wrong, wrong.connect),
    ):
        pass


def test_a_forked_child_leaves_the_parents_connections_alone(params: PostgresConnection) -> None:
    with POSTGRES_CONNECTIONS.connection(params, params.connect) as conn:
        pid = backend_pid(conn)
    child = os.fork()
    if child == 0:  # what the inherited atexit handler does when the child exits normally
        POSTGRES_CONNECTIONS.close_all()
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    with POSTGRES_CONNECTIONS.connection(params, params.connect) as again:
        assert backend_pid(again) == pid  # still open, and lent again
