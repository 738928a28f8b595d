"""Pruning of the journal: the ended records of sink writes that nothing reads any more (pure).

A streaming sink journals one record per micro-batch (a 30 s CONTINUOUS table: 2,880 a day) and
an ended record is never removed by the commit path. What reads ENDED records, and what it needs:

- the version sweep / retention (``kinds.hive_table._candidates``, ``maintenance``): a COMMITTED
  record of every version directory that still exists (without it the directory is an orphan,
  deleted at once, inside the grace period), and of every superseded directory that still
  exists (its record says since when it is superseded);
- rollback and ``staged versions`` (``rollback._kept_records``, ``_refuse_unknown``): COMMITTED
  records whose version directory still exists: kept by the rule above;
- the sinks' replay checks (``sink.recovery``: ``write_committed``, ``ran_previous_batch``,
  ``settle_earlier_runs``; the Hive sink's sweep of earlier runs' staging): records of the
  micro-batch being committed and of the one before it, i.e. the newest of the target. A pruned
  one only costs the full check: the target records its last batch itself (``target_records``);
- ``jdbc_table.after_commit`` (the tables earlier replaces renamed away) and the expiry's file
  deletion (``expire`` records): other kinds, never pruned;
- reconcile, the task callbacks, heartbeats: open records only; ``staged mt describe`` reads the
  progress file and Airflow, not the journal; ``staged attempts`` lists what is there.

So only records of the sink kinds are pruned, only ENDED ones, and of those not the newest
``keep_last`` of their target, none younger than the retention grace period (a reader that listed
the journal just before may still read it), and no COMMITTED one whose version directory or a
superseded directory still exists. Records never change once ended, so deleting one cannot lose a
writer's update; it is deleted under its lock (``AttemptJournal.remove_ended``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds.hive_table import (
    VERSION_KINDS,
    superseded_locations,
    version_location,
)
from airflow_provider_staged.storage.files import exists

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

# The commit kinds of sink writes (one record per micro-batch of a streaming query).
SINK_KINDS = ("hive_append", "hive_overwrite", "jdbc_append")
# Ended sink records kept per target whatever their age: the replay checks read the newest.
KEEP_LAST_RECORDS = 100


def prunable(
    records: Iterable[AttemptRecord],
    now: float,
    min_age_seconds: float,
    keep_last: int,
    location_exists: Callable[[str], bool] = exists,
) -> list[AttemptRecord]:
    """The records that :func:`prune_journal` deletes (see the module docstring)."""
    if keep_last < 0:
        raise ValueError(f"invalid keep_last {keep_last!r}: must be >= 0")
    by_target: dict[str, list[AttemptRecord]] = {}
    for record in records:
        if record.kind in SINK_KINDS and record.state.ended:
            by_target.setdefault(record.target, []).append(record)
    doomed = []
    for ended in by_target.values():
        ended.sort(key=lambda r: (r.updated_at, r.attempt_id), reverse=True)
        for record in ended[keep_last:]:
            if now - record.updated_at > min_age_seconds and not _owns_directories(record, location_exists):
                doomed.append(record)
    return doomed


def _owns_directories(record: AttemptRecord, location_exists: Callable[[str], bool]) -> bool:
    """Whether retention still needs ``record``: a committed version or superseded directory exists."""
    if record.kind not in VERSION_KINDS or record.state is not AttemptState.COMMITTED:
        return False  # an aborted attempt's directory is an orphan with or without its record
    locations = [version_location(record), *superseded_locations(record)]
    return any(location_exists(location) for location in locations)


def prune_journal(
    settings: StagedSettings,
    target: str | None = None,
    now: float | None = None,
    keep_last: int | None = None,
    records: Iterable[AttemptRecord] | None = None,
) -> list[str]:
    """Delete the prunable records (of ``target`` only, when given); their attempt ids.

    ``records``: the journal as a caller already read it (a record ended since is pruned next
    time; ``remove_ended`` re-checks each one under its lock)."""
    now = settings.journal.now() if now is None else now
    listed = settings.journal.records() if records is None else records
    records = [r for r in listed if target is None or r.target == target]
    keep = KEEP_LAST_RECORDS if keep_last is None else keep_last
    pruned = [
        record.attempt_id
        for record in prunable(records, now, settings.retention.grace_seconds, keep)
        if settings.journal.remove_ended(record.attempt_id)
    ]
    if pruned:
        log.info("journal: pruned %d ended sink record(s)%s", len(pruned), f" of {target}" if target else "")
    return pruned
