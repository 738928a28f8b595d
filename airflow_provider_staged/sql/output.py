"""How the SQL client prints a result: Flink's ``tableau`` box, ``changelog`` rows, CSV, JSON.

Pure: a :class:`ResultSet` in, text out. ``table`` mode is the tableau text in a pager (client).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from wcwidth import wcswidth, wcwidth

NULL = "<NULL>"
MIN_COLUMN = 8  # a narrowed column keeps this many display columns, or its header's width if wider


@dataclass(frozen=True)
class ResultSet:
    """A statement's rows (plain Python values) or, with no columns, just its ``message``."""

    columns: list[str]
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    truncated: bool = False  # more rows existed than the max-rows setting let through
    message: str | None = None
    kinds: tuple[str, ...] | None = None  # each row's change kind (+I, -U, +U); None: all +I
    # A streaming query's changes: one result per micro-batch (with kinds), then one message.
    changes: Iterator[ResultSet] | None = field(default=None, compare=False)

    @classmethod
    def info(cls, message: str) -> ResultSet:
        return cls([], message=message)

    @classmethod
    def of_dicts(cls, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> ResultSet:
        return cls(list(columns), [tuple(row.get(column) for column in columns) for row in rows])


def _text(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return str(value).upper()
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _width(text: str) -> int:
    width = wcswidth(text)
    return width if width >= 0 else len(text)  # control characters: count them as one each


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * (width - _width(text))
    return fill + text if right else text + fill


def _footer(result: ResultSet) -> str:
    count = len(result.rows)
    if result.truncated:
        return f"{count} rows shown (more rows exist: raise 'sql-client.execution.max-table-result.rows')"
    return "Empty set" if count == 0 else f"{count} row{'s' if count != 1 else ''} in set"


def _lines(text: str) -> list[str]:
    """A cell's physical lines: one per line break (a raw one would break the box), tabs as spaces."""
    return text.expandtabs().splitlines() or [""]


def _char_width(char: str) -> int:
    width = wcwidth(char)
    return 1 if width < 0 else width  # as _width counts control characters


def _fit(text: str, width: int) -> int:
    """How many leading characters of ``text`` fit in ``width`` display columns (at least one)."""
    used = cut = 0
    while cut < len(text) and used + _char_width(text[cut]) <= width:
        used += _char_width(text[cut])
        cut += 1
    # wcswidth counts some sequences (an emoji with VS16) wider than their characters: _pad uses it
    while cut > 1 and _width(text[:cut]) > width:
        cut -= 1
    return max(cut, 1)


def _fold(line: str, width: int) -> list[str]:
    """``line`` as pieces of at most ``width`` display columns, nothing cut: folded at the last space
    if that leaves the piece at least half full (the spaces there are the fold), else mid-word."""
    if _width(line) <= width:
        return [line]
    pieces = []
    while (cut := _fit(line, width)) < len(line):
        space = line.rfind(" ", 0, cut + 1)  # a space just past the piece is a fold point as well
        if space >= max(cut // 2, 1):
            pieces.append(line[:space].rstrip(" "))
            line = line[space:].lstrip(" ")
        else:
            pieces.append(line[:cut])
            line = line[cut:]
    return [*pieces, line] if line else pieces


def _narrowed(widths: list[int], floors: list[int], room: int) -> list[int]:
    """Column widths summing to at most ``room``: the widest narrow first, none below its floor
    (the floors when even they do not fit: a wider box, but no character lost)."""
    def capped(cap: int) -> list[int]:
        return [max(floor, min(width, cap)) for width, floor in zip(widths, floors, strict=True)]

    low, high = 0, max(widths)  # the largest cap that fits: capped(0) is the floors
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if sum(capped(middle)) <= room else (low, middle - 1)
    return capped(low)


def _row(cells: Sequence[list[str]], widths: list[int], right: Sequence[bool]) -> list[str]:
    """A row's box lines: each cell's lines folded to its column's width, shorter cells blank below."""
    folded = [[piece for line in cell for piece in _fold(line, width)]
              for cell, width in zip(cells, widths, strict=True)]
    return ["| " + " | ".join(_pad(cell[k] if k < len(cell) else "", width, r)
                              for cell, width, r in zip(folded, widths, right, strict=True)) + " |"
            for k in range(max(map(len, folded)))]


def render_tableau(result: ResultSet, max_width: int | None = None) -> str:
    """Flink's tableau: a boxed table, numbers right-aligned, ``<NULL>`` for nulls, a row count.

    A value's lines stack inside its cell. A box wider than ``max_width`` narrows its widest columns
    (down to ``MIN_COLUMN`` or the header's width) and folds their longer lines: no value is cut.
    """
    if not result.columns:
        return f"[INFO] {result.message or 'Execute statement succeeded.'}"
    header = [_lines(column) for column in result.columns]
    cells = [[_lines(_text(value)) for value in row] for row in result.rows]
    widths = [max(_width(line) for cell in (header[i], *(row[i] for row in cells)) for line in cell)
              for i in range(len(header))]
    frame = 3 * len(widths) + 1  # "| " before each column, " |" after the last, " | " between
    if max_width is not None and sum(widths) + frame > max_width:
        floors = [min(width, max(MIN_COLUMN, *map(_width, head)))
                  for width, head in zip(widths, header, strict=True)]
        widths = _narrowed(widths, floors, max_width - frame)
    numeric = [
        bool(result.rows) and all(isinstance(row[i], (int, float, Decimal)) and not isinstance(row[i], bool)
                                  for row in result.rows if row[i] is not None)
        for i in range(len(result.columns))
    ]
    rule = "+" + "+".join("-" * (width + 2) for width in widths) + "+"
    lines = [rule, *_row(header, widths, [False] * len(widths)), rule]
    for row in cells:
        lines += _row(row, widths, numeric)
    if cells:
        lines.append(rule)
    lines.append(_footer(result))
    return "\n".join(lines)


def changelog_head(columns: Sequence[str]) -> str:
    return "op | " + " | ".join(columns)


def changelog_lines(result: ResultSet) -> list[str]:
    """Each row with its change kind, as Flink's changelog mode (a batch result is all inserts)."""
    kinds = result.kinds or ("+I",) * len(result.rows)
    return [f"{kind} | " + " | ".join(_text(value) for value in row)
            for kind, row in zip(kinds, result.rows, strict=True)]


def render_changelog(result: ResultSet) -> str:
    if not result.columns:
        return render_tableau(result)
    return "\n".join([changelog_head(result.columns), *changelog_lines(result), _footer(result)])


def render_csv(result: ResultSet) -> str:
    """Header and rows (nulls empty); a statement without rows prints nothing."""
    if not result.columns:
        return ""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([["" if value is None else _csv_value(value) for value in row] for row in result.rows])
    return buffer.getvalue().rstrip("\n")


def _csv_value(value: Any) -> Any:
    return json.dumps(value, default=str) if isinstance(value, (dict, list, tuple)) else _json_scalar(value)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def render_json(result: ResultSet) -> str:
    """One JSON document on one line: the list of row objects (nothing for a statement without rows)."""
    if not result.columns:
        return ""
    rows = [{column: _json_value(value) for column, value in zip(result.columns, row, strict=True)}
            for row in result.rows]
    return json.dumps(rows, default=str, ensure_ascii=False)


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    return _json_scalar(value)


RENDERERS = {"tableau": render_tableau, "table": render_tableau, "changelog": render_changelog,
             "csv": render_csv, "json": render_json}


def _plain(value: Any) -> Any:
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):  # a struct
        return {key: _plain(item) for key, item in as_dict().items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def plain_row(row: Any) -> tuple[Any, ...]:
    """A Spark row as plain Python values (structs as dicts), as the renderers print them."""
    return tuple(_plain(value) for value in row)
