"""Freshness rules (Flink's), cron derivation and refresh-mode derivation."""

import re
from datetime import timedelta

import pytest

from airflow_provider_staged.materialized.freshness import (
    Freshness,
    FreshnessError,
    RefreshMode,
    TimeUnit,
    derive_refresh_mode,
    parse_duration,
)

FULL_ALLOWED = [
    *((n, "SECOND") for n in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)),
    *((n, "MINUTE") for n in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)),
    *((n, "HOUR") for n in (1, 2, 3, 4, 6, 8, 12)),
    (1, "DAY"),
    (1, "WEEK"),
]
# Flink's validateFreshnessForCron: refused in FULL mode, fine for CONTINUOUS.
FULL_FORBIDDEN = [
    *((n, "SECOND") for n in (7, 9, 45, 59, 60, 120)),
    *((n, "MINUTE") for n in (7, 8, 25, 40, 60, 90)),
    *((n, "HOUR") for n in (5, 7, 9, 10, 16, 24, 48)),
    *((n, "DAY") for n in (2, 3, 7, 30)),
    *((n, "WEEK") for n in (2, 4, 52)),
]


@pytest.mark.parametrize(("value", "unit"), FULL_ALLOWED + FULL_FORBIDDEN)
def test_any_positive_interval_is_a_freshness(value: int, unit: str) -> None:
    freshness = Freshness(value, unit)
    assert freshness.unit is TimeUnit(unit)
    assert freshness.as_timedelta() == timedelta(**{unit.lower() + "s": value})
    assert str(freshness) == f"INTERVAL '{value}' {unit}"


@pytest.mark.parametrize(("value", "unit"), FULL_ALLOWED)
def test_full_mode_allows(value: int, unit: str) -> None:
    Freshness(value, unit).check_full_refresh()


@pytest.mark.parametrize(("value", "unit"), FULL_FORBIDDEN)
def test_full_mode_limits_name_the_value(value: int, unit: str) -> None:
    expected = rf"^invalid freshness INTERVAL '{value}' {unit}: In full refresh mode"
    with pytest.raises(FreshnessError, match=expected):
        Freshness(value, unit).to_cron()


@pytest.mark.parametrize(("value", "unit"), [(0, "SECOND"), (0, "MINUTE"), (0, "HOUR"), (0, "DAY")])
def test_zero_is_no_freshness(value: int, unit: str) -> None:
    with pytest.raises(FreshnessError, match=rf"INTERVAL '{value}' {unit}.*positive integer"):
        Freshness(value, unit)


@pytest.mark.parametrize("value", [True, -1, 1.5, "1"])
def test_non_integer_values_are_rejected(value: object) -> None:
    with pytest.raises(FreshnessError, match="positive integer"):
        Freshness(value, "MINUTE")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [2**31, 12345678901234567890])
def test_values_beyond_flinks_int_are_rejected(value: int) -> None:
    """IntervalFreshnessTest.testIllegalIntervalFreshness: '12345678901234567890' (and '-2', '0'
    above; '2efedd' and '2.5' are refused by the parser, test_mt_definition)."""
    with pytest.raises(FreshnessError, match=f"positive integer type values. But was: {value}$"):
        Freshness(value, "MINUTE")


def test_freshness_longer_than_a_timedelta_is_rejected() -> None:
    with pytest.raises(FreshnessError, match="INTERVAL '2147483647' WEEK: longer than 999999999 days"):
        Freshness(2**31 - 1, "WEEK")


def test_unknown_unit() -> None:
    units = "Materialized table freshness only supports SECOND, MINUTE, HOUR, DAY, WEEK as the time unit."
    with pytest.raises(FreshnessError, match=re.escape(f"'MONTH': {units}")):
        Freshness(1, "MONTH")


# IntervalFreshnessTest.testConvert{Second,Minute,Hour,Day}FreshnessToCronExpression: Flink's messages.
FACTORS = "only freshness that are factors of"
SUPPORTED = "are currently supported when the time unit is"


@pytest.mark.parametrize(
    ("value", "unit", "message"),
    [
        (90, "SECOND", "freshness must be less than 60 when the time unit is SECOND."),
        (32, "SECOND", f"{FACTORS} 60 {SUPPORTED} SECOND."),
        (90, "MINUTE", "freshness must be less than 60 when the time unit is MINUTE."),
        (32, "MINUTE", f"{FACTORS} 60 {SUPPORTED} MINUTE."),
        (24, "HOUR", "freshness must be less than 24 when the time unit is HOUR."),
        (14, "HOUR", f"{FACTORS} 24 {SUPPORTED} HOUR."),
        (2, "DAY", "freshness must be 1 when the time unit is DAY."),
    ],
)
def test_flink_full_refresh_messages(value: int, unit: str, message: str) -> None:
    with pytest.raises(FreshnessError) as info:
        Freshness(value, unit).to_cron()
    assert str(info.value) == f"invalid freshness INTERVAL '{value}' {unit}: In full refresh mode, {message}"


@pytest.mark.parametrize(
    ("value", "unit", "cron"),
    [
        (1, "MINUTE", "* * * * *"),
        (15, "MINUTE", "*/15 * * * *"),
        (1, "HOUR", "0 * * * *"),
        (2, "HOUR", "0 */2 * * *"),
        (12, "HOUR", "0 */12 * * *"),
        (1, "DAY", "0 0 * * *"),
        (1, "WEEK", "0 0 * * 0"),  # Airflow's @weekly
        # IntervalFreshnessTest's crons, in Airflow's five fields (Flink: Quartz '0 0/30 * * * ? *').
        (30, "MINUTE", "*/30 * * * *"),
        (5, "MINUTE", "*/5 * * * *"),
        (4, "HOUR", "0 */4 * * *"),
    ],
)
def test_to_cron(value: int, unit: str, cron: str) -> None:
    assert Freshness(value, unit).to_cron() == cron


@pytest.mark.parametrize(
    ("value", "cron"),
    [(1, "* * * * * *"), (5, "* * * * * */5"), (10, "* * * * * */10"), (30, "* * * * * */30")],
)
def test_second_freshness_is_a_six_field_cron(value: int, cron: str) -> None:
    """Flink's ``0/n * * * * ? *`` in croniter's form (seconds last)."""
    assert Freshness(value, "SECOND").to_cron() == cron


@pytest.mark.parametrize(
    ("freshness", "explicit", "threshold", "mode"),
    [
        (Freshness(1, "DAY"), None, timedelta(minutes=30), RefreshMode.FULL),
        (Freshness(30, "MINUTE"), None, timedelta(minutes=30), RefreshMode.FULL),
        (Freshness(20, "MINUTE"), None, timedelta(minutes=30), RefreshMode.CONTINUOUS),
        (Freshness(10, "SECOND"), None, timedelta(minutes=30), RefreshMode.CONTINUOUS),
        (Freshness(20, "MINUTE"), None, timedelta(minutes=10), RefreshMode.FULL),
        (Freshness(2, "HOUR"), None, timedelta(hours=3), RefreshMode.CONTINUOUS),
        (Freshness(10, "SECOND"), RefreshMode.FULL, timedelta(minutes=30), RefreshMode.FULL),
        (Freshness(1, "DAY"), RefreshMode.CONTINUOUS, timedelta(minutes=30), RefreshMode.CONTINUOUS),
    ],
)
def test_derive_refresh_mode(
    freshness: Freshness, explicit: RefreshMode | None, threshold: timedelta, mode: RefreshMode
) -> None:
    assert derive_refresh_mode(freshness, explicit, threshold) is mode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30 min", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("2 days", timedelta(days=2)),
        (" 45 SECONDS ", timedelta(seconds=45)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", [
    "", "30", "min", "0 min", "30 fortnights", "-1 h", "1.5 h",
    "\uff13\uff10 min", "\u0663 h", "\u00b2 h",  # fullwidth, Arabic-Indic, superscript digits
    "99999999999999999999 d", "9" * 5000 + " s",  # beyond a timedelta, beyond int()'s 4300 digits
])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(FreshnessError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(("value", "unit", "duration"), [
    (20, "SECOND", timedelta(seconds=20)),
    (3, "MINUTE", timedelta(minutes=3)),
    (3, "HOUR", timedelta(hours=3)),
    (3, "DAY", timedelta(days=3)),
])
def test_flink_freshness_to_duration(value: int, unit: str, duration: timedelta) -> None:
    """IntervalFreshnessTest.testConvertFreshnessToDuration."""
    assert Freshness(value, unit).as_timedelta() == duration
