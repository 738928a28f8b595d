"""The materialized-table DAG factory through a real DagBag (no Airflow mocks).

Also shows what dag-factory 1.1.0 does with the same situations (one YAML file per DAG): a
broken file silently disappears and unknown keys are silently ignored.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import AirflowFailException
from airflow.serialization.serialized_objects import DagSerialization

from airflow_provider_staged.discovery.embedded import DEFINITIONS_ENV, definitions_folder
from airflow_provider_staged.materialized.workflow.dag_factory import build_dags
from airflow_provider_staged.materialized.workflow.shards import (
    Shard,
    ShardError,
    install_shard_files,
    shard_index,
)

REPO = Path(__file__).resolve().parents[2]
FACTORY_FILE = REPO / "dags" / "materialized_tables.py"
# The factory names each table's asset after the staged connection's metastore.
pytestmark = pytest.mark.usefixtures("staged_default_connection")

ORDERS = """\
CREATE MATERIALIZED TABLE analytics.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'owner' = 'sales', 'tags' = 'orders')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM raw.orders GROUP BY ds;
"""
GOOD = {
    "orders_daily.sql": ORDERS,
    # File name and table name differ on purpose.
    "hourly.sql": "CREATE MATERIALIZED TABLE web.clicks_by_hour FRESHNESS = INTERVAL '2' HOUR\n"
    "AS SELECT 1 AS n",
    "rollup.sql": "CREATE MATERIALIZED TABLE rollup WITH ('schedule.cron' = '15 3 * * *', "
    "'catchup' = 'true', 'start-date' = '2024-01-01', 'retries' = '2')\n"
    "FRESHNESS = INTERVAL '1' DAY AS SELECT 1 AS n",
}
BROKEN = {
    "seven.sql": "CREATE MATERIALIZED TABLE bad.seven\n"
    "FRESHNESS = INTERVAL '7' MINUTE\nREFRESH_MODE = FULL\nAS SELECT 1",
    "typo.sql": "CREATE MATERIALIZED TABLE bad.typo\nWITH ('ownr' = 'x')\n"
    "FRESHNESS = INTERVAL '1' DAY AS SELECT 1",
    "streaming.sql": "CREATE MATERIALIZED TABLE bad.streaming\nFRESHNESS = INTERVAL '10' SECOND\n"
    "AS SELECT 1",
}


@pytest.fixture
def dags_dir(tmp_path: Path) -> Path:
    shutil.copy(FACTORY_FILE, tmp_path / FACTORY_FILE.name)
    definitions = tmp_path / "materialized"
    definitions.mkdir()
    for name, text in {**GOOD, **BROKEN}.items():
        (definitions / name).write_text(text)
    return tmp_path


@pytest.fixture
def parsing_context(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    # The variable Airflow's task runner sets before parsing the DAG file on a worker.
    def set_dag_id(dag_id: str) -> None:
        monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", dag_id)

    yield set_dag_id


def bag(folder: Path) -> DagBag:
    return DagBag(dag_folder=str(folder), bundle_path=folder)


def test_good_definitions_load_and_broken_ones_are_visible(dags_dir: Path) -> None:
    dagbag = bag(dags_dir)
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) == {
        "mt__analytics__orders_daily",
        "mt__web__clicks_by_hour",
        "mt__default__rollup",
        "mt__broken__seven",
        "mt__broken__typo",
        "mt__broken__streaming",
    }
    seven = dagbag.dags["mt__broken__seven"]
    assert "seven.sql:2: FRESHNESS: invalid freshness INTERVAL '7' MINUTE" in seven.description
    assert "broken" in seven.tags and type(seven.timetable).__name__ == "NullTimetable"
    assert "unknown option 'ownr'" in dagbag.dags["mt__broken__typo"].doc_md
    assert ("bad.streaming cannot be refreshed continuously: its query reads no table"
            in dagbag.dags["mt__broken__streaming"].description)
    (task,) = seven.tasks
    with pytest.raises(AirflowFailException, match=r"seven.sql:2: FRESHNESS"):
        task.python_callable()


def test_the_definitions_folder_of_the_environment_replaces_the_dags_folders_own(
    dags_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One folder is served, the one the CLI and the page read: a table of the DAGs folder's
    ``materialized/`` that no view lists would still run (and fail) in Airflow."""
    own = tmp_path / "own_definitions"
    own.mkdir()
    (own / "t.sql").write_text("CREATE MATERIALIZED TABLE own.t FRESHNESS = INTERVAL '1' DAY AS SELECT 1")
    monkeypatch.setenv(DEFINITIONS_ENV, str(own))
    assert definitions_folder(dags_dir) == own
    assert set(bag(dags_dir).dags) == {"mt__own__t"}
    monkeypatch.delenv(DEFINITIONS_ENV)
    assert definitions_folder(dags_dir) == dags_dir / "materialized"
    assert "mt__analytics__orders_daily" in bag(dags_dir).dags


def test_refresh_dag_shape(dags_dir: Path) -> None:
    dagbag = bag(dags_dir)
    orders = dagbag.dags["mt__analytics__orders_daily"]
    assert orders.timetable.expression == "0 0 * * *"
    assert (orders.max_active_runs, orders.catchup) == (1, False)
    assert set(orders.tags) == {"materialized-table", "orders"}
    assert "PARTITIONED BY (ds)" in orders.doc_md
    params = orders.params
    assert list(params.keys()) == [
        "ds", "isPeriodic", "scheduleTime", "staticPartitions", "dynamicOptions", "executionConfig",
        "refreshDownstream",
    ]
    # Created active: the form's "Unpause on trigger" would also fire the latest slot's run.
    assert orders.is_paused_upon_creation is False
    for name in params:
        schema = params.get_param(name).schema
        assert schema["title"] and params.get_param(name).description
    (task,) = orders.tasks
    assert task.task_id == "refresh" and task.owner == "sales"
    (asset,) = task.outlets
    assert asset.name == asset.uri == "hive://metastore.example:9083/analytics/orders_daily"
    assert dagbag.dags["mt__web__clicks_by_hour"].timetable.expression == "0 */2 * * *"
    rollup = dagbag.dags["mt__default__rollup"]
    assert rollup.timetable.expression == "15 3 * * *"
    assert rollup.catchup and rollup.start_date.isoformat() == "2024-01-01T00:00:00+00:00"
    assert rollup.tasks[0].retries == 2
    # What the DAG processor stores must round-trip (params schemas, outlets).
    serialized = DagSerialization.to_dict(orders)
    assert DagSerialization.from_dict(serialized).params.dump() == params.dump()


@pytest.mark.parametrize(
    "dag_id",
    ["mt__analytics__orders_daily", "mt__web__clicks_by_hour", "mt__broken__typo"],
)
def test_parsing_context_builds_only_the_requested_dag(
    dags_dir: Path, parsing_context, dag_id: str
) -> None:
    parsing_context(dag_id)
    assert set(bag(dags_dir).dags) == {dag_id}


def test_parsing_context_for_other_dags_builds_nothing(dags_dir: Path, parsing_context) -> None:
    parsing_context("some_other_dag")
    assert build_dags(dags_dir / "materialized", {}) == {}
    parsing_context("mt__analytics__missing")
    assert build_dags(dags_dir / "materialized", {}) == {}


def test_parsing_context_reads_only_the_likely_file(
    dags_dir: Path, parsing_context, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_staged.materialized.workflow import dag_factory as factory

    loaded: list[str] = []
    original = factory.load_definition
    monkeypatch.setattr(
        factory, "load_definition", lambda path: loaded.append(Path(path).name) or original(path)
    )
    parsing_context("mt__analytics__orders_daily")
    assert list(build_dags(dags_dir / "materialized", {})) == ["mt__analytics__orders_daily"]
    assert loaded == ["orders_daily.sql"]


def test_duplicate_tables_are_both_broken(dags_dir: Path) -> None:
    (dags_dir / "materialized" / "orders_copy.sql").write_text(ORDERS)
    dags = bag(dags_dir).dags
    assert "mt__analytics__orders_daily" not in dags
    for stem in ("orders_daily", "orders_copy"):
        assert "defined by several files" in dags[f"mt__broken__{stem}"].description


def test_check_queries_reports_a_bad_query(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text(
        "CREATE MATERIALIZED TABLE q FRESHNESS = INTERVAL '1' DAY\nAS\nDELETE FROM x"
    )
    assert list(build_dags(tmp_path, {})) == ["mt__default__q"]
    dags = build_dags(tmp_path, {}, check_queries=True)
    assert "q.sql:3: AS: expected a query" in dags["mt__broken__q"].description


DAG_FACTORY_FILE = """\
# airflow DAG file (safe mode skips files without these words)
from dagfactory import load_yaml_dags

load_yaml_dags(globals_dict=globals(), dags_folder={folder!r})
"""
DAG_FACTORY_YAML = """\
{dag_id}:
  schedule: "0 0 * * *"
  catchup: false
  {extra}
  tasks:
    refresh:
      operator: airflow.providers.standard.operators.empty.EmptyOperator
"""


def test_dag_factory_drops_broken_files_and_ignores_unknown_keys(tmp_path: Path) -> None:
    """The baseline this factory improves on (dag-factory 1.1.0, one YAML file per DAG)."""
    from tests.fixtures.dag_factory import use_dag_factory

    use_dag_factory()
    yamls = tmp_path / "yaml"
    yamls.mkdir()
    (tmp_path / "yaml_dags.py").write_text(DAG_FACTORY_FILE.format(folder=str(yamls)))
    (yamls / "good.yml").write_text(DAG_FACTORY_YAML.format(dag_id="good", extra=""))
    (yamls / "typo.yml").write_text(
        DAG_FACTORY_YAML.format(dag_id="typo", extra="max_activ_runs: 1")
    )
    (yamls / "broken.yml").write_text(
        DAG_FACTORY_YAML.format(dag_id="broken", extra="start_date: not-a-date")
    )
    dagbag = bag(tmp_path)
    # The broken file is gone without any import error; the typo'd key changed nothing.
    assert set(dagbag.dags) == {"good", "typo"}
    assert dagbag.import_errors == {}
    assert dagbag.dags["typo"].max_active_runs == 16

    # Ours, for the same two mistakes: both are reported, naming file, line and key.
    definitions = tmp_path / "materialized"
    definitions.mkdir()
    (definitions / "typo.sql").write_text(
        "CREATE MATERIALIZED TABLE typo\nWITH ('max_activ_runs' = '1')\n"
        "FRESHNESS = INTERVAL '1' DAY AS SELECT 1"
    )
    (definitions / "broken.sql").write_text(
        "CREATE MATERIALIZED TABLE broken\nWITH ('start-date' = 'not-a-date')\n"
        "FRESHNESS = INTERVAL '1' DAY AS SELECT 1"
    )
    dags = build_dags(definitions, {})
    assert set(dags) == {"mt__broken__typo", "mt__broken__broken"}
    assert "typo.sql:2: WITH: unknown option 'max_activ_runs'" in dags["mt__broken__typo"].description
    assert "broken.sql:2: WITH: option 'start-date'" in dags["mt__broken__broken"].description


def test_time_zone_applies_to_schedule_and_start_date(dags_dir: Path) -> None:
    dags = build_dags(dags_dir / "materialized", {}, zone="Asia/Shanghai")
    rollup = dags["mt__default__rollup"]
    # Midnight in Shanghai (Airflow keeps start dates in UTC).
    assert rollup.start_date.isoformat() == "2023-12-31T16:00:00+00:00"
    assert str(dags["mt__analytics__orders_daily"].timetable.timezone) == "Asia/Shanghai"


def _sharded(dags_dir: Path, count: int) -> dict[str, DagBag]:
    """The shard files that ``staged mt shards`` writes, in place of the one factory file."""
    (dags_dir / FACTORY_FILE.name).unlink()
    install_shard_files(dags_dir, count)
    return {path.name: DagBag(dag_folder=str(path), bundle_path=dags_dir)
            for path in sorted(dags_dir.glob("materialized_tables_shard_*.py"))}


def test_shards_build_every_table_once_each_in_the_file_its_name_hashes_to(dags_dir: Path) -> None:
    whole = set(bag(dags_dir).dags)
    (dags_dir / "materialized" / "orders_copy.sql").write_text(ORDERS)  # a duplicate, in one shard
    bags = _sharded(dags_dir, 3)
    assert list(bags) == [Shard(i, 3).file_name for i in range(3)]
    built = [dag_id for dagbag in bags.values() for dag_id in dagbag.dags]
    assert all(not dagbag.import_errors for dagbag in bags.values())
    # Every DAG of the one-file factory, once; the duplicated table broken in both its files.
    assert sorted(built) == sorted(whole - {"mt__analytics__orders_daily"}
                                   | {"mt__broken__orders_daily", "mt__broken__orders_copy"})
    for name, dagbag in bags.items():
        shard = Shard.of_dag_file(name)
        for dag in dagbag.dags.values():
            if not dag.dag_id.startswith("mt__broken__"):
                assert shard_index(dag.dag_id.split("__", 1)[1].replace("__", "."), 3) == shard.index
    assert sum(1 for dagbag in bags.values() if dagbag.dags) > 1  # split, not all in one file


def test_a_downstream_table_follows_an_upstream_built_by_another_shard(dags_dir: Path) -> None:
    definitions = dags_dir / "materialized"
    for path in definitions.glob("*.sql"):
        path.unlink()
    upstream = "CREATE MATERIALIZED TABLE chain.up{i} FRESHNESS = INTERVAL '1' DAY AS SELECT 1 AS n"
    downstream = ("CREATE MATERIALIZED TABLE chain.down{i} FRESHNESS = DOWNSTREAM\n"
                  "AS SELECT n FROM chain.up{i}")
    for i in range(8):
        (definitions / f"up{i}.sql").write_text(upstream.format(i=i))
        (definitions / f"down{i}.sql").write_text(downstream.format(i=i))
    bags = _sharded(dags_dir, 4)
    dags = {dag_id: dag for dagbag in bags.values() for dag_id, dag in dagbag.dags.items()}
    assert len(dags) == 16 and not any(dag_id.startswith("mt__broken__") for dag_id in dags)
    apart = [i for i in range(8) if shard_index(f"chain.up{i}", 4) != shard_index(f"chain.down{i}", 4)]
    assert apart  # the test's point: some chains cross shards
    for i in apart:
        assert type(dags[f"mt__chain__down{i}"].timetable).__name__ == "PartitionedAssetTimetable"


def test_shard_files_are_refused_beside_the_one_file_factory(dags_dir: Path) -> None:
    with pytest.raises(ShardError, match=r"materialized_tables.py builds every table: remove it first"):
        install_shard_files(dags_dir, 2)
    assert not list(dags_dir.glob("materialized_tables_shard_*"))
