"""Table locks of the Hive Metastore's own lock API, held by writers of several calls.

Every ``alter_table`` of ours is a compare-and-set on the table's revision
(``metastore.client``), which is enough for a write of one call (the whole-table commit). A
writer whose change takes several calls (a partition commit: add, switch, table options; an
append; expiry; status writes) holds the metastore's EXCLUSIVE table lock around them — the
mechanism Iceberg's Hive catalog uses for its commits. The lock lives in the metastore, so it
holds across processes and machines; a holder that dies loses it after the metastore's
``hive.txn.timeout`` (which the metastore enforces only with ``hive.compactor.initiator.on``);
a live holder heartbeats, so a slow commit never loses its lock.
"""

from __future__ import annotations

import contextlib
import getpass
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
_AGENT = "airflow-provider-staged"


class MetastoreLockError(StagingError):
    """The table lock could not be taken (held too long by another writer, or unsupported)."""


def _request(database: str, table: str) -> ttypes.LockRequest:
    component = ttypes.LockComponent(
        type=ttypes.LockType.EXCLUSIVE,
        level=ttypes.LockLevel.TABLE,
        dbname=database,
        tablename=table,
        operationType=ttypes.DataOperationType.NO_TXN,
    )
    return ttypes.LockRequest(
        component=[component], user=getpass.getuser(), hostname=socket.gethostname(), agentInfo=_AGENT
    )


@contextlib.contextmanager
def table_lock(
    client: LockingClient, database: str, table: str, timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS
) -> Iterator[None]:
    """Hold the metastore's exclusive lock of ``database.table`` (which need not exist yet)."""
    thrift = client.thrift
    try:
        response = thrift.lock(_request(database, table))
    except (TApplicationException, ttypes.MetaException) as err:
        raise MetastoreLockError(
            f"the Hive Metastore at {client.uri} refused a table lock ({err}): its transaction "
            "tables are missing — create them with Hive's schematool (-initSchema creates them)"
        ) from err
    lock_id = response.lockid
    try:
        deadline = time.monotonic() + timeout
        pause = 0.01
        while response.state == ttypes.LockState.WAITING:
            if time.monotonic() > deadline:
                raise MetastoreLockError(
                    f"table {database}.{table} stayed locked by another writer for {timeout:.0f} s "
                    f"(metastore lock {lock_id}); nothing was changed"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
            response = thrift.check_lock(ttypes.CheckLockRequest(lockid=lock_id))
        if response.state != ttypes.LockState.ACQUIRED:
            raise MetastoreLockError(
                f"the metastore did not grant the lock of {database}.{table} (state {response.state})"
            )
        with Periodic(HEARTBEAT_SECONDS, lambda: _heartbeat(client, lock_id), f"hms-lock-{lock_id}"):
            yield
    finally:
        _unlock(client, lock_id)


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
