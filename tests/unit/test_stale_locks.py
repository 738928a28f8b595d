"""Which metastore locks a waiting writer releases: only ours whose heartbeat stood still."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore import locks

HELD, WAITING = ttypes.LockState.ACQUIRED, ttypes.LockState.WAITING


@dataclass
class FakeThrift:
    """The two calls the watcher makes: ``show_locks`` and ``unlock``."""

    shown: list[ttypes.ShowLocksResponseElement] = field(default_factory=list)
    unlocked: list[int] = field(default_factory=list)

    def show_locks(self, request: ttypes.ShowLocksRequest) -> ttypes.ShowLocksResponse:
        return ttypes.ShowLocksResponse(locks=list(self.shown))

    def unlock(self, request: ttypes.UnlockRequest) -> None:
        self.unlocked.append(request.lockid)


@dataclass
class FakeClient:
    thrift: FakeThrift = field(default_factory=FakeThrift)
    uri: str = "thrift://127.0.0.1:1"

    def fresh(self) -> contextlib.AbstractContextManager[Any]:
        raise AssertionError("not used")


def lock(lock_id: int, beat: int, state: int = HELD, agent: str = locks.AGENT, txn: int = 0) -> Any:
    return ttypes.ShowLocksResponseElement(
        lockid=lock_id, state=state, lastheartbeat=beat, agentInfo=agent, txnid=txn
    )


def test_only_our_locks_whose_heartbeat_stood_still_are_released(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(locks.time, "monotonic", lambda: clock[0])
    client = FakeClient()
    watcher = locks._StaleLocks(client, "db", "t", waiting=9)
    beats = {"live": 1}

    def show() -> None:
        client.thrift.shown = [
            lock(1, 100),  # ours, dead: its heartbeat never moves
            lock(2, beats["live"]),  # ours, alive: heartbeats
            lock(3, 100, agent="hive"),  # another agent's: never ours to release
            lock(4, 100, txn=7),  # in a transaction: unlock cannot release it
            lock(9, 100, state=WAITING),  # the waiter's own lock
        ]

    for _ in range(int(locks.STALE_LOCK_SECONDS // 5) + 2):
        clock[0] += 5.0
        beats["live"] += 1
        show()
        watcher.release_due()
    assert client.thrift.unlocked == [1]


def test_a_lock_that_changes_state_starts_its_watch_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(locks.time, "monotonic", lambda: clock[0])
    client = FakeClient()
    watcher = locks._StaleLocks(client, "db", "t", waiting=9)

    def watch(at: float, state: int) -> list[int]:
        clock[0] = at
        client.thrift.shown = [lock(1, 100, state=state)]
        watcher.release_due()
        return client.thrift.unlocked

    stale = locks.STALE_LOCK_SECONDS
    assert watch(10, WAITING) == []
    assert watch(10 + stale - 5, WAITING) == []
    assert watch(10 + stale, HELD) == []  # granted: a new state, watched from now
    assert watch(10 + 2 * stale - 5, HELD) == []
    assert watch(10 + 2 * stale, HELD) == [1]


def test_an_attempts_lock_owner_fits_the_metastores_column() -> None:
    assert locks.lock_owner("af-0123") == f"{locks.AGENT} attempt af-0123"
    long_id = "x" * 128
    assert len(locks.lock_owner(long_id)) <= 128
    assert locks.lock_owner(long_id) != locks.lock_owner("y" * 128)
