"""Reuse of open database connections within one process.

Authenticating a PostgreSQL connection (SCRAM, a forked backend) costs about 18 ms, more than a
whole commit. One build touches the database at begin, in the job (the same process with the
embedded engine), at commit and after it; reusing one connection for all of them takes three
authentications off every build.

Not ``psycopg_pool``: with no idle connection it connects in a background worker and, when
that fails (a wrong password, a server that is down), the caller only gets a ``PoolTimeout``
after its timeout. Here a miss connects in the caller, so the real error surfaces at once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus


class ConnectionCache:
    """Idle connections per key; a connection is lent to one borrower at a time."""

    def __init__(self) -> None:
        self._idle: dict[Hashable, list[psycopg.Connection[Any]]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(
        self, key: Hashable, connect: Callable[[], psycopg.Connection[Any]]
    ) -> Iterator[psycopg.Connection[Any]]:
        """An idle connection for ``key`` that still answers, else ``connect()``; kept afterwards
        only when it is healthy and outside any transaction."""
        conn = self._take(key) or connect()
        try:
            yield conn
        finally:
            if conn.closed or conn.info.transaction_status is not TransactionStatus.IDLE:
                conn.close()
            else:
                with self._lock:
                    self._idle.setdefault(key, []).append(conn)

    def _take(self, key: Hashable) -> psycopg.Connection[Any] | None:
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                conn = idle.pop()
            try:
                conn.execute("SELECT 1")  # the server may have ended it while it was idle
                return conn
            except psycopg.Error:
                conn.close()

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for conn in connections:
                conn.close()

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's connections without closing them.

        Closing (``close_all`` at exit) would end the parent's sessions; psycopg's finalizer
        knows not to when it runs in another process.
        """
        self._lock = threading.Lock()
        self._idle = {}


POSTGRES_CONNECTIONS = ConnectionCache()
atexit.register(POSTGRES_CONNECTIONS.close_all)
os.register_at_fork(after_in_child=POSTGRES_CONNECTIONS._forget_after_fork)
