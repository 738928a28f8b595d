"""Auto-suspend counting: only scheduled failures count, any success or RESUME resets."""

from __future__ import annotations

import pytest

from airflow_provider_staged.materialized.definition import DefinitionError, parse_definition
from airflow_provider_staged.materialized.failure_streak import (
    DEFAULT_SUSPEND_AFTER,
    SUSPENDED_DUE_TO_ERRORS,
    FailureStreak,
    after_failure,
    is_scheduled,
    parse_suspend_after,
    summarize,
    suspension_note,
)


def fail(streak: FailureStreak, scheduled: bool = True, limit: int = 5, suspended: bool = False):
    return after_failure(streak, scheduled=scheduled, summary=f"run{streak.count}: boom",
                         suspend_after=limit, suspended=suspended)


def test_fifth_consecutive_scheduled_failure_suspends() -> None:
    streak, verdicts = FailureStreak(), []
    for _ in range(5):
        streak, suspend = fail(streak)
        verdicts.append(suspend)
    assert verdicts == [False, False, False, False, True]
    assert streak == FailureStreak(5, "run4: boom")


def test_manual_failures_do_not_count() -> None:
    streak = FailureStreak(4, "x")
    assert fail(streak, scheduled=False) == (streak, False)


def test_already_suspended_or_disabled_is_not_suspended_again() -> None:
    assert fail(FailureStreak(7), suspended=True) == (FailureStreak(8, "run7: boom"), False)
    assert fail(FailureStreak(100), limit=0)[1] is False
    assert fail(FailureStreak(0), limit=1)[1] is True


def test_run_type_and_fallback_on_run_id() -> None:
    assert is_scheduled("scheduled", "manual__x")
    assert not is_scheduled("manual", "scheduled__2024")
    assert not is_scheduled("backfill", "backfill__2024")
    assert is_scheduled(None, "scheduled__2024-01-01T00:00:00+00:00")
    assert not is_scheduled(None, "manual__2024-01-01")


def test_option_parsing_and_definition() -> None:
    assert parse_suspend_after(None) == DEFAULT_SUSPEND_AFTER == 5
    assert parse_suspend_after(" 0 ") == 0
    for bad in ("-1", "x", "2.5", "10001", "\uff15", "\u00b2", "9" * 5000):
        with pytest.raises(ValueError, match="suspend-after-num-failures"):
            parse_suspend_after(bad)
    text = ("CREATE MATERIALIZED TABLE a.b {with} FRESHNESS = INTERVAL '1' DAY "
            "AS SELECT 1 AS x")
    assert parse_definition(text.replace("{with}", "")).suspend_after_failures == 5
    three = "WITH ('suspend-after-num-failures' = '3')"
    assert parse_definition(text.replace("{with}", three)).suspend_after_failures == 3
    with pytest.raises(DefinitionError, match=r":1: WITH: option 'suspend-after-num-failures'"):
        parse_definition(text.replace("{with}", "WITH ('suspend-after-num-failures' = 'many')"))


def test_summary_is_one_bounded_line_and_note_names_the_reason() -> None:
    line = summarize("scheduled__1", "Table not found\n  at line 3" + "x" * 1000)
    assert "\n" not in line and len(line) == 300 and line.startswith("scheduled__1: Table not found at")
    note = suspension_note(SUSPENDED_DUE_TO_ERRORS, FailureStreak(5, "scheduled__1: boom"))
    assert note.startswith("SUSPENDED_DUE_TO_ERRORS after 5 consecutive failed scheduled refreshes")
    assert "scheduled__1: boom" in note
    assert suspension_note(None, FailureStreak(3)) is None
