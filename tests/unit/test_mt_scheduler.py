"""FLIP-448 workflow scheduler: configuration factory, handler serializer, definition rewrite."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from airflow_provider_staged.local.processes import free_port
from airflow_provider_staged.materialized.catalog_status import (
    CatalogStatusStore,
    set_workflow_options,
    state_path,
    workflow_options,
)
from airflow_provider_staged.materialized.definition import parse_definition, render_definition
from airflow_provider_staged.materialized.workflow.airflow_scheduler import (
    AirflowRefreshHandler,
    AirflowRefreshHandlerSerializer,
    AirflowWorkflowScheduler,
)
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreatePeriodicRefreshWorkflow,
    CreateRefreshWorkflow,
    ModifyRefreshWorkflow,
    RefreshStatus,
    RefreshTrigger,
    SuspendRefreshWorkflow,
    WorkflowException,
    create_workflow_scheduler,
    workflow_scheduler_options,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier

BASE = {
    "workflow-scheduler.type": "airflow",
    "workflow-scheduler.airflow.endpoint": "http://127.0.0.1:8080",
    "workflow-scheduler.airflow.definitions-dir": "/tmp/defs",
}


def test_factory_builds_airflow_scheduler_from_pruned_options() -> None:
    config = {
        **BASE,
        "workflow-scheduler.airflow.username": "admin",
        "workflow-scheduler.airflow.password": "secret",
        "workflow-scheduler.airflow.parse-timeout": "45",
        "spark.master": "local[2]",  # other settings in the same config are ignored
    }
    assert workflow_scheduler_options(config, "airflow") == {
        "endpoint": "http://127.0.0.1:8080",
        "definitions-dir": "/tmp/defs",
        "username": "admin",
        "password": "secret",
        "parse-timeout": "45",
    }
    scheduler = create_workflow_scheduler(config)
    assert isinstance(scheduler, AirflowWorkflowScheduler)
    assert (scheduler.endpoint, scheduler.definitions_dir, scheduler.parse_timeout) == (
        "http://127.0.0.1:8080", Path("/tmp/defs"), 45.0
    )
    assert (scheduler.username, scheduler.password) == ("admin", "secret")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"workflow-scheduler.type": None}, "missing option 'workflow-scheduler.type'; known types: airflow"),
        ({"workflow-scheduler.type": "dolphin"}, "unknown workflow-scheduler.type 'dolphin'"),
        ({"workflow-scheduler.airflow.user-name": "admin"},
         "unknown option(s) workflow-scheduler.airflow.user-name; airflow accepts: "),
        ({"workflow-scheduler.endpoint": "x"}, "unknown option(s) workflow-scheduler.endpoint: with"),
        ({"workflow-scheduler.airflow.endpoint": None},
         "missing required option(s) workflow-scheduler.airflow.endpoint"),
        ({"workflow-scheduler.airflow.endpoint": "localhost:8080"},
         "invalid workflow-scheduler.airflow.endpoint 'localhost:8080'"),
        ({"workflow-scheduler.airflow.parse-timeout": "soon"},
         "invalid workflow-scheduler.airflow.parse-timeout 'soon'"),
        ({"workflow-scheduler.airflow.parse-timeout": "0"}, "invalid workflow-scheduler.airflow.parse-"),
        ({"workflow-scheduler.airflow.password": "x"}, "password is set without a username"),
    ],
)
def test_factory_rejects_bad_config_naming_the_option(change: dict[str, str | None], message: str) -> None:
    config = {**BASE, **change}
    config = {key: value for key, value in config.items() if value is not None}
    with pytest.raises(WorkflowException) as err:
        create_workflow_scheduler(config)
    assert message in str(err.value)


def test_handler_serializer_round_trip() -> None:
    serializer = AirflowRefreshHandlerSerializer()
    handler = AirflowRefreshHandler("mt__analytics__orders_daily", "http://127.0.0.1:8080")
    data = serializer.serialize(handler)
    assert json.loads(data) == {"type": "airflow", "version": 1,
                                "dag_id": "mt__analytics__orders_daily", "endpoint": "http://127.0.0.1:8080"}
    assert serializer.deserialize(data) == handler
    assert serializer.deserialize(data.decode()) == handler
    assert handler.as_summary_string() == "Airflow DAG mt__analytics__orders_daily at http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not a serialized Airflow refresh handler"),
        (b'{"type": "dolphin", "version": 1}', "not a serialized Airflow refresh handler"),
        (b'{"type": "airflow", "version": 7, "dag_id": "d", "endpoint": "e"}', "unsupported"),
        (b'{"type": "airflow", "version": 1, "dag_id": ""}', "without dag_id/endpoint"),
    ],
)
def test_handler_serializer_rejects_foreign_data(data: bytes, message: str) -> None:
    with pytest.raises(WorkflowException, match=message):
        AirflowRefreshHandlerSerializer().deserialize(data)


def test_refresh_trigger_conf_has_the_five_flip448_keys() -> None:
    trigger = RefreshTrigger(False, "2024-01-02 00:00:00", {"a": "1"}, {"ds": "2024-01-01"}, {"b": "2"})
    assert trigger.as_conf() == {
        "isPeriodic": False,
        "scheduleTime": "2024-01-02 00:00:00",
        "dynamicOptions": {"a": "1"},
        "staticPartitions": {"ds": "2024-01-01"},
        "executionConfig": {"b": "2"},
    }


DEFINITION = """-- header comment
CREATE MATERIALIZED TABLE analytics.orders_daily
COMMENT 'it''s daily'
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'owner' = 'data')
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, count(*) AS orders -- trailing comment
FROM raw.orders GROUP BY ds;
"""


def test_render_definition_with_cron_keeps_everything_else() -> None:
    original = parse_definition(DEFINITION, "orders_daily.sql")
    rendered = parse_definition(
        render_definition(original, {**original.options, "schedule.cron": "30 2 * * *"}), "x.sql"
    )
    assert rendered.schedule == "30 2 * * *"
    for name in ("identifier", "comment", "partition_by", "partition_formatters", "freshness",
                 "refresh_mode", "query", "owner"):
        assert getattr(rendered, name) == getattr(original, name), name
    assert "REFRESH_MODE" not in render_definition(original, original.options)  # stays derived


@pytest.mark.parametrize(
    "columns",
    [
        "(\n  ts timestamp(3),\n  id ARRAY<ROW(f0 INT, f1 DECIMAL(10, 2))> NOT NULL PRIMARY KEY NOT ENFORCED "
        "COMMENT 'it''s',\n  name STRING NULL\n)",
        "(a, b, CONSTRAINT k PRIMARY KEY (a) NOT ENFORCED)",
        "(CONSTRAINT `my key` PRIMARY KEY (id) NOT ENFORCED)",
    ],
)
def test_render_definition_keeps_the_column_list_and_key(columns: str) -> None:
    """A re-scheduled table keeps its columns and key (the renderer dropped them)."""
    original = parse_definition(f"CREATE MATERIALIZED TABLE db.t {columns}\nAS SELECT 1 AS id", "t.sql")
    for enriched in (False, True):
        rendered = parse_definition(render_definition(original, original.options, enriched), "x.sql")
        assert (rendered.columns, rendered.primary_key, rendered.primary_key_name) == (
            original.columns, original.primary_key, original.primary_key_name)
        assert (rendered.freshness, rendered.refresh_mode) == (original.freshness, original.refresh_mode)


def test_render_definition_enriched_as_flinks_show_create() -> None:
    """materialized_table.q: SHOW CREATE shows the default freshness and the derived mode."""
    original = parse_definition("CREATE MATERIALIZED TABLE users_shops\nAS SELECT 1 AS user_id", "t.sql")
    assert render_definition(original, original.options, enriched=True) == (
        "CREATE MATERIALIZED TABLE `default`.`users_shops`\nFRESHNESS = INTERVAL '3' MINUTE\n"
        "REFRESH_MODE = CONTINUOUS\nAS SELECT 1 AS user_id"
    )


def test_create_rejects_bad_definitions_before_touching_anything(tmp_path: Path) -> None:
    scheduler = AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path)  # never opened: no I/O
    identifier = TableIdentifier("analytics", "orders_daily")
    cases = [
        (DEFINITION.replace("'1' DAY", "'7' MINUTE\nREFRESH_MODE = FULL"),
         "analytics__orders_daily.sql:6: FRESHNESS"),
        (DEFINITION.replace("'owner'", "'ownr'"), "unknown option 'ownr'"),
        (DEFINITION.replace("FROM raw.orders", "FROM raw.orders WHERE ("), "invalid query"),
        (DEFINITION.replace("FRESHNESS = INTERVAL '1' DAY", "FRESHNESS = INTERVAL '1' DAY\n"
                            "REFRESH_MODE = CONTINUOUS").replace("GROUP BY ds", "GROUP BY ds LIMIT 3"),
         r"orders_daily cannot be refreshed continuously: LIMIT"),
    ]
    for text, message in cases:
        with pytest.raises(WorkflowException, match=message):
            scheduler.create_refresh_workflow(CreatePeriodicRefreshWorkflow(identifier, text))
    with pytest.raises(WorkflowException, match=r"creates analytics\.orders_daily, not analytics\.other"):
        scheduler.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(TableIdentifier("analytics", "other"), DEFINITION)
        )
    with pytest.raises(WorkflowException, match="invalid cron expression"):
        scheduler.create_refresh_workflow(
            CreatePeriodicRefreshWorkflow(identifier, DEFINITION, cron_expression="*/5 * * *")
        )
    assert list(tmp_path.iterdir()) == []
    # The first call that needs Airflow reaches it (nothing listens there).
    with pytest.raises(WorkflowException, match=re.escape("cannot authenticate to Airflow at http://127.0.0.1:1")):
        scheduler.modify_refresh_workflow(SuspendRefreshWorkflow(AirflowRefreshHandler("d", "e")))


def test_workflow_options_and_file_status(tmp_path: Path) -> None:
    definition = tmp_path / "analytics__orders_daily.sql"
    definition.write_text(DEFINITION)
    assert workflow_options(definition) == ({}, {})
    set_workflow_options(definition, {"compression": "zstd"}, None)
    set_workflow_options(definition, None, {"spark.sql.shuffle.partitions": "8"})
    assert workflow_options(definition) == ({"compression": "zstd"}, {"spark.sql.shuffle.partitions": "8"})
    assert state_path(definition).name == "analytics__orders_daily.workflow.json"

    store = CatalogStatusStore(None)  # no metastore: the status stays in the state file
    identifier = TableIdentifier("analytics", "orders_daily")
    assert store.load(identifier, definition).stored_in == "none"
    assert store.save(identifier, definition, RefreshStatus.INITIALIZING, '{"h": 1}') == "file"
    assert store.save(identifier, definition, RefreshStatus.ACTIVATED) == "file"  # handler kept
    status = store.load(identifier, definition)
    assert (status.refresh_status, status.refresh_handler, status.definition, status.stored_in) == (
        RefreshStatus.ACTIVATED, '{"h": 1}', DEFINITION, "file"
    )
    assert status.dynamic_options == {"compression": "zstd"}

    set_workflow_options(definition, {}, {})  # empty maps clear
    assert workflow_options(definition) == ({}, {})
    store.clear(identifier, definition)
    assert not state_path(definition).exists()

    state_path(definition).write_text("[1, 2]")
    with pytest.raises(WorkflowException, match="invalid workflow state file"):
        workflow_options(definition)


def test_open_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(WorkflowException, match=r"definitions folder .* does not exist"):
        AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path / "missing").open()
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    scheduler = AirflowWorkflowScheduler(endpoint, tmp_path)
    scheduler.open()  # the folder exists: Airflow is reached on the first call that needs it
    with pytest.raises(WorkflowException, match=re.escape(f"cannot authenticate to Airflow at {endpoint}")):
        scheduler.client  # noqa: B018


def test_long_table_parameters_are_split_like_spark_schemas() -> None:
    from airflow_provider_staged.materialized.catalog_status import DEFINITION_KEY, _join, _split

    text = "x" * 9001
    params = _split(DEFINITION_KEY, text)
    assert params[f"{DEFINITION_KEY}.numParts"] == "3"
    assert all(len(value) <= 4000 for value in params.values())
    assert _join(params, DEFINITION_KEY) == text
    assert _join(_split(DEFINITION_KEY, "short"), DEFINITION_KEY) == "short"


class UnsupportedCreateRefreshWorkflow(CreateRefreshWorkflow):
    """Flink's test double: a create operation no scheduler knows."""


@dataclasses.dataclass(frozen=True)
class UnsupportedModifyRefreshWorkflow(ModifyRefreshWorkflow[AirflowRefreshHandler]):
    """Flink's test double: a modify operation no scheduler knows."""


def test_flink_unsupported_workflow_operations_name_their_type(tmp_path: Path) -> None:
    """EmbeddedSchedulerRelatedITCase.test{Create,Modify}WorkflowWithUnsupportedTypeByWorkflow
    SchedulerInterface: Flink says "Unsupported create/modify refresh workflow type X."; here the
    type is named too, before anything is read or written."""
    scheduler = AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path)  # never opened: no I/O
    with pytest.raises(WorkflowException) as create:
        scheduler.create_refresh_workflow(UnsupportedCreateRefreshWorkflow())
    assert str(create.value) == "unsupported create operation UnsupportedCreateRefreshWorkflow"
    with pytest.raises(WorkflowException) as modify:
        scheduler.modify_refresh_workflow(UnsupportedModifyRefreshWorkflow(AirflowRefreshHandler("a", "b")))
    assert str(modify.value) == "unsupported modify operation UnsupportedModifyRefreshWorkflow"
    assert list(tmp_path.iterdir()) == []


def test_flink_create_workflow_repeatedly_is_refused(tmp_path: Path) -> None:
    """EmbeddedSchedulerRelatedITCase.testCreateWorkflow(ByWorkflowSchedulerInterface): a second
    create of the same table fails (Flink: "... quartz schedule job already exist ..."), naming
    the table and its workflow; the first workflow's definition is left as it was."""
    scheduler = AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path)  # never opened: no I/O
    identifier = TableIdentifier("analytics", "orders_daily")
    existing = scheduler.definition_path_for(identifier)
    existing.write_text(DEFINITION)
    with pytest.raises(WorkflowException, match=re.escape(
            f"a refresh workflow for analytics.orders_daily already exists ({existing})")):
        scheduler.create_refresh_workflow(CreatePeriodicRefreshWorkflow(identifier, DEFINITION.lower()))
    assert existing.read_text() == DEFINITION and [p.name for p in tmp_path.iterdir()] == [existing.name]


def test_airflow_is_reached_only_after_the_values_are_checked(tmp_path: Path) -> None:
    """Issue 36: SHOW and SHOW CREATE need only the definitions folder, and a refresh's values are
    checked against the definition before Airflow is contacted (nothing listens at the endpoint)."""
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables

    (tmp_path / "analytics__orders_daily.sql").write_text(DEFINITION)
    identifier = TableIdentifier("analytics", "orders_daily")
    endpoint = f"http://127.0.0.1:{free_port()}"
    with AirflowWorkflowScheduler(endpoint, tmp_path) as scheduler:
        tables = MaterializedTables(scheduler, None)
        assert [name for name, _ in tables.list()] == [identifier]
        assert tables.definition(identifier).identifier == identifier
        with pytest.raises(WorkflowException, match=r"not triggered: invalid value '2024-02-30'"):
            tables.refresh(identifier, RefreshTrigger(static_partitions={"ds": "2024-02-30"}))
        unreachable = re.escape(f"cannot authenticate to Airflow at {endpoint}")
        with pytest.raises(WorkflowException, match=unreachable):
            tables.refresh(identifier, RefreshTrigger(static_partitions={"ds": "2024-02-28"}))


def test_a_change_reaches_airflow_before_it_writes_anything(tmp_path: Path) -> None:
    """Airflow is reached lazily, but every change begins with it: with Airflow unreachable,
    CREATE, RESUME WITH (...) and DROP leave the folder, the stored options and the status."""
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables

    path = tmp_path / "analytics__orders_daily.sql"
    path.write_text(DEFINITION)
    set_workflow_options(path, {"compression": "zstd"}, {})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    identifier = TableIdentifier("analytics", "orders_daily")
    unreachable = re.escape("cannot authenticate to Airflow at http://127.0.0.1:1")
    with AirflowWorkflowScheduler("http://127.0.0.1:1", tmp_path) as scheduler:
        tables = MaterializedTables(scheduler, None)
        for change in (
            lambda: tables.create(DEFINITION.replace("orders_daily", "orders_hourly")),
            lambda: tables.resume(identifier, {"compression": "gzip"}),
            lambda: tables.drop(identifier),
        ):
            with pytest.raises(WorkflowException, match=unreachable):
                change()
            assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
