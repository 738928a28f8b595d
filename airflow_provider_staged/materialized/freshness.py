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


class RefreshMode(str, enum.Enum):
    FULL = "FULL"
    CONTINUOUS = "CONTINUOUS"


_UNIT_SECONDS = {TimeUnit.SECOND: 1, TimeUnit.MINUTE: 60, TimeUnit.HOUR: 3600, TimeUnit.DAY: 86400}
# The value must divide the next larger unit so that refreshes line up with wall-clock boundaries.
_UNIT_PERIOD = {TimeUnit.SECOND: 60, TimeUnit.MINUTE: 60, TimeUnit.HOUR: 24, TimeUnit.DAY: 1}

DEFAULT_FRESHNESS_THRESHOLD = timedelta(minutes=30)


@dataclass(frozen=True)
class Freshness:
    """``FRESHNESS = INTERVAL 'value' unit``, validated as Flink does."""

    value: int
    unit: TimeUnit

    def __post_init__(self) -> None:
        try:
            unit = TimeUnit(str(getattr(self.unit, "value", self.unit)).upper())
        except ValueError:
            raise FreshnessError(
                f"invalid freshness unit {self.unit!r}: use SECOND, MINUTE, HOUR or DAY"
            ) from None
        object.__setattr__(self, "unit", unit)
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value <= 0:
            raise FreshnessError(f"invalid freshness {self}: the interval must be a positive integer")
        period = _UNIT_PERIOD[unit]
        if unit is TimeUnit.DAY and self.value != 1:
            raise FreshnessError(f"invalid freshness {self}: a DAY freshness must be exactly 1")
        if unit is not TimeUnit.DAY and (self.value >= period or period % self.value):
            raise FreshnessError(
                f"invalid freshness {self}: a {unit.value} freshness must be less than {period} "
                f"and divide {period} evenly"
            )

    def __str__(self) -> str:
        return f"INTERVAL '{self.value}' {self.unit.value}"

    def as_timedelta(self) -> timedelta:
        return timedelta(seconds=self.value * _UNIT_SECONDS[self.unit])

    def to_cron(self) -> str:
        """A five-field cron expression that fires once per freshness interval."""
        step = "*" if self.value == 1 else f"*/{self.value}"
        if self.unit is TimeUnit.MINUTE:
            return f"{step} * * * *"
        if self.unit is TimeUnit.HOUR:
            return f"0 {step} * * *"
        if self.unit is TimeUnit.DAY:
            return "0 0 * * *"
        raise FreshnessError(
            f"freshness {self} cannot be scheduled in FULL refresh mode: Airflow cron has no "
            "seconds; use a freshness of at least INTERVAL '1' MINUTE"
        )


def derive_refresh_mode(
    freshness: Freshness,
    explicit: RefreshMode | None = None,
    threshold: timedelta = DEFAULT_FRESHNESS_THRESHOLD,
) -> RefreshMode:
    """Flink's rule: an explicit mode wins, else CONTINUOUS below the threshold, else FULL."""
    if explicit is not None:
        return explicit
    return RefreshMode.CONTINUOUS if freshness.as_timedelta() < threshold else RefreshMode.FULL


_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$", re.IGNORECASE)
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
    return timedelta(seconds=int(match.group(1)) * factor)
