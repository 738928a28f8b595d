"""Auto-suspend of a materialized table: the count of consecutive failed scheduled refreshes.

Pure logic (no Airflow, no catalog). As Snowflake does for dynamic tables, a table whose
scheduled refreshes failed ``suspend-after-num-failures`` times in a row (default 5; ``0``
never suspends) is suspended with the reason ``SUSPENDED_DUE_TO_ERRORS``. Only scheduled runs
count: a manual refresh is someone trying things out, and its failure says nothing about the
schedule. Any successful refresh, manual or scheduled, ends the streak; so does RESUME.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_staged.staging.identifiers import is_whole_number

SUSPENDED_DUE_TO_ERRORS = "SUSPENDED_DUE_TO_ERRORS"
SUSPEND_OPTION = "suspend-after-num-failures"
DEFAULT_SUSPEND_AFTER = 5
_SCHEDULED = "scheduled"
# A failure summary is kept with the table (a metastore parameter): bounded.
_SUMMARY_CHARS = 300


@dataclass(frozen=True)
class FailureStreak:
    """Consecutive failed scheduled refreshes; ``last_failure`` is ``"<run id>: <error>"``."""

    count: int = 0
    last_failure: str | None = None


def parse_suspend_after(value: str | None) -> int:
    """The option's value as a number of failures (``None``: the default); ValueError if bad."""
    if value is None:
        return DEFAULT_SUSPEND_AFTER
    text = value.strip()
    if not is_whole_number(text) or int(text) > 10_000:
        raise ValueError(f"option {SUSPEND_OPTION!r} must be an integer 0..10000 (0: never), not {value!r}")
    return int(text)


def is_scheduled(run_type: str | None, run_id: str) -> bool:
    """Whether a run was made by the schedule (Airflow's ``scheduled`` run type)."""
    if run_type is not None:
        return str(getattr(run_type, "value", run_type)) == _SCHEDULED
    # Callbacks run outside the task (e.g. for a lost task) may lack the run type: Airflow
    # names scheduled runs "scheduled__<logical date>".
    return run_id.startswith(_SCHEDULED + "__")


def summarize(run_id: str, error: object) -> str:
    """One bounded line naming the run and its error."""
    text = " ".join(str(error or "unknown error").split())
    line = f"{run_id}: {text}"
    return line if len(line) <= _SUMMARY_CHARS else line[: _SUMMARY_CHARS - 3] + "..."


def after_failure(
    streak: FailureStreak, *, scheduled: bool, summary: str, suspend_after: int, suspended: bool
) -> tuple[FailureStreak, bool]:
    """The streak after a failed refresh and whether the table must be suspended now.

    A manual failure changes nothing; a table already suspended is not suspended again.
    """
    if not scheduled:
        return streak, False
    counted = FailureStreak(streak.count + 1, summary)
    return counted, (not suspended and suspend_after > 0 and counted.count >= suspend_after)


def suspension_note(reason: str | None, streak: FailureStreak) -> str | None:
    """What a suspended table's DAG description and ``describe`` say about why."""
    if reason is None:
        return None
    if reason != SUSPENDED_DUE_TO_ERRORS:
        return f"SUSPENDED ({reason})"
    note = f"SUSPENDED_DUE_TO_ERRORS after {streak.count} consecutive failed scheduled refreshes"
    return note + (f"; last: {streak.last_failure}" if streak.last_failure else "") + \
        " (staged mt resume clears it)"
