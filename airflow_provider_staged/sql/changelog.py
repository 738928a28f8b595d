"""The changelog of a streaming query in the SQL client, in Flink's row kinds (pure, no Spark).

An append-only query prints each new row as ``+I``. An aggregation runs in Spark's ``update``
output mode: each micro-batch holds the new row of every key whose result changed, and
:class:`ChangelogTracker` turns it into Flink's kinds: ``+I`` the first time a key appears, else
``-U`` (the row the client remembered for the key) and ``+U`` (the new one). The key is the
outermost SELECT's GROUP BY; :func:`changelog_plan` finds it among the output columns, or adds
it as hidden trailing columns that are never printed.

What the client remembers is bounded by ``sql-client.execution.max-table-result.rows`` (as
Flink bounds its result buffer): past that many keys it forgets the least recently changed one,
and a later change of a key it may have forgotten prints as ``+U`` alone (an upsert, as in
Flink's upsert changelogs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_staged.materialized.continuous import aggregates_itself

INSERT, UPDATE_BEFORE, UPDATE_AFTER = "+I", "-U", "+U"
HIDDEN_KEY_PREFIX = "__staged_key_"


class ChangelogError(ValueError):
    """A query whose changes the client cannot follow; the message says why."""


@dataclass(frozen=True)
class ChangelogPlan:
    """How to run and follow a streaming query.

    ``key``: indices of the key columns in each row Spark returns (None: append-only, every row
    an insert); ``hidden``: how many trailing columns are only there for the key.
    """

    query: str
    key: tuple[int, ...] | None = None
    hidden: int = 0

    @property
    def output_mode(self) -> str:
        return "append" if self.key is None else "update"


def changelog_plan(query: str, aggregated: bool) -> ChangelogPlan:
    """The plan of ``query`` (``aggregated`` as :func:`materialized.continuous.query_shape` says)."""
    if not aggregated:
        return ChangelogPlan(query)
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(query, read="spark")
    if not isinstance(tree, exp.Select) or not aggregates_itself(tree, exp):
        raise ChangelogError("the aggregation must be the outermost SELECT of a streaming query: the "
                             "client follows the changes of each of its GROUP BY keys")
    group = tree.args.get("group")
    if group is not None and group.find(exp.Rollup, exp.Cube, exp.GroupingSets):
        raise ChangelogError("ROLLUP, CUBE and GROUPING SETS are not supported in a streaming query")
    items = list(tree.expressions)
    if group is None:  # a global aggregate is one row; SELECT DISTINCT keys every column
        return ChangelogPlan(query, tuple(range(len(items))) if tree.args.get("distinct") else ())
    starred = any(item.is_star for item in items)
    key: list[int] = []
    hidden: list[Any] = []
    for expression in group.expressions:
        position = None if starred else _output_position(expression, items, exp)
        if position is not None:
            key.append(position)
            continue
        if isinstance(expression, exp.Literal):
            raise ChangelogError(f"GROUP BY {expression.sql()} beside SELECT *: name the key column instead")
        hidden.append(expression)
    for number, expression in enumerate(hidden):
        tree.select(exp.alias_(expression.copy(), f"{HIDDEN_KEY_PREFIX}{number}", quoted=True), copy=False)
    # Hidden columns come last: count them from the end, whatever a star expands to.
    key += [number - len(hidden) for number in range(len(hidden))]
    return ChangelogPlan(tree.sql(dialect="spark"), tuple(key), len(hidden))


def _output_position(expression: Any, items: Sequence[Any], exp: Any) -> int | None:
    """Which output column is the GROUP BY ``expression``: an ordinal, the same expression, or
    an alias (Spark's ``GROUP BY 1`` and ``GROUP BY alias``); None if none is."""
    if isinstance(expression, exp.Literal) and not expression.is_string:
        number = int(expression.this)
        if not 1 <= number <= len(items):
            raise ChangelogError(f"GROUP BY position {number} is not in the select list")
        return number - 1
    text = expression.sql(dialect="spark").lower()
    for position, item in enumerate(items):
        if item.unalias().sql(dialect="spark").lower() == text:
            return position
    if isinstance(expression, exp.Column) and not expression.table:
        for position, item in enumerate(items):
            if isinstance(item, exp.Alias) and item.alias.lower() == expression.name.lower():
                return position
    return None


class ChangelogTracker:
    """Turns each micro-batch's rows into Flink's row kinds, remembering up to ``capacity`` keys."""

    def __init__(self, plan: ChangelogPlan, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"invalid capacity {capacity!r}: expected >= 1")
        self.plan = plan
        self.capacity = capacity
        self.forgot = False  # whether a key was ever forgotten (then a new key may be an old one)
        self._rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # oldest change first

    def changes(self, rows: Iterable[Sequence[Any]]) -> list[tuple[str, tuple[Any, ...]]]:
        """``(kind, row)`` of each change of one micro-batch, hidden columns left out."""
        width = -self.plan.hidden or None
        if self.plan.key is None:
            return [(INSERT, tuple(row[:width])) for row in rows]
        changes = []
        for row in rows:
            key = tuple(row[index] for index in self.plan.key)
            new = tuple(row[:width])
            old = self._rows.pop(key, None)
            self._rows[key] = new  # now the most recently changed
            if old is None:
                changes.append((UPDATE_AFTER if self.forgot else INSERT, new))
            elif old != new:  # as Flink, an unchanged result is no change
                changes += [(UPDATE_BEFORE, old), (UPDATE_AFTER, new)]
        while len(self._rows) > self.capacity:
            del self._rows[next(iter(self._rows))]
            self.forgot = True
        return changes
