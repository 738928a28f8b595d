"""Freshness of a materialized table, its cron schedule and the refresh mode it implies (FLIP-435)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import timedelta


class FreshnessError(ValueError):
    """A freshness, threshold or refresh mode that Flink's rules do not allow."""


class TimeUnit(str, enum.Enum):
    SECOND = "SECOND"
    MINUTE = "MINUTE"
    HOUR = "HOUR"
    DAY = "DAY"
    WEEK = "WEEK"


class RefreshMode(str, enum.Enum):
    FULL = "FULL"
    CONTINUOUS = "CONTINUOUS"


_UNIT_SECONDS = {
    TimeUnit.SECOND: 1, TimeUnit.MINUTE: 60, TimeUnit.HOUR: 3600, TimeUnit.DAY: 86400, TimeUnit.WEEK: 604800,
}
# FULL refresh: the value must divide the next larger unit (see ``check_full_refresh``).
_UNIT_PERIOD = {TimeUnit.SECOND: 60, TimeUnit.MINUTE: 60, TimeUnit.HOUR: 24}
# Flink's wording (MaterializedTableUtils, IntervalFreshness), after the value it refuses.
UNITS_MESSAGE = "Materialized table freshness only supports SECOND, MINUTE, HOUR, DAY, WEEK as the time unit."
POSITIVE_MESSAGE = "The freshness interval currently only supports positive integer type values. But was: "
_MAX_VALUE = 2**31 - 1  # Flink's int; and no longer than Python's timedelta can hold
_MAX_SECONDS = int(timedelta.max.total_seconds())

DEFAULT_FRESHNESS_THRESHOLD = timedelta(minutes=30)


@dataclass(frozen=True)
class Freshness:
    """``FRESHNESS = INTERVAL 'value' unit``: any positive interval (FULL mode checks more)."""

    value: int
    unit: TimeUnit

    def __post_init__(self) -> None:
        try:
            unit = TimeUnit(str(getattr(self.unit, "value", self.unit)).upper())
        except ValueError:
            raise FreshnessError(f"invalid freshness unit {self.unit!r}: {UNITS_MESSAGE}") from None
        object.__setattr__(self, "unit", unit)
        if (isinstance(self.value, bool) or not isinstance(self.value, int)
                or not 0 < self.value <= _MAX_VALUE):
            raise FreshnessError(f"invalid freshness {self}: {POSITIVE_MESSAGE}{self.value}")
        if self.value * _UNIT_SECONDS[unit] > _MAX_SECONDS:
            raise FreshnessError(f"invalid freshness {self}: longer than {timedelta.max.days} days")

    def __str__(self) -> str:
        return f"INTERVAL '{self.value}' {self.unit.value}"

    def as_timedelta(self) -> timedelta:
        return timedelta(seconds=self.value * _UNIT_SECONDS[self.unit])

    def check_full_refresh(self) -> None:
        """Flink's FULL-mode limits (``validateFreshnessForCron``), in its words: the interval
        must be less than and divide the next larger unit (60 seconds, 60 minutes, 24 hours) so
        that refreshes line up with wall-clock boundaries, and a DAY freshness must be exactly 1
        (months differ in length); so must a WEEK (a cron has no "every n weeks").
        CONTINUOUS tables accept any positive interval."""
        unit = self.unit.value
        if self.unit not in _UNIT_PERIOD:  # DAY, WEEK
            if self.value != 1:
                raise FreshnessError(
                    f"invalid freshness {self}: In full refresh mode, freshness must be 1 when the "
                    f"time unit is {unit}."
                )
            return
        period = _UNIT_PERIOD[self.unit]
        if self.value >= period:
            raise FreshnessError(
                f"invalid freshness {self}: In full refresh mode, freshness must be less than "
                f"{period} when the time unit is {unit}."
            )
        if period % self.value:
            raise FreshnessError(
                f"invalid freshness {self}: In full refresh mode, only freshness that are factors "
                f"of {period} are currently supported when the time unit is {unit}."
            )

    def to_cron(self) -> str:
        """The cron of a FULL refresh, as Flink's ``convertFreshnessToCron``; checks the limits.

        Minutes and up are five-field crons. A SECOND freshness is croniter's six-field form
        with seconds last (``* * * * * */10``: every 10 s aligned to the minute, Flink's
        ``0/10 * * * * ? *``), which Airflow's ``CronTriggerTimetable`` schedules to the second.
        A WEEK is Airflow's ``@weekly``: Sunday at midnight.
        """
        self.check_full_refresh()
        step = "*" if self.value == 1 else f"*/{self.value}"
        if self.unit is TimeUnit.SECOND:
            return f"* * * * * {step}"
        if self.unit is TimeUnit.MINUTE:
            return f"{step} * * * *"
        if self.unit is TimeUnit.HOUR:
            return f"0 {step} * * *"
        if self.unit is TimeUnit.WEEK:
            return "0 0 * * 0"
        return "0 0 * * *"


def derive_refresh_mode(
    freshness: Freshness,
    explicit: RefreshMode | None = None,
    threshold: timedelta = DEFAULT_FRESHNESS_THRESHOLD,
) -> RefreshMode:
    """Flink's rule: an explicit mode wins, else CONTINUOUS below the threshold, else FULL."""
    if explicit is not None:
        return explicit
    return RefreshMode.CONTINUOUS if freshness.as_timedelta() < threshold else RefreshMode.FULL


# ASCII digits only: Python's \d and int() also take fullwidth or Arabic-Indic digits.
_DURATION = re.compile(r"^\s*([0-9]{1,20})\s*([a-z]+)\s*$", re.IGNORECASE)
_DURATION_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
}


def parse_duration(text: str) -> timedelta:
    """Parse a Flink-style duration such as ``30 min``, ``1 h`` or ``2 days``."""
    match = _DURATION.match(text)
    factor = _DURATION_UNITS.get(match.group(2).lower()) if match else None
    if match is None or factor is None or int(match.group(1)) <= 0:
        raise FreshnessError(
            f"invalid duration {text!r}: expected a positive number and a unit "
            "(s, min, h or d), e.g. '30 min'"
        )
    seconds = int(match.group(1)) * factor
    if seconds > _MAX_SECONDS:
        raise FreshnessError(f"invalid duration {text!r}: longer than {timedelta.max.days} days")
    return timedelta(seconds=seconds)
