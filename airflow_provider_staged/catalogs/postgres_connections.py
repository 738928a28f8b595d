"""Reuse of open PostgreSQL connections within one process (``idle_connections``).

Authenticating a PostgreSQL connection (SCRAM, a forked backend) costs about 18 ms, more than a
whole commit. One build touches the database at begin, in the job (the same process with the
embedded engine), at commit and after it; reusing one connection for all of them takes three
authentications off every build.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from airflow_provider_staged.catalogs.idle_connections import IdleConnections


class ConnectionCache(IdleConnections["psycopg.Connection[Any]"]):
    """Idle PostgreSQL connections per key; one is kept only when healthy and outside a transaction."""

    def alive(self, conn: psycopg.Connection[Any]) -> bool:
        try:
            conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def reusable(self, conn: psycopg.Connection[Any], failed: bool) -> bool:
        # A failed borrower's transaction was rolled back by psycopg: the connection is fine.
        return not conn.closed and conn.info.transaction_status is TransactionStatus.IDLE

    def close(self, conn: psycopg.Connection[Any]) -> None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


POSTGRES_CONNECTIONS = ConnectionCache()
POSTGRES_CONNECTIONS.register()
