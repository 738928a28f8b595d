"""The page's per-table cache of metastore reads, keyed by change tokens read from Airflow.

Pure (no Airflow import, no I/O). Building 1,000 Table objects costs the embedded metastore
~2.4 s per request; Airflow's metadatabase answers the page's three queries in ~40 ms. So the
api-server keeps what it read per table with a token of what could have changed it, and re-reads
(in the same batched calls) only the tables whose token changed or whose entry is not trusted
(:func:`settled`). An entry older than ``max_age`` is still served, and re-read by one batched
read in the background (stale while revalidate): a request after a quiet minute costs what a warm
one does, not a read of every table. Only entries older than ``stale_limit`` are re-read before
the answer.

Why the token sees every change (checked in ``materialized/``). What the page shows from a
table's metastore entry is its existence, its refresh status, suspend reason and failure count
(``catalog_status``) and the ``staged.*`` commit parameters. They are written by:

- a run of the table's refresh DAG: the commit (``refresh.run_refresh``) and the failure-count
  reset (``auto_suspend.record_success``) run inside the task's ``execute``, before the task and
  so the run end: the run's state and end date change after the write. A queued or running
  latest run is not trusted at all (a CONTINUOUS table's stream creates its table mid-run).
- the failure callback of a failed run (``auto_suspend.record_failure``), which may run after
  the run has failed (in the DAG processor for a lost task): the count it writes is shown only
  once the table is suspended, and the suspension goes through the workflow scheduler:
- the workflow scheduler (``manager.MaterializedTables``): create writes the definition file,
  then the status; suspend and resume PATCH the DAG's pause, then write the status; drop clears
  the status, then deletes the definition. Pause and definition file are in the token; as the
  status is written *after* the pause changed, an entry whose stored status disagrees with the
  pause (SUSPENDED but unpaused, or paused but not SUSPENDED) is not trusted: re-read at every
  request until the write has landed.
- ``CatalogStatusStore.load``/``update`` moving a status from the state file into the table:
  they rewrite or remove the state file, whose identity is in the token too.

Where this breaks (then the page shows the write from the first request after ``max_age``
has passed plus one background read, and at the latest after ``stale_limit``): writes outside these paths,
e.g. a CTAS or ``staged rollback`` of the same table by hand, ``ALTER TABLE ... SET
TBLPROPERTIES`` in Spark, another definitions folder (another Airflow) on the same metastore; a
DAG paused in Airflow's UI, by contrast, only costs that table a re-read per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from airflow_provider_staged.airflow.ui.rows import DagFacts, RunFacts
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# A file's (inode, mtime_ns, size): state and definition files are replaced atomically (new inode).
FileKey = tuple[int, int, int]
# Run states in which the run's task may still write the table.
ACTIVE_RUN_STATES = frozenset({"queued", "running"})
MAX_AGE_SECONDS = 60.0
STALE_LIMIT_SECONDS = 600.0

log = logging.getLogger(__name__)


def change_token(
    metastore_uri: str,
    definition: FileKey | None,
    state_file: FileKey | None,
    dag: DagFacts | None,
    run: RunFacts | None,
) -> Hashable:
    """What changes whenever the table's metastore entry can have changed (see the module)."""
    return (
        metastore_uri,
        definition,
        state_file,
        None if dag is None else dag.is_paused,
        None if run is None else (run.run_id, run.state, _instant(run.end_date)),
    )


def _instant(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def settled(dag: DagFacts | None, run: RunFacts | None, stored_status: str | None) -> bool:
    """Whether a cached read can stand while its token is unchanged.

    ``stored_status`` is the refresh status in the cached table parameters (None: no table or
    none stored; then the page reads the status from the state file at every request).
    """
    if run is not None and run.state in ACTIVE_RUN_STATES:
        return False
    if dag is None or stored_status is None:
        return True
    return (stored_status == RefreshStatus.SUSPENDED.value) == dag.is_paused


@dataclass
class _Entry(Generic[V]):
    token: Hashable
    value: V | None  # None: the table did not exist
    read_at: float


@dataclass(frozen=True)
class CachedRead(Generic[K, V]):
    """The existing tables among the keys; how many were re-read, served from the cache, and
    (of those served) handed to a background re-read because they are older than ``max_age``."""

    values: dict[K, V]
    reread: int
    cached: int
    revalidating: int = 0


def _in_thread(job: Callable[[], None]) -> None:
    threading.Thread(target=job, name="page-cache-revalidate", daemon=True).start()


class ChangeTokenCache(Generic[K, V]):
    """Values per key, re-read at once when the key's token changed, the entry is not trusted or
    older than ``stale_limit``; re-read in the background (``spawn``) when older than ``max_age``.
    Thread-safe: concurrent requests wait for one read; one background re-read at a time."""

    def __init__(
        self,
        max_age: float = MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        stale_limit: float = STALE_LIMIT_SECONDS,
        spawn: Callable[[Callable[[], None]], None] = _in_thread,
    ) -> None:
        self.max_age = max_age
        self.stale_limit = stale_limit
        self.clock = clock
        self.spawn = spawn
        self._entries: dict[K, _Entry[V]] = {}
        self._lock = threading.Lock()
        self._revalidating = False

    def read(
        self,
        tokens: Mapping[K, Hashable],
        fetch: Callable[[list[K]], Mapping[K, V]],
        trusted: Callable[[K, V | None], bool],
        fetch_later: Callable[[list[K]], Mapping[K, V]] | None = None,
    ) -> CachedRead[K, V]:
        """The values of ``tokens``' keys; ``fetch`` (one batched call) reads the stale ones and
        returns those that exist; ``fetch_later`` (default ``fetch``) is the background re-read.
        Keys not in ``tokens`` are forgotten."""
        with self._lock:
            now = self.clock()  # before the read: an entry's age counts from what it may have missed
            stale = [key for key, token in tokens.items() if not self._usable(key, token, now, trusted)]
            fetched = fetch(stale) if stale else {}
            for key in stale:
                self._entries[key] = _Entry(tokens[key], fetched.get(key), now)
            for gone in self._entries.keys() - tokens.keys():
                del self._entries[gone]
            values = {key: value for key in tokens if (value := self._entries[key].value) is not None}
            aged = {key: entry for key in tokens
                    if now - (entry := self._entries[key]).read_at >= self.max_age}
            revalidate = bool(aged) and not self._revalidating
            self._revalidating |= revalidate
        if revalidate:
            self.spawn(lambda: self._revalidate(aged, fetch_later or fetch))
        return CachedRead(values, len(stale), len(tokens) - len(stale), len(aged) if revalidate else 0)

    def _revalidate(self, aged: Mapping[K, _Entry[V]], fetch: Callable[[list[K]], Mapping[K, V]]) -> None:
        """Re-read ``aged`` outside the lock; store a value only over the very entry it replaces
        (a request may have re-read the key, with a newer token, in the meantime)."""
        try:
            now = self.clock()
            fetched = fetch(list(aged))
            with self._lock:
                for key, before in aged.items():
                    if self._entries.get(key) is before:
                        self._entries[key] = _Entry(before.token, fetched.get(key), now)
        except Exception:  # the next request retries; the page keeps its answer meanwhile
            log.warning("background re-read of %d table(s) failed", len(aged), exc_info=True)
        finally:
            with self._lock:
                self._revalidating = False

    def _usable(
        self, key: K, token: Hashable, now: float, trusted: Callable[[K, V | None], bool]
    ) -> bool:
        entry = self._entries.get(key)
        return (
            entry is not None
            and entry.token == token
            and now - entry.read_at < self.stale_limit
            and trusted(key, entry.value)
        )
