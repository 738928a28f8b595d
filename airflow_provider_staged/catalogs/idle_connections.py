"""Reuse of open connections within one process: idle ones are lent again, one borrower at a time.

Opening a connection costs more than the calls a build makes on it. PostgreSQL authenticates a
forked backend (SCRAM, ~18 ms). The Hive Metastore serves every Thrift connection on a server
thread of its own whose first calls build that thread's object store and transaction handler
(per-connection state that Hive drops when the client goes away), so a commit on a fresh
connection pays for them again in its ``lock`` and ``get_table``. Spark's own catalog keeps one
connection for the whole session, which is why its catalog work is cheaper.

Not a pool with background workers (``psycopg_pool``): a miss connects in the caller, so the
real error (a wrong password, a server that is down) surfaces at once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

C = TypeVar("C")


class IdleConnections(ABC, Generic[C]):
    """Idle connections per key; a kind of connection says how to test, keep and close one."""

    def __init__(self) -> None:
        self._idle: dict[Hashable, list[C]] = {}
        self._lock = threading.Lock()

    @abstractmethod
    def alive(self, conn: C) -> bool:
        """Whether an idle connection still answers (the server may have ended it meanwhile)."""

    @abstractmethod
    def reusable(self, conn: C, failed: bool) -> bool:
        """Whether a returned connection may be lent again (``failed``: its borrower raised)."""

    @abstractmethod
    def close(self, conn: C) -> None:
        """Close a connection, ignoring errors of one that is already broken."""

    @contextlib.contextmanager
    def connection(self, key: Hashable, connect: Callable[[], C]) -> Iterator[C]:
        """An idle connection for ``key`` that still answers, else ``connect()``; kept afterwards
        only when ``reusable``."""
        conn = self._take(key) or connect()
        failed = True
        try:
            yield conn
            failed = False
        finally:
            if self.reusable(conn, failed):
                with self._lock:
                    self._idle.setdefault(key, []).append(conn)
            else:
                self.close(conn)

    def _take(self, key: Hashable) -> C | None:
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                conn = idle.pop()
            if self.alive(conn):
                return conn
            self.close(conn)

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for conn in connections:
                self.close(conn)

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's connections without closing them (closing could end
        the parent's sessions; the parent keeps using them)."""
        self._lock = threading.Lock()
        self._idle = {}

    def register(self) -> None:
        """Close the idle connections at exit, and forget them in forked children."""
        atexit.register(self.close_all)
        os.register_at_fork(after_in_child=self._forget_after_fork)
