"""Retrying a catalog read-modify-write that lost a compare-and-set race."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from airflow_provider_staged.staging.errors import CatalogConflictError

log = logging.getLogger(__name__)

T = TypeVar("T")

CONFLICT_ATTEMPTS = 30


def retry_on_conflict(operation: Callable[[], T], what: str) -> T:
    """Run ``operation`` (a whole read-modify-write) again while the catalog refuses its write
    as a conflict: a refused write changed nothing, and the next read sees the other writer's.
    At most ``CONFLICT_ATTEMPTS`` times (read when called)."""
    attempts = CONFLICT_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except CatalogConflictError as conflict:
            if attempt == attempts:
                raise CatalogConflictError(
                    f"{what}: {attempts} writes in a row lost to concurrent writers; nothing was "
                    f"changed by this one ({conflict})"
                ) from conflict
            log.info("%s: another writer came first (%s); reading again", what, conflict)
            # Jitter: two writers that keep colliding on the same beat stop colliding.
            time.sleep(random.uniform(0, 0.005 * attempt))
    raise AssertionError("unreachable")
