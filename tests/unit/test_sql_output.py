"""Result rendering: tableau box, changelog, CSV and JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from datetime import date
from decimal import Decimal
from itertools import pairwise

import pytest
from wcwidth import wcswidth

from airflow_provider_staged.cli.sql import Printer
from airflow_provider_staged.sql.output import (
    ResultSet,
    render_changelog,
    render_csv,
    render_json,
    render_tableau,
)
from airflow_provider_staged.sql.properties import RESULT_MODE, SessionProperties

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


QUERY = """CREATE MATERIALIZED TABLE db.daily_orders
PARTITIONED BY (ds)
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, customer_id, COUNT(*) AS orders, SUM(amount) AS total_amount_converted_to_euros_at_daily_rate
\tFROM db.orders JOIN db.rates USING (ds, currency) WHERE status <> 'cancelled' GROUP BY ds, customer_id"""
HANDLER = json.dumps({"dag_id": "staged_mt__db__daily_orders", "schedule": "@daily",
                      "url": "http://localhost:8080/dags/staged_mt__db__daily_orders/grid?" + "x" * 170})
DESCRIBE = ResultSet(["property", "value"], [
    ("table", "db.daily_orders (exists)"), ("refresh handler", HANDLER), ("query", QUERY), ("paused", "False")
])


def _box(text: str) -> list[str]:
    """The box's lines (the footer dropped), checked to be a rectangle of display columns."""
    lines = text.splitlines()[:-1]
    assert len({wcswidth(line) for line in lines}) == 1, text
    return lines


def _rows(lines: list[str]) -> list[list[list[str]]]:
    """Each row's cells as their physical lines, split where the rule has its ``+`` (ASCII only);
    a row starts where its first cell is not blank."""
    edges = [i for i, char in enumerate(lines[0]) if char == "+"]
    rows: list[list[list[str]]] = []
    for line in lines[3:-1]:
        assert [line[edge] for edge in edges] == ["|"] * len(edges), line  # the borders line up
        parts = [line[start + 2:end - 1] for start, end in pairwise(edges)]
        if parts[0].strip():
            rows.append([[part] for part in parts])
        else:
            for cell, part in zip(rows[-1], parts, strict=True):
                cell.append(part)
    return rows


def _shows(value: str, pieces: list[str]) -> bool:
    """``pieces`` hold every character of ``value`` in order; only whitespace may differ between them."""
    pattern = r"\s*" + r"\s*".join(re.escape(piece.strip()) for piece in pieces) + r"\s*"
    return re.fullmatch(pattern, value.expandtabs()) is not None


def test_tableau_folds_a_describe_result_to_the_width() -> None:
    assert len(HANDLER) >= 300 and len(render_tableau(DESCRIBE).splitlines()[0]) > 300  # today's width
    text = render_tableau(DESCRIBE, max_width=100)
    lines = _box(text)
    assert max(wcswidth(line) for line in lines) <= 100
    rows = _rows(lines)
    assert len(rows) == len(DESCRIBE.rows) and text.splitlines()[-1] == "4 rows in set"
    for row, cells in zip(DESCRIBE.rows, rows, strict=True):
        assert all(_shows(value, cell) for value, cell in zip(row, cells, strict=True)), cells
    assert len(rows[2][1]) > QUERY.count("\n") + 1  # the query's long lines folded too


def test_tableau_folds_wide_characters_by_display_width() -> None:
    value = "日本語のテキスト" * 8
    lines = _box(render_tableau(ResultSet(["text"], [(value,)]), max_width=31))
    assert wcswidth(lines[0]) == 31  # 27 columns of text: 13 wide characters, never half of one
    pieces = [line[2:-2] for line in lines[3:-1]]
    assert "".join(piece.rstrip() for piece in pieces) == value
    assert all(wcswidth(piece.rstrip()) == 26 for piece in pieces[:-1])


def test_tableau_numbers_stay_right_aligned_when_folded() -> None:
    lines = _box(render_tableau(ResultSet(["n", "text"], [(1, "word " * 12), (12345, "x")]), max_width=30))
    assert wcswidth(lines[0]) == 30
    assert lines[3].startswith("|     1 | word") and lines[4].startswith("|       | word")
    assert lines[-2].startswith("| 12345 | x")


def test_tableau_too_narrow_a_width_keeps_every_character() -> None:
    row = ("k1", "a" * 30, "two words " * 4, 1234567890123, None)
    text = render_tableau(ResultSet(["c1", "c2", "c3", "c4", "c5"], [row]), max_width=10)
    rows = _rows(_box(text))  # as narrow as the floors allow, still a box
    assert len(rows) == 1 and all(_shows(str(value) if value else "<NULL>", cell)
                                  for value, cell in zip(row, rows[0], strict=True)), rows


def test_tableau_lines_of_a_value_stack_in_its_cell() -> None:
    text = render_tableau(ResultSet(["k", "v"], [("a", "line one\nline 2\r\nthird\tx"), ("bb", "")]))
    assert text.splitlines() == [
        "+----+-----------+",
        "| k  | v         |",
        "+----+-----------+",
        "| a  | line one  |",
        "|    | line 2    |",
        "|    | third   x |",
        "| bb |           |",
        "+----+-----------+",
        "2 rows in set",
    ]


@pytest.mark.parametrize("mode", ["tableau", "table"])
@pytest.mark.parametrize("terminal", [True, False])
def test_the_client_folds_to_a_terminal_and_not_into_a_pipe(
    mode: str, terminal: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *_: os.terminal_size((100, 1000)))
    properties = SessionProperties()
    properties.put(*properties.checked(RESULT_MODE, mode))
    Printer(properties, None, interactive=True)(DESCRIBE)
    printed = capsys.readouterr().out
    assert printed == render_tableau(DESCRIBE, 100 if terminal else None) + "\n"
    assert (max(map(wcswidth, printed.splitlines())) <= 100) == terminal
