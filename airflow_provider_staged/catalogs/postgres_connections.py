"""PostgreSQL connections: where and as whom (from an Airflow ``postgres`` connection), and reuse
of open ones within one process (``idle_connections``).

Authenticating a PostgreSQL connection (SCRAM, a forked backend) costs about 18 ms, more than a
whole commit. One build touches the database at begin, in the job (the same process with the
embedded engine), at commit and after it; reusing one connection for all of them takes three
authentications off every build.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg.pq import TransactionStatus

from airflow_provider_staged.catalogs.idle_connections import IdleConnections

APPLICATION_NAME = "airflow-provider-staged"


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


@dataclass(frozen=True)
class PostgresConnection:
    """Where and as whom to reach PostgreSQL; the password is left out of ``repr`` and ``endpoint``."""

    host: str
    port: int
    database: str
    user: str
    password: str = field(default="", repr=False)
    sslmode: str | None = None

    def endpoint(self) -> dict[str, Any]:
        """Everything but the password (safe for the write spec and the journal)."""
        return {
            "host": self.host,
            "port": self.port,
            "database": self.database,
            "user": self.user,
            "sslmode": self.sslmode,
        }

    @classmethod
    def from_endpoint(cls, endpoint: dict[str, Any], password: str) -> PostgresConnection:
        return cls(
            endpoint["host"],
            int(endpoint["port"]),
            endpoint["database"],
            endpoint["user"],
            password,
            endpoint.get("sslmode"),
        )

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection: each change runs in an explicit ``transaction()``."""
        extra = {"sslmode": self.sslmode} if self.sslmode else {}
        return psycopg.connect(
            host=self.host,
            port=self.port,
            dbname=self.database,
            user=self.user,
            password=self.password,
            connect_timeout=10,
            application_name=APPLICATION_NAME,
            autocommit=True,
            **extra,
        )

    def reused(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """An open connection of this process for the same server and role, else a new one;
        kept for reuse afterwards (``POSTGRES_CONNECTIONS``)."""
        return POSTGRES_CONNECTIONS.connection(self, self.connect)

    def jdbc_url(self) -> str:
        """The JDBC URL, without credentials (Spark gets them as in-memory options)."""
        # Batched INSERTs rewritten to multi-row ones: several times faster on PostgreSQL.
        params = {"reWriteBatchedInserts": "true", "ApplicationName": APPLICATION_NAME}
        if self.sslmode:
            params["sslmode"] = self.sslmode
        return (
            f"jdbc:postgresql://{self.host}:{self.port}/{quote(self.database, safe='')}?{urlencode(params)}"
        )


def postgres_connection(conn_id: str) -> PostgresConnection:
    """Look up an Airflow connection of type postgres (``schema`` is the database name).

    The catalogs' one use of Airflow: the staging core names targets by connection id only.
    """
    from airflow.providers.common.compat.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type not in ("postgres", "postgresql"):
        raise ValueError(
            f"connection {conn_id!r} has type {conn.conn_type!r}: JDBC targets need a postgres one"
        )
    if not conn.login:
        raise ValueError(f"connection {conn_id!r} has no login")
    return PostgresConnection(
        host=conn.host or "localhost",
        port=int(conn.port or 5432),
        database=conn.schema or "postgres",
        user=conn.login,
        password=conn.password or "",
        sslmode=conn.extra_dejson.get("sslmode"),
    )
