"""Refreshes down a pipeline of materialized tables: partition keys, FRESHNESS = DOWNSTREAM, and
the schedules the DAG factory makes of the graph (no Spark; DAGs built in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    parse_definition,
    render_definition,
)
from airflow_provider_staged.materialized.graph import GraphError, followed_inputs
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.propagation import (
    WHOLE_TABLE_KEY,
    conf_for_key,
    downstream_spec,
    event_keys,
    key_spec,
    next_input_check,
    not_committed,
    partition_key,
)
from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger
from airflow_provider_staged.staging.identifiers import TableIdentifier

DAY = "PARTITIONED BY (ds) WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')"


def follower(table: str, query: str, extra: str = DAY) -> str:
    return f"CREATE MATERIALIZED TABLE {table}\n{extra}\nFRESHNESS = DOWNSTREAM\nAS {query}\n"


def t(name: str) -> TableIdentifier:
    return TableIdentifier.parse(name)


@pytest.mark.parametrize("spec, key", [
    ({"ds": "2024-01-03"}, "ds=2024-01-03"),
    ({"hr": "01", "ds": "2024-01-03"}, "ds=2024-01-03/hr=01"),  # the table's column order
    ({"ds": "a/b=c*"}, "ds=a%2Fb%3Dc%2A"),  # separators escaped as in a partition directory
    ({}, WHOLE_TABLE_KEY),
])
def test_partition_key_round_trips(spec: dict[str, str], key: str) -> None:
    assert partition_key(("ds", "hr"), spec) == key
    assert key_spec(key) == spec


def test_downstream_spec_same_columns_else_whole_table() -> None:
    assert downstream_spec("ds=2024-01-03", ("ds",)) == {"ds": "2024-01-03"}
    assert downstream_spec("ds=2024-01-03", ("ds", "country")) == {"ds": "2024-01-03"}
    # Partitioned otherwise, or not at all: any row may come from that partition.
    assert downstream_spec("ds=2024-01-03", ("month",)) == {}
    assert downstream_spec("ds=2024-01-03", ()) == {}
    assert downstream_spec(WHOLE_TABLE_KEY, ("ds",)) == {}
    with pytest.raises(ValueError, match="not col=value"):
        key_spec("2024-01-03")


@pytest.mark.parametrize("periodic, asked, triggered, keys", [
    (True, False, False, ["ds=X"]),  # a scheduled refresh: downstream follows
    (False, True, False, ["ds=X"]),  # staged mt refresh --downstream
    (False, False, True, ["ds=X"]),  # started by an input's commit: the chain goes on
    (False, False, False, []),  # a plain one-time refresh stays where it is
])
def test_which_refreshes_propagate(periodic: bool, asked: bool, triggered: bool, keys: list[str]) -> None:
    assert event_keys(("ds",), {"ds": "X"}, periodic=periodic, refresh_downstream=asked,
                      triggered_by_inputs=triggered) == keys


def test_a_key_longer_than_airflow_keeps_is_not_sent() -> None:
    assert event_keys(("ds",), {"ds": "x" * 300}, periodic=True, refresh_downstream=False,
                      triggered_by_inputs=False) == []


def test_a_run_started_by_an_input_refreshes_that_partition_once() -> None:
    definition = parse_definition(follower("m.b", "SELECT ds, n FROM m.a"))
    params = {"ds": None, "isPeriodic": None, "scheduleTime": None, "staticPartitions": {},
              "dynamicOptions": {"compression": "zstd"}, "executionConfig": {}, "refreshDownstream": False}
    conf = conf_for_key(params, "ds=2024-01-03", definition.partition_by)
    from datetime import datetime

    request = parse_refresh_request(conf, definition, datetime(2024, 5, 1))
    assert (request.is_periodic, dict(request.partition_spec)) == (False, {"ds": "2024-01-03"})
    assert dict(request.dynamic_options) == {"compression": "zstd"}
    # A key the table's date-formatter refuses fails the run, naming the value.
    with pytest.raises(ValueError, match="2024/01/03"):
        parse_refresh_request(conf_for_key(params, "ds=2024%2F01%2F03", ("ds",)), definition,
                              datetime(2024, 5, 1))


def test_refresh_downstream_in_the_trigger_conf_only_when_asked() -> None:
    assert "refreshDownstream" not in RefreshTrigger(static_partitions={"ds": "X"}).as_conf()
    assert RefreshTrigger(refresh_downstream=True).as_conf()["refreshDownstream"] is True
    definition = parse_definition(follower("m.b", "SELECT ds FROM m.a"))
    from datetime import datetime

    assert parse_refresh_request({"refreshDownstream": True, "ds": "2024-01-03"}, definition,
                                 datetime(2024, 5, 1)).refresh_downstream is True
    with pytest.raises(ValueError, match="invalid refreshDownstream 'yes'"):
        parse_refresh_request({"refreshDownstream": "yes"}, definition, datetime(2024, 5, 1))


def test_freshness_downstream_grammar() -> None:
    definition = parse_definition(follower("m.b", "SELECT ds FROM m.a"))
    assert (definition.follows_inputs, definition.schedule, definition.refresh_mode.value) == (
        True, None, "FULL")
    assert definition.freshness_text == "DOWNSTREAM"
    rendered = render_definition(definition, definition.options)
    assert "FRESHNESS = DOWNSTREAM" in rendered
    assert parse_definition(rendered).follows_inputs
    with pytest.raises(DefinitionError, match="REFRESH_MODE must be FULL"):
        parse_definition("CREATE MATERIALIZED TABLE m.b FRESHNESS = DOWNSTREAM REFRESH_MODE = CONTINUOUS "
                         "AS SELECT 1")
    with pytest.raises(DefinitionError, match="never on a schedule"):
        parse_definition(follower("m.b", "SELECT 1", "WITH ('schedule.cron' = '0 1 * * *')"))
    with pytest.raises(DefinitionError, match=r"INTERVAL 'n' SECOND\|MINUTE\|HOUR\|DAY\|WEEK or DOWNSTREAM"):
        parse_definition("CREATE MATERIALIZED TABLE m.b FRESHNESS = UPSTREAM AS SELECT 1")


def test_followed_inputs_are_the_materialized_tables_read() -> None:
    diamond = parse_definition(follower(
        "m.d", "SELECT b.ds FROM m.b AS b JOIN m.c AS c ON b.ds = c.ds JOIN raw.x AS x ON x.ds = b.ds"))
    assert followed_inputs(diamond, {t("m.a"), t("m.b"), t("m.c"), t("m.d")}) == (t("m.b"), t("m.c"))


@pytest.mark.parametrize("query, why", [
    ("SELECT * FROM other.db.t", r"m\.d: FRESHNESS = DOWNSTREAM .* but other\.db\.t is a table of catalog "
                                 r"other, whose commits nothing here follows"),
    ("SELECT * FROM raw.x", "it reads no materialized table of its definitions folder"),
    ("SELECT * FROM m.d", "it reads no materialized table"),  # itself: its previous version
])
def test_a_follower_of_nothing_is_refused_naming_what_it_reads(query: str, why: str) -> None:
    with pytest.raises(GraphError, match=why):
        followed_inputs(parse_definition(follower("m.d", query, "")), {t("m.a"), t("m.d")})


# -- the factory: the graph as schedules ---------------------------------------------------

@pytest.fixture
def folder(tmp_path: Path, staged_default_connection: str) -> Path:
    (tmp_path / "a.sql").write_text(
        f"CREATE MATERIALIZED TABLE m.a {DAY} FRESHNESS = INTERVAL '1' DAY AS SELECT ds FROM raw.src")
    (tmp_path / "b.sql").write_text(follower("m.b", "SELECT ds FROM m.a"))
    (tmp_path / "c.sql").write_text(follower("m.c", "SELECT ds FROM m.a"))
    (tmp_path / "d.sql").write_text(follower("m.d", "SELECT b.ds FROM m.b AS b JOIN m.c AS c ON b.ds = c.ds"))
    (tmp_path / "own.sql").write_text(  # reads a materialized table, keeps its own schedule
        f"CREATE MATERIALIZED TABLE m.own {DAY} FRESHNESS = INTERVAL '1' HOUR AS SELECT ds FROM m.b")
    (tmp_path / "other.sql").write_text(follower("m.other", "SELECT ds FROM cat.db.t"))
    return tmp_path


def test_factory_schedules_followers_on_their_inputs_partitions(folder: Path) -> None:
    from airflow_provider_staged.materialized.workflow import dag_factory
    from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

    if dag_factory.PartitionedAssetTimetable is None:
        pytest.skip("Airflow before 3.3: no partition-aware asset scheduling")
    from airflow.sdk import AssetAll, IdentityMapper, PartitionedAssetTimetable

    dags = build_dags(folder, {})
    uri = "hive://metastore.example:9083/m/"
    b, d = dags["mt__m__b"].timetable, dags["mt__m__d"].timetable
    assert isinstance(b, PartitionedAssetTimetable) and isinstance(b.default_partition_mapper, IdentityMapper)
    assert b.asset_condition.uri == uri + "a"
    # The diamond's bottom: a run once both sides committed the same partition.
    assert isinstance(d.asset_condition, AssetAll)
    assert [a.uri for a in d.asset_condition.objects] == [uri + "b", uri + "c"]
    assert dags["mt__m__own"].timetable.expression == "0 * * * *"
    assert dags["mt__m__a"].timetable.expression == "0 0 * * *"
    # Another catalog's table commits nothing here: a broken DAG, the one line naming it.
    broken = dags["mt__broken__other"]
    assert "FRESHNESS: m.other: FRESHNESS = DOWNSTREAM refreshes after" in broken.description
    assert "cat.db.t is a table of catalog cat" in broken.description


def test_without_partitioned_asset_scheduling_a_follower_is_a_broken_dag(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.0 has no PartitionedAssetTimetable: the follower says so, the rest load."""
    from airflow_provider_staged.materialized.workflow import dag_factory

    monkeypatch.setattr(dag_factory, "PartitionedAssetTimetable", None)
    dags = dag_factory.build_dags(folder, {})
    assert "needs Airflow 3.3's partition-aware asset scheduling" in dags["mt__broken__b"].description
    assert {"mt__m__a", "mt__m__own"} <= set(dags)


def test_a_worker_builds_a_follower_without_reading_the_folder(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "mt__m__d")
    dags = build_dags(folder, {})
    assert list(dags) == ["mt__m__d"] and dags["mt__m__d"].task_dict.keys() == {"refresh"}


# -- a table with its own schedule waits for its inputs' partition ----------------------------

def test_upstream_wait_options() -> None:
    default = parse_definition("CREATE MATERIALIZED TABLE m.o FRESHNESS = INTERVAL '1' DAY AS SELECT 1")
    assert (default.upstream_wait.total_seconds(), default.skip_missing_upstream) == (600, False)
    own = parse_definition("CREATE MATERIALIZED TABLE m.o WITH ('upstream.wait-timeout' = '30 s', "
                           "'upstream.missing-partition' = 'skip') FRESHNESS = INTERVAL '1' DAY AS SELECT 1")
    assert (own.upstream_wait.total_seconds(), own.skip_missing_upstream) == (30, True)
    with pytest.raises(DefinitionError, match=r"'upstream\.missing-partition' must be 'fail' or 'skip'"):
        parse_definition("CREATE MATERIALIZED TABLE m.o WITH ('upstream.missing-partition' = 'wait') "
                         "AS SELECT 1")
    assert "skipped" in not_committed("m.o", {"ds": "X"}, ["m.a"], 30, True)
    failed = not_committed("m.o", {"ds": "X"}, ["m.a"], 30, False)
    assert "m.a has not committed ds=X: not refreshed" in failed


def test_a_long_wait_is_deferred_in_steps_and_its_last_minute_polled_in_process() -> None:
    assert next_input_check(600) == (True, 30.0)  # the default 10 min: deferred, no slot held
    assert next_input_check(60.5) == (True, 30.0)
    # Never a deferral shorter than 30 s (Airflow fails a task whose timer beats the executor).
    assert next_input_check(60) == (False, 5.0)
    assert next_input_check(3) == (False, 3)


def test_missed_keys_are_those_committed_while_suspended_by_every_input() -> None:
    from datetime import datetime, timedelta, timezone

    from airflow_provider_staged.materialized.propagation import missed_keys

    paused = datetime(2024, 1, 10, 12, tzinfo=timezone.utc)
    before, during = paused - timedelta(hours=1), paused + timedelta(minutes=5)
    chain = {"hive://m:9083/db/a": [("ds=2024-01-03", during), ("ds=2024-01-02", before)]}
    assert missed_keys(chain, paused) == ["ds=2024-01-03"]
    assert missed_keys(chain, during + timedelta(seconds=1)) == []
    # A diamond's bottom: a key one side committed during the pause and the other before it is
    # missed; a key only one side committed is not (yet): its other side's event will bring it.
    diamond = {"hive://m:9083/db/b": [("ds=2024-01-04", during), ("ds=2024-01-05", during)],
               "hive://m:9083/db/c": [("ds=2024-01-04", before), ("ds=2024-01-03", during)]}
    assert missed_keys(diamond, paused) == ["ds=2024-01-04"]
    assert missed_keys({}, paused) == []
    assert missed_keys({"hive://m:9083/db/a": []}, paused) == []


def test_the_assets_of_a_dags_asset_expression() -> None:
    from airflow_provider_staged.materialized.workflow.airflow_scheduler import _asset_uris

    one = {"asset": {"uri": "hive://m:9083/db/a", "name": "hive://m:9083/db/a", "group": "asset"}}
    both = {"all": [one, {"asset": {"uri": "hive://m:9083/db/b", "name": "b"}}]}
    assert _asset_uris(one) == ["hive://m:9083/db/a"]
    assert _asset_uris(both) == ["hive://m:9083/db/a", "hive://m:9083/db/b"]
    assert _asset_uris(None) == [] and _asset_uris({"any": []}) == []
