"""The streaming changelog's pure part: keys of an aggregation, Flink's row kinds, the bound."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_staged.cli.sql import Printer, ScriptOutput
from airflow_provider_staged.sql.changelog import (
    ChangelogError,
    ChangelogPlan,
    ChangelogTracker,
    changelog_plan,
)
from airflow_provider_staged.sql.output import ResultSet, changelog_lines, render_changelog
from airflow_provider_staged.sql.properties import (
    RESULT_MODE,
    RUNTIME_MODE,
    PropertyError,
    SessionProperties,
    Source,
)


@pytest.mark.parametrize(
    ("query", "key", "hidden", "added"),
    [
        ("SELECT ds, count(*) AS n FROM db.t GROUP BY ds", (0,), 0, ""),
        ("SELECT count(*) AS n, upper(ds) AS d FROM t GROUP BY upper(ds)", (1,), 0, ""),
        ("SELECT Ds, count(*) FROM t GROUP BY ds", (0,), 0, ""),  # Spark's names ignore case
        ("SELECT d, count(*) FROM (SELECT ds AS d FROM t) GROUP BY 1", (0,), 0, ""),
        ("SELECT upper(ds) AS d, count(*) FROM t GROUP BY d", (0,), 0, ""),
        ("SELECT sum(v) AS total FROM t", (), 0, ""),  # a global aggregate: one row
        ("WITH x AS (SELECT * FROM t) SELECT DISTINCT a, b FROM x", (0, 1), 0, ""),
        # the key is not printed: added as hidden trailing columns
        ("SELECT count(*) AS n FROM t GROUP BY ds", (-1,), 1, "ds AS `__staged_key_0`"),
        ("SELECT *, count(*) AS c FROM t GROUP BY a, b", (-2, -1), 2, "b AS `__staged_key_1`"),
    ],
)
def test_the_key_of_an_aggregation(query: str, key: tuple[int, ...], hidden: int, added: str) -> None:
    plan = changelog_plan(query, aggregated=True)
    assert (plan.key, plan.hidden, plan.output_mode) == (key, hidden, "update")
    assert added in plan.query


def test_a_query_without_aggregation_is_append_only() -> None:
    query = "SELECT id FROM t WHERE id > 1"
    assert changelog_plan(query, aggregated=False) == ChangelogPlan(query)
    assert ChangelogPlan(query).output_mode == "append"


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("SELECT ds, n FROM (SELECT ds, count(*) AS n FROM t GROUP BY ds) x", "outermost SELECT"),
        ("SELECT a, count(*) FROM t GROUP BY ROLLUP (a)", "ROLLUP, CUBE and GROUPING SETS"),
        ("SELECT a, count(*) FROM t GROUP BY 3", "GROUP BY position 3"),
        ("SELECT *, count(*) FROM t GROUP BY 1", "beside SELECT *"),
    ],
)
def test_aggregations_the_client_cannot_follow(query: str, why: str) -> None:
    with pytest.raises(ChangelogError, match=why):
        changelog_plan(query, aggregated=True)


def test_append_only_rows_are_inserts() -> None:
    tracker = ChangelogTracker(ChangelogPlan("q"), capacity=1)
    assert tracker.changes([(1, "a"), (2, "b")]) == [("+I", (1, "a")), ("+I", (2, "b"))]
    assert tracker.changes([(1, "a")]) == [("+I", (1, "a"))]  # no key: never an update


def test_updates_retract_the_remembered_row() -> None:
    tracker = ChangelogTracker(ChangelogPlan("q", key=(0,)), capacity=10)
    assert tracker.changes([("a", 1), ("b", 2)]) == [("+I", ("a", 1)), ("+I", ("b", 2))]
    assert tracker.changes([("a", 3), ("c", 1)]) == [("-U", ("a", 1)), ("+U", ("a", 3)), ("+I", ("c", 1))]
    assert tracker.changes([("a", 5)]) == [("-U", ("a", 3)), ("+U", ("a", 5))]
    assert tracker.changes([("b", 2)]) == []  # Spark re-emits an unchanged result: no change (Flink)
    assert tracker.changes([(None, 1)]) == [("+I", (None, 1))]  # a NULL key is a key


def test_a_global_aggregate_is_one_row() -> None:
    tracker = ChangelogTracker(ChangelogPlan("q", key=()), capacity=1)
    assert tracker.changes([(3,)]) == [("+I", (3,))]
    assert tracker.changes([(7,)]) == [("-U", (3,)), ("+U", (7,))]


def test_hidden_key_columns_are_not_printed() -> None:
    tracker = ChangelogTracker(ChangelogPlan("q", key=(-1,), hidden=1), capacity=10)
    assert tracker.changes([(2, "x"), (2, "y")]) == [("+I", (2,)), ("+I", (2,))]
    assert tracker.changes([(5, "y")]) == [("-U", (2,)), ("+U", (5,))]


def test_beyond_max_rows_the_least_recently_changed_key_is_forgotten() -> None:
    tracker = ChangelogTracker(ChangelogPlan("q", key=(0,)), capacity=2)
    tracker.changes([("a", 1), ("b", 1)])
    assert tracker.changes([("a", 2)]) == [("-U", ("a", 1)), ("+U", ("a", 2))]
    assert tracker.changes([("c", 1)]) == [("+I", ("c", 1))]  # b (changed least recently) forgotten
    # b may have been seen: its row prints as an upsert, without a retraction it cannot know
    assert tracker.changes([("b", 4)]) == [("+U", ("b", 4))]
    assert tracker.changes([("b", 5)]) == [("-U", ("b", 4)), ("+U", ("b", 5))]
    with pytest.raises(ValueError, match="invalid capacity 0"):
        ChangelogTracker(ChangelogPlan("q"), capacity=0)


def test_the_batch_renderer_prints_the_kinds() -> None:
    batch = ResultSet(["k", "n"], [("a", 1), ("a", 2)], kinds=("-U", "+U"))
    assert changelog_lines(batch) == ["-U | a | 1", "+U | a | 2"]
    assert render_changelog(ResultSet(["k"], [(None,)])) == "op | k\n+I | <NULL>\n1 row in set"


def test_runtime_mode_is_a_listed_validated_property() -> None:
    properties = SessionProperties()
    assert (RUNTIME_MODE, "batch", Source.DEFAULT) in {(r.key, r.value, r.source) for r in properties.rows()}
    assert not properties.streaming
    properties.put(*properties.checked(RUNTIME_MODE, " Streaming "))
    assert properties.streaming and properties.get(RUNTIME_MODE) == "streaming"
    with pytest.raises(PropertyError, match=r"invalid execution.runtime-mode 'stream': expected one of "
                                            r"batch, streaming"):
        properties.checked(RUNTIME_MODE, "stream")
    with pytest.raises(PropertyError, match=r"unknown client property 'execution\.checkpointing\.interval'"):
        properties.checked("execution.checkpointing.interval", "10 s")
    with pytest.raises(PropertyError, match="max-files-per-trigger '-1': expected a whole number >= 0"):
        properties.checked("sql-client.execution.streaming.max-files-per-trigger", "-1")


@pytest.mark.parametrize("output", [None, ScriptOutput.csv])
def test_a_stream_prints_as_a_changelog_in_any_result_mode(
    output: ScriptOutput | None, capsys: pytest.CaptureFixture[str]
) -> None:
    def changes() -> Iterator[ResultSet]:
        yield ResultSet(["k", "n"])  # the query runs
        yield ResultSet(["k", "n"], [("a", 1)], kinds=("+I",))
        yield ResultSet(["k", "n"], [], kinds=())  # a micro-batch without changes prints nothing
        yield ResultSet(["k", "n"], [("a", 1), ("a", 2)], kinds=("-U", "+U"))
        yield ResultSet.info("Received a total of 3 changes in 3 micro-batches.")

    properties = SessionProperties()
    properties.put(*properties.checked(RESULT_MODE, "table"))
    Printer(properties, output, interactive=True)(ResultSet(["k", "n"], changes=changes()))
    printed = capsys.readouterr()
    lines = ["op | k | n", "+I | a | 1", "-U | a | 1", "+U | a | 2"]
    message = "Received a total of 3 changes in 3 micro-batches.\n"
    assert (printed.out, printed.err) == (("\n".join(lines) + "\n", message) if output else
                                          ("\n".join(lines) + "\n" + message, ""))
