"""The plan of a CONTINUOUS materialized table (pure): streamability, rewrite, trigger, modes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.materialized.continuous import (
    NotStreamableError,
    plan_continuous,
    query_shape,
    streaming_query,
    trigger_interval,
)
from airflow_provider_staged.materialized.continuous_run import Progress
from airflow_provider_staged.materialized.factory import build_dags
from airflow_provider_staged.materialized.freshness import Freshness

TABLE = TableIdentifier("live", "t")


@pytest.mark.parametrize(
    ("query", "sources", "aggregated"),
    [
        ("SELECT id, v FROM raw.clicks WHERE v > 0", ("raw.clicks",), False),
        ("SELECT ds, count(*) AS n FROM raw.orders GROUP BY ds", ("raw.orders",), True),
        ("SELECT sum(v) AS total FROM raw.orders", ("raw.orders",), True),
        ("SELECT DISTINCT id FROM raw.orders", ("raw.orders",), True),
        ("SELECT o.id, c.name FROM raw.orders o JOIN raw.customers c ON o.cid = c.id",
         ("raw.orders", "raw.customers"), False),
        ("WITH x AS (SELECT * FROM raw.orders) SELECT * FROM x", ("raw.orders",), False),
        ("SELECT * FROM (SELECT ds, count(*) AS c FROM raw.o GROUP BY ds) t ORDER BY ds", ("raw.o",), True),
        ("SELECT id FROM orders", ("default.orders",), False),
    ],
)
def test_query_shape(query: str, sources: tuple[str, ...], aggregated: bool) -> None:
    shape = query_shape(TABLE, query)
    assert (set(shape.sources), shape.aggregated) == (set(sources), aggregated)


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("SELECT 1 AS one", "reads no table"),
        ("SELECT * FROM raw.o LIMIT 5", "LIMIT is not supported on streams"),
        ("SELECT id, row_number() OVER (ORDER BY id) AS r FROM raw.o", "window functions"),
        ("SELECT * FROM raw.o ORDER BY id", "ORDER BY needs an aggregation"),
        ("SELECT ds, count(*) FROM (SELECT ds, id, count(*) c FROM raw.o GROUP BY ds, id) x GROUP BY ds",
         "aggregates more than once"),
        ("SELECT * FROM live.t", "reads the table itself"),
        ("SELECT FROM WHERE", "does not parse"),
    ],
)
def test_not_streamable_names_the_table_and_why(query: str, why: str) -> None:
    with pytest.raises(NotStreamableError, match=rf"^live\.t cannot be refreshed continuously: .*{why}"):
        query_shape(TABLE, query)


def test_sources_read_their_streaming_views_under_their_own_names() -> None:
    query = ("WITH recent AS (SELECT * FROM raw.orders WHERE amount > 0) "
             "SELECT orders.id, c.name FROM recent AS orders JOIN raw.customers c ON orders.cid = c.id "
             "JOIN other_catalog.raw.x ON 1 = 1")
    rewritten = streaming_query(query, ("raw.orders", "raw.customers"))
    assert "FROM __staged_stream__raw__orders AS `orders`" in rewritten
    assert "JOIN __staged_stream__raw__customers AS `c`" in rewritten
    assert "FROM recent AS orders" in rewritten  # the CTE is not a table
    assert "other_catalog.raw.x" in rewritten  # another catalog's table is left alone


@pytest.mark.parametrize(
    ("freshness", "trigger"),
    [(Freshness(30, "SECOND"), "30 seconds"), (Freshness(7, "MINUTE"), "420 seconds"),
     (Freshness(3, "DAY"), "259200 seconds")],
)
def test_trigger_interval_is_the_freshness(freshness: Freshness, trigger: str) -> None:
    assert trigger_interval(freshness) == trigger


def test_plan_modes_and_locations() -> None:
    sources = {"raw.orders": ("file:/w/raw.db/orders", '{"type":"struct","fields":[]}',
                              {"recursiveFileLookup": "true"})}
    append = plan_continuous(TABLE, "SELECT id FROM raw.orders", Freshness(30, "SECOND"), (),
                             "file:/w/live.db/t", sources)
    assert (append.output_mode, append.sink_mode) == ("append", "append")
    assert append.checkpoint_location == "file:/w/live.db/t/_continuous/checkpoint"
    assert append.progress_location == "file:/w/live.db/t/_continuous/progress.json"
    assert append.sources[0].location == "file:/w/raw.db/orders"
    assert append.sources[0].options == {"recursiveFileLookup": "true"}
    totals = plan_continuous(TABLE, "SELECT ds, count(*) AS n FROM raw.orders GROUP BY ds",
                             Freshness(1, "MINUTE"), ("ds",), "file:/w/live.db/t/", sources)
    assert (totals.output_mode, totals.sink_mode, totals.partition_by) == ("complete", "overwrite", ("ds",))
    with pytest.raises(NotStreamableError, match=r"no stream for \['raw.gone'\]"):
        plan_continuous(TABLE, "SELECT id FROM raw.gone", Freshness(1, "MINUTE"), (), "file:/w", sources)


def test_actual_lag() -> None:
    fresh = datetime(2024, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    progress = Progress("running", fresh_as_of=fresh.isoformat())
    assert progress.lag_seconds(fresh + timedelta(seconds=42)) == 42.0
    assert Progress("running").lag_seconds() is None


def test_continuous_dag_and_a_non_streamable_table_broken_alone(tmp_path: Path) -> None:
    (tmp_path / "live.sql").write_text(
        "CREATE MATERIALIZED TABLE live.clicks FRESHNESS = INTERVAL '5' MINUTE AS SELECT id FROM raw.clicks")
    (tmp_path / "windowed.sql").write_text(
        "CREATE MATERIALIZED TABLE live.ranked FRESHNESS = INTERVAL '30' SECOND\n"
        "AS SELECT id, rank() OVER (ORDER BY id) AS r FROM raw.clicks")
    (tmp_path / "daily.sql").write_text(
        "CREATE MATERIALIZED TABLE live.daily FRESHNESS = INTERVAL '3' DAY REFRESH_MODE = CONTINUOUS\n"
        "AS SELECT ds, count(*) AS n FROM raw.clicks GROUP BY ds")
    dags = build_dags(tmp_path, {})
    assert set(dags) == {"mt__live__clicks", "mt__live__daily", "mt__broken__windowed"}
    live = dags["mt__live__clicks"]
    assert type(live.timetable).__name__ == "ContinuousTimetable" and live.max_active_runs == 1
    assert type(live.tasks[0]).__name__ == "MaterializedTableContinuousOperator"
    broken = dags["mt__broken__windowed"].description
    assert "windowed.sql:2: AS: live.ranked cannot be refreshed continuously: window functions" in broken


def test_a_one_time_refresh_of_a_continuous_table_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from airflow_provider_staged.materialized.airflow_scheduler import AirflowWorkflowScheduler
    from airflow_provider_staged.materialized.manager import MaterializedTables
    from airflow_provider_staged.materialized.scheduler import RefreshTrigger, WorkflowException

    (tmp_path / "live__clicks.sql").write_text(
        "CREATE MATERIALIZED TABLE live.clicks PARTITIONED BY (ds) FRESHNESS = INTERVAL '1' MINUTE\n"
        "AS SELECT id, ds FROM raw.clicks")
    scheduler = AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path)  # never opened: no I/O
    tables = MaterializedTables(scheduler, None)
    trigger = RefreshTrigger(static_partitions={"ds": "2024-01-01"})
    refused = r"live\.clicks is refreshed continuously: a one-time refresh of it is not supported"
    with pytest.raises(WorkflowException, match=refused):
        tables.refresh(TableIdentifier("live", "clicks"), trigger)


def test_engine_connect_is_refused_for_a_continuous_table_naming_the_option() -> None:
    from airflow_provider_staged.materialized.definition import DefinitionError, parse_definition

    text = ("CREATE MATERIALIZED TABLE live.t WITH ('engine' = 'connect')\n"
            "FRESHNESS = INTERVAL {}\nAS SELECT id FROM raw.c")
    refused = r"t\.sql:1: WITH: option 'engine' = 'connect' is not supported for a CONTINUOUS table"
    with pytest.raises(DefinitionError, match=refused):
        parse_definition(text.format("'30' SECOND"), "t.sql")
    assert parse_definition(text.format("'1' HOUR"), "t.sql").options["engine"] == "connect"  # FULL: fine
