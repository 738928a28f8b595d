"""Version directories of a table and the retention of superseded versions (pure logic)."""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import time
from dataclasses import dataclass

from airflow_provider_staged.staging.journal import TaskRef

VERSION_PREFIX = "_v="
_VERSION_DIR = re.compile(r"^_v=([A-Za-z0-9_.-]+)$")


def new_attempt_id(task: TaskRef | None = None, now: float | None = None) -> str:
    """A sortable, unique attempt id; deterministic for one Airflow task try.

    Determinism lets a wrapped operator (the callbacks form) compute where to write from
    its template context before the begin callback has run.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now if now is not None else time.time()))
    if task is None:
        return f"{stamp}-{secrets.token_hex(4)}"
    key = f"{task.dag_id}\0{task.task_id}\0{task.run_id}\0{task.map_index}\0{task.try_number}"
    return "af-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def version_dir_name(attempt_id: str) -> str:
    return f"{VERSION_PREFIX}{attempt_id}"


def parse_version_dir(name: str) -> str | None:
    """The attempt id of a version directory name, or None for any other name."""
    match = _VERSION_DIR.match(name)
    return match.group(1) if match else None


def version_of_location(location: str) -> str | None:
    """The version (attempt id) whose directory holds ``location``: its innermost ``_v=``
    component, None outside any version directory (e.g. a table Spark wrote in place)."""
    for part in reversed(location.rstrip("/").split("/")):
        attempt_id = parse_version_dir(part)
        if attempt_id is not None:
            return attempt_id
    return None


DEFAULT_GRACE_SECONDS = 3600.0
DEFAULT_QUARANTINE_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True)
class RetentionPolicy:
    """Which superseded versions to delete: never one that a reader may still be reading.

    A version is deleted when it was superseded more than ``grace_seconds`` ago **and** it is
    beyond the newest ``keep_versions`` or older than ``max_age_seconds``. Never by count alone,
    nor by an age below the grace: a query that started before two quick replaces still reads
    its version (the time-based retention of Delta's and Iceberg's snapshots). ``None`` disables
    a bound.

    A version that failed its audits is kept unpublished (quarantined) for inspection for
    ``quarantine_seconds`` after its audit, then discarded by reconcile.
    """

    keep_versions: int | None = 2
    max_age_seconds: float | None = 7 * 24 * 3600
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    quarantine_seconds: float = DEFAULT_QUARANTINE_SECONDS

    def __post_init__(self) -> None:
        if self.keep_versions is not None and self.keep_versions < 0:
            raise ValueError(f"invalid keep_versions {self.keep_versions!r}: must be >= 0")
        if self.max_age_seconds is not None and self.max_age_seconds < 0:
            raise ValueError(f"invalid max_age_seconds {self.max_age_seconds!r}: must be >= 0")
        if self.grace_seconds < 0:
            raise ValueError(f"invalid grace_seconds {self.grace_seconds!r}: must be >= 0")
        if self.quarantine_seconds < 0:
            raise ValueError(f"invalid quarantine_seconds {self.quarantine_seconds!r}: must be >= 0")

    def earliest_expiry(self, superseded_at: float) -> float:
        """The earliest time a version superseded at ``superseded_at`` can be deleted (inf: never),
        whatever its rank: by count past the grace period, by age past the maximum age and the grace."""
        delays = [] if self.max_age_seconds is None else [max(self.max_age_seconds, self.grace_seconds)]
        if self.keep_versions is not None:
            delays.append(self.grace_seconds)
        return superseded_at + min(delays, default=math.inf)

    def expired(self, superseded: dict[str, float], now: float) -> list[str]:
        """Which of ``superseded`` (version name -> time it was superseded) to delete."""
        newest_first = sorted(superseded, key=lambda name: superseded[name], reverse=True)
        doomed = []
        for rank, name in enumerate(newest_first):
            age = now - superseded[name]
            too_many = self.keep_versions is not None and rank >= self.keep_versions
            too_old = self.max_age_seconds is not None and age > self.max_age_seconds
            if (too_many or too_old) and age > self.grace_seconds:
                doomed.append(name)
        return doomed
