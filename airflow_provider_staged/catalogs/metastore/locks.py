"""Table locks of the Hive Metastore's own lock API, held by writers of several calls.

Every ``alter_table`` of ours is a compare-and-set on the table's revision
(``metastore.client``), which is enough for a write of one call (the whole-table commit). A
writer whose change takes several calls (a partition commit: add, switch, table options; an
append; expiry; status writes) holds the metastore's EXCLUSIVE table lock around them — the
mechanism Iceberg's Hive catalog uses for its commits. The lock lives in the metastore, so it
holds across processes and machines; a live holder heartbeats, so a slow commit never loses it.

A holder that dies loses its lock after the metastore's ``hive.txn.timeout`` only where the
metastore runs its housekeeping (``hive.compactor.initiator.on``); a stock one never expires it.
So the writers release dead holders' locks themselves: a lock of ours whose heartbeat stood
still for ``STALE_LOCK_SECONDS`` is released by the writer it blocks, and an attempt's locks
carry its id (``lock_owner``) so that reconcile releases them at once when it settles the attempt.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any, Protocol

from hmsclient.genthrift.hive_metastore import ttypes
from thrift.Thrift import TApplicationException

from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.periodic import Periodic


class LockingClient(Protocol):
    """What a lock needs of a metastore client (``client.MetastoreClient`` is one)."""

    uri: str
    thrift: Any

    def fresh(self) -> contextlib.AbstractContextManager[LockingClient]:
        """A new connection to the same metastore (Thrift clients are not thread-safe)."""
        ...

log = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT_SECONDS = 120.0
# Well inside any hive.txn.timeout a metastore would use (default 300 s; 60 s embedded).
HEARTBEAT_SECONDS = 10.0
# A lock whose heartbeat stood still this long lost its holder: live holders heartbeat every
# HEARTBEAT_SECONDS, live waiters with every check_lock (which the metastore counts as one).
STALE_LOCK_SECONDS = 60.0
_STALE_CHECK_SECONDS = 5.0
AGENT = "airflow-provider-staged"
_AGENT_INFO_MAX = 128  # HIVE_LOCKS.HL_AGENT_INFO varchar(128)


class MetastoreLockError(StagingError):
    """The table lock could not be taken (held too long by another writer, or unsupported)."""


def lock_owner(attempt_id: str) -> str:
    """The agent info of the locks an attempt's process takes (how reconcile finds them)."""
    owner = f"{AGENT} attempt {attempt_id}"
    if len(owner) <= _AGENT_INFO_MAX:
        return owner
    return f"{AGENT} attempt #{hashlib.sha256(attempt_id.encode()).hexdigest()[:32]}"


def _request(database: str, table: str, owner: str = AGENT) -> ttypes.LockRequest:
    component = ttypes.LockComponent(
        type=ttypes.LockType.EXCLUSIVE,
        level=ttypes.LockLevel.TABLE,
        dbname=database,
        tablename=table,
        operationType=ttypes.DataOperationType.NO_TXN,
    )
    return ttypes.LockRequest(
        component=[component], user=getpass.getuser(), hostname=socket.gethostname(), agentInfo=owner
    )


@contextlib.contextmanager
def table_lock(
    client: LockingClient,
    database: str,
    table: str,
    timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
    owner: str = AGENT,
) -> Iterator[None]:
    """Hold the metastore's exclusive lock of ``database.table`` (which need not exist yet);
    ``owner``: the lock's agent info (:func:`lock_owner` for an attempt's)."""
    thrift = client.thrift
    try:
        response = thrift.lock(_request(database, table, owner))
    except (TApplicationException, ttypes.MetaException) as err:
        raise MetastoreLockError(
            f"the Hive Metastore at {client.uri} refused a table lock ({err}): its transaction "
            "tables are missing — create them with Hive's schematool (-initSchema creates them)"
        ) from err
    lock_id = response.lockid
    try:
        deadline = time.monotonic() + timeout
        pause = 0.01
        stale = _StaleLocks(client, database, table, lock_id)
        while response.state == ttypes.LockState.WAITING:
            if time.monotonic() > deadline:
                raise MetastoreLockError(
                    f"table {database}.{table} stayed locked by another writer for {timeout:.0f} s "
                    f"(metastore lock {lock_id}); nothing was changed"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
            stale.release_due()
            response = thrift.check_lock(ttypes.CheckLockRequest(lockid=lock_id))
        if response.state != ttypes.LockState.ACQUIRED:
            raise MetastoreLockError(
                f"the metastore did not grant the lock of {database}.{table} (state {response.state})"
            )
        with Periodic(HEARTBEAT_SECONDS, lambda: _heartbeat(client, lock_id), f"hms-lock-{lock_id}"):
            yield
    finally:
        _unlock(client, lock_id)


class _StaleLocks:
    """The locks of ours ahead of a waiting one, watched for heartbeats that stand still."""

    def __init__(self, client: LockingClient, database: str, table: str, waiting: int) -> None:
        self.client, self.database, self.table, self.waiting = client, database, table, waiting
        self.next_check = time.monotonic() + _STALE_CHECK_SECONDS
        # lock id -> (its state and last heartbeat as seen, when first seen so)
        self.seen: dict[int, tuple[tuple[int, int], float]] = {}

    def release_due(self) -> None:
        """Release the locks of ours whose heartbeat stood still for ``STALE_LOCK_SECONDS``."""
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + _STALE_CHECK_SECONDS
        for lock in table_locks(self.client, self.database, self.table):
            if lock.lockid == self.waiting or lock.txnid or not (lock.agentInfo or "").startswith(AGENT):
                continue
            beat = (lock.state, lock.lastheartbeat)
            seen, since = self.seen.get(lock.lockid, (None, now))
            if seen != beat:
                self.seen[lock.lockid] = (beat, now)
            elif now - since >= STALE_LOCK_SECONDS:
                log.warning(
                    "released metastore lock %s of %s.%s (%s): no heartbeat for %.0f s, its holder is gone",
                    lock.lockid, self.database, self.table, lock.agentInfo, now - since,
                )
                release_lock(self.client, lock.lockid)
                del self.seen[lock.lockid]


def table_locks(client: LockingClient, database: str, table: str) -> list[ttypes.ShowLocksResponseElement]:
    """The metastore's locks of ``database.table``, held or waiting."""
    request = ttypes.ShowLocksRequest(dbname=database, tablename=table)
    return list(client.thrift.show_locks(request).locks or [])


def release_locks(client: LockingClient, database: str, table: str, owner: str) -> list[int]:
    """Release the locks of ``database.table`` that ``owner`` took (call only when its process is
    gone or out of its locked sections); return their ids."""
    released = []
    for lock in table_locks(client, database, table):
        if lock.agentInfo == owner and not lock.txnid:
            release_lock(client, lock.lockid)
            released.append(lock.lockid)
    return released


def release_lock(client: LockingClient, lock_id: int) -> None:
    with contextlib.suppress(ttypes.NoSuchLockException):
        client.thrift.unlock(ttypes.UnlockRequest(lockid=lock_id))


def _heartbeat(holder: LockingClient, lock_id: int) -> None:
    """Keep a held lock alive, on a connection of its own (Thrift clients are not thread-safe)."""
    try:
        with holder.fresh() as client:
            client.thrift.heartbeat(ttypes.HeartbeatRequest(lockid=lock_id))
    except Exception:
        log.warning("heartbeat of metastore lock %s failed", lock_id, exc_info=True)


def _unlock(client: LockingClient, lock_id: int) -> None:
    """Release on the same connection, else on a new one (a reply lost on the first)."""
    try:
        client.thrift.unlock(ttypes.UnlockRequest(lockid=lock_id))
        return
    except ttypes.NoSuchLockException:
        return
    except Exception as err:  # the connection broke: the lock is still the metastore's
        log.warning("unlock of metastore lock %s failed (%s): retrying on a new connection", lock_id, err)
    try:
        with client.fresh() as other:
            other.thrift.unlock(ttypes.UnlockRequest(lockid=lock_id))
    except ttypes.NoSuchLockException:
        return
    except Exception:
        log.exception("metastore lock %s left to expire (hive.txn.timeout)", lock_id)
