"""The plan of a CONTINUOUS materialized table (pure): streamability, rewrite, trigger, modes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_provider_staged.materialized.continuous import (
    NotStreamableError,
    committed_source_files,
    one_time_refresh_refused,
    plan_continuous,
    query_shape,
    replaced_source,
    replaced_source_error,
    snapshot_view_name,
    streaming_query,
    trigger_interval,
)
from airflow_provider_staged.materialized.continuous_run import Progress
from airflow_provider_staged.materialized.freshness import Freshness
from airflow_provider_staged.materialized.workflow.dag_factory import build_dags
from airflow_provider_staged.staging.identifiers import TableIdentifier

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


def test_continuous_dag_and_a_non_streamable_table_broken_alone(
    tmp_path: Path, staged_default_connection: str
) -> None:
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


def test_a_one_time_refresh_of_a_continuous_table_needs_partitions_of_a_stream(tmp_path: Path) -> None:
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
    from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger, WorkflowException

    (tmp_path / "live__daily.sql").write_text(
        "CREATE MATERIALIZED TABLE live.daily PARTITIONED BY (ds) FRESHNESS = INTERVAL '1' MINUTE\n"
        "AS SELECT ds, count(*) AS n FROM raw.clicks GROUP BY ds")
    (tmp_path / "live__flat.sql").write_text(
        "CREATE MATERIALIZED TABLE live.flat FRESHNESS = INTERVAL '1' MINUTE AS SELECT id FROM raw.clicks")
    scheduler = AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path)  # never opened: no I/O
    tables = MaterializedTables(scheduler, None)
    undone = r"live\.daily is refreshed continuously by an aggregation .* undone by the next micro-batch"
    with pytest.raises(WorkflowException, match=undone):
        tables.refresh(TableIdentifier("live", "daily"), RefreshTrigger(static_partitions={"ds": "2024"}))
    with pytest.raises(WorkflowException, match=r"live\.flat is refreshed continuously: .* name them"):
        tables.refresh(TableIdentifier("live", "flat"), RefreshTrigger(is_periodic=False))
    query = "SELECT id, ds FROM raw.clicks"
    assert one_time_refresh_refused(TABLE, query, {"ds": "2024-01-01"}) is None


def test_committed_source_files_are_those_of_the_batches_the_table_records() -> None:
    entry = '{{"path":"file:///src/{name}","timestamp":1,"batchId":{batch}}}'
    compact = "v1\n" + "\n".join(entry.format(name=f"f{b}", batch=b) for b in range(10))
    later = ["v1\n" + entry.format(name=f"f{b}", batch=b) for b in (10, 11)]
    assert committed_source_files([compact, *later], 10) == {f"file:///src/f{b}" for b in range(11)}
    assert committed_source_files([compact, *later], -1) == set()
    with pytest.raises(ValueError, match="unknown file-stream source log version 'v9'"):
        committed_source_files(["v9\n"], 3)


def test_the_snapshot_query_reads_snapshot_views() -> None:
    rewritten = streaming_query("SELECT c.id FROM raw.clicks c", ["raw.clicks"], snapshot_view_name)
    assert "__staged_snapshot__raw__clicks" in rewritten and "__staged_stream__" not in rewritten


def test_streamed_batch_reads_the_query_and_batch_of_a_sink_file() -> None:
    from airflow_provider_staged.staging.kinds.hive_sink import streamed_batch

    assert streamed_batch("q1a2-b17-w99-part-00000.parquet", "q1a2") == 17
    assert streamed_batch("q1a2-b17-w99-part-00000.parquet", "q3") is None
    assert streamed_batch("w5-part-00000.parquet", "q1a2") is None
    assert streamed_batch("part-00000-c000.snappy.parquet", "q1a2") is None


def test_engine_connect_is_accepted_for_a_continuous_table() -> None:
    """Its one-time refreshes run on the gateway; the stream runs in the task (``_stream``)."""
    from airflow_provider_staged.materialized.definition import parse_definition

    text = ("CREATE MATERIALIZED TABLE live.t WITH ('engine' = 'connect')\n"
            "FRESHNESS = INTERVAL {}\nAS SELECT id FROM raw.c")
    for freshness in ("'30' SECOND", "'1' HOUR"):  # CONTINUOUS, FULL
        assert parse_definition(text.format(freshness), "t.sql").options["engine"] == "connect"


def test_link_files_links_the_wanted_data_files_and_keeps_what_is_there(tmp_path: Path) -> None:
    from airflow_provider_staged.staging.kinds.hive_partitions import dir_stats
    from airflow_provider_staged.staging.kinds.hive_sink import link_files

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    for name in ("q-b1-w-a.parquet", "q-b2-w-b.parquet", ".q-b2-w-b.parquet.crc", "_SUCCESS"):
        (old / name).write_text(name)
    (old / "sub").mkdir()
    new.mkdir()
    (new / "q-b2-w-b.parquet").write_text("kept")
    link_files(f"file:{old}", f"file:{new}", lambda name: name.startswith("q-b"))
    assert sorted(p.name for p in new.iterdir()) == ["q-b1-w-a.parquet", "q-b2-w-b.parquet"]
    assert (new / "q-b1-w-a.parquet").stat().st_ino == (old / "q-b1-w-a.parquet").stat().st_ino  # a link
    assert (new / "q-b2-w-b.parquet").read_text() == "kept"
    assert dir_stats(f"file:{new}") == (2, len("q-b1-w-a.parquet") + len("kept"))


def test_a_source_at_another_location_than_its_stream_followed_is_named() -> None:
    recorded = {"raw.a": "file:/w/raw.db/a/_v=1", "raw.b": "file:/w/raw.db/b"}
    assert replaced_source(recorded, dict(recorded)) is None
    assert replaced_source({}, recorded) is None  # a new checkpoint: nothing followed yet
    assert replaced_source(recorded, {"raw.a": "file:/w/raw.db/a/_v=1"}) is None  # b not read any more
    moved = {**recorded, "raw.b": "file:/w/raw.db/b/_v=2"}
    assert replaced_source(recorded, moved) == (
        "source table raw.b was replaced: its data moved from file:/w/raw.db/b to file:/w/raw.db/b/_v=2"
    )
    error = replaced_source_error(TABLE, replaced_source(recorded, moved) or "")
    assert str(error).startswith(f"the continuous refresh of {TABLE} stopped: source table raw.b was")
    assert "DROP, then CREATE" in str(error)
