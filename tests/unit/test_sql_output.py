"""Result rendering: tableau box, changelog, CSV and JSON."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

from airflow_provider_staged.sql.output import (
    ResultSet,
    render_changelog,
    render_csv,
    render_json,
    render_tableau,
)

RESULT = ResultSet(["id", "name", "day"], [(1, "ä, b", date(2024, 1, 2)), (10, None, None)])


def test_tableau_box_nulls_alignment_and_count() -> None:
    lines = render_tableau(RESULT).splitlines()
    assert len({len(line) for line in lines[:-1]}) == 1  # a rectangle (<NULL> widens its column)
    assert lines[3].startswith("|  1 |") and lines[4].startswith("| 10 |")  # numbers right-aligned
    assert "<NULL>" in lines[4] and lines[-1] == "2 rows in set"


def test_tableau_wide_characters_keep_the_box() -> None:
    lines = render_tableau(ResultSet(["x"], [("日本",), ("ab",)])).splitlines()
    assert lines[3] == "| 日本 |" and lines[4] == "| ab   |"


def test_tableau_messages_empty_and_truncated() -> None:
    assert render_tableau(ResultSet.info("done.")) == "[INFO] done."
    assert render_tableau(ResultSet(["a"], [])).splitlines()[-1] == "Empty set"
    assert "more rows exist" in render_tableau(ResultSet(["a"], [(1,)], truncated=True))


def test_changelog_marks_inserts() -> None:
    assert render_changelog(RESULT).splitlines()[:3] == [
        "op | id | name | day",
        "+I | 1 | ä, b | 2024-01-02",
        "+I | 10 | <NULL> | <NULL>",
    ]


def test_csv_and_json_are_machine_readable() -> None:
    assert render_csv(RESULT) == 'id,name,day\n1,"ä, b",2024-01-02\n10,,'
    rows = json.loads(render_json(ResultSet(["a", "s"], [(Decimal("1.50"), {"k": [1, 2]})])))
    assert rows == [{"a": "1.50", "s": {"k": [1, 2]}}]
    assert render_csv(ResultSet.info("x")) == "" and render_json(ResultSet.info("x")) == ""
