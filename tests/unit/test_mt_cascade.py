"""Graph-aware operations of ``MaterializedTables`` and their statements: a cycle refused at
CREATE, DROP refused while others read the table unless CASCADE, SUSPEND/RESUME CASCADE. All
refusals come before any work, so a fake workflow scheduler (no Airflow) records what was done."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli.main import app
from airflow_provider_staged.materialized.definition import read_identifier
from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.workflow.airflow_scheduler import (
    AirflowRefreshHandler,
    AirflowRefreshHandlerSerializer,
)
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import CreateRefreshWorkflow, WorkflowException
from airflow_provider_staged.sql.materialized_statements import (
    DropMaterializedTable,
    MaterializedStatementError,
    ResumeMaterializedTable,
    SuspendMaterializedTable,
    parse_materialized_statement,
)
from airflow_provider_staged.sql.properties import SessionProperties
from airflow_provider_staged.sql.session import SqlSession, StatementError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from tests.unit.test_cli_errors import fails_with
from tests.unit.test_sql_session import SchemaSpark, run


class _Workflows:
    """A workflow scheduler over a real definitions folder whose DAGs pause, unpause and go."""

    endpoint = "http://127.0.0.1:9"
    poll_interval = 0.0

    def __init__(self, folder: Path) -> None:
        self.definitions_dir = folder
        self.paused: dict[str, bool] = {}
        self.done: list[tuple[str, str]] = []  # (operation, dag id), in order

    def add(self, table: str, query: str) -> None:
        identifier = TableIdentifier.parse(table)
        text = f"CREATE MATERIALIZED TABLE {table}\nFRESHNESS = INTERVAL '1' HOUR\nAS {query}\n"
        self.definition_path_for(identifier).write_text(text)
        self.paused[dag_id_for(identifier)] = False

    def definition_path_for(self, identifier: TableIdentifier) -> Path:
        return self.definitions_dir / f"{identifier.database}__{identifier.table}.sql"

    def definition_file(self, dag_id: str) -> Path | None:
        return next((p for p in sorted(self.definitions_dir.glob("*.sql"))
                     if dag_id_for(read_identifier(p)) == dag_id), None)

    def get_refresh_handler_serializer(self) -> AirflowRefreshHandlerSerializer:
        return AirflowRefreshHandlerSerializer()

    def connect(self) -> None:
        self.done.append(("connect", ""))

    def get_dag(self, handler: AirflowRefreshHandler) -> object:
        return SimpleNamespace(is_paused=self.paused[handler.dag_id], timetable_summary="0 * * * *")

    def last_runs(self, handler: AirflowRefreshHandler, limit: int = 5) -> list[object]:
        return []

    def create_refresh_workflow(self, workflow: CreateRefreshWorkflow) -> AirflowRefreshHandler:
        self.done.append(("create", dag_id_for(workflow.identifier)))
        raise AssertionError("a refused CREATE reached the workflow scheduler")

    def modify_refresh_workflow(self, workflow: object) -> None:
        name = type(workflow).__name__.removesuffix("RefreshWorkflow").lower()
        dag_id = workflow.refresh_handler.dag_id  # type: ignore[attr-defined]
        self.paused[dag_id] = name == "suspend"
        self.done.append((name, dag_id))

    def delete_refresh_workflows(self, handlers: list[AirflowRefreshHandler]) -> None:
        for handler in handlers:
            self.definition_file(handler.dag_id).unlink()  # type: ignore[union-attr]
            self.done.append(("delete", handler.dag_id))


Setup = tuple[_Workflows, MaterializedTables]


@pytest.fixture
def chain(tmp_path: Path) -> Setup:
    """m.a <- raw.src, m.b <- m.a, m.c <- m.b, m.d <- m.a (a chain with a branch); m.x alone."""
    workflows = _Workflows(tmp_path)
    workflows.add("m.a", "SELECT * FROM raw.src")
    workflows.add("m.b", "SELECT * FROM m.a")
    workflows.add("m.c", "SELECT * FROM m.b")
    workflows.add("m.d", "SELECT * FROM m.a")
    workflows.add("m.x", "SELECT 1 AS k")
    return workflows, MaterializedTables(workflows, None)  # type: ignore[arg-type]


def ops(workflows: _Workflows) -> list[tuple[str, str]]:
    return [(op, dag.removeprefix("mt__m__")) for op, dag in workflows.done if op != "connect"]


def T(name: str) -> TableIdentifier:
    return TableIdentifier.parse(name)


def test_create_closing_a_cycle_is_refused_before_any_work(chain: Setup) -> None:
    workflows, tables = chain
    # m.a reads raw.src: as a materialized table reading m.c, raw.src would read itself.
    with pytest.raises(WorkflowException, match=r"^raw\.src refused: .*cycle.*: raw\.src -> m\.a -> m\.b -> "
                       r"m\.c -> raw\.src$"):
        tables.create("CREATE MATERIALIZED TABLE raw.src AS SELECT * FROM m.c")
    assert workflows.done == []
    assert not (workflows.definitions_dir / "raw__src.sql").exists()


def test_drop_of_a_table_others_read_is_refused_naming_them(chain: Setup) -> None:
    workflows, tables = chain
    with pytest.raises(WorkflowException, match=r"^m\.a not dropped: materialized tables read it: "
                       r"m\.c, m\.b, m\.d \(DROP MATERIALIZED TABLE m\.a CASCADE drops them first\)$"):
        tables.drop(T("m.a"))
    assert workflows.done == []
    assert tables.drop(T("m.c")) == [T("m.c")]  # nothing reads it


def test_drop_cascade_drops_the_dependents_downstream_first(chain: Setup) -> None:
    workflows, tables = chain
    assert tables.drop(T("m.a"), cascade=True) == [T("m.c"), T("m.b"), T("m.d"), T("m.a")]
    assert ops(workflows) == [("delete", "c"), ("delete", "b"), ("delete", "d"), ("delete", "a")]
    assert [p.name for p in workflows.definitions_dir.iterdir()] == ["m__x.sql"]


def test_suspend_and_resume_cascade(chain: Setup) -> None:
    workflows, tables = chain
    tables.suspend(T("m.d"))  # already suspended: skipped by the cascade, not refused
    assert tables.suspend(T("m.a"), cascade=True) == [T("m.c"), T("m.b"), T("m.a")]
    assert ops(workflows)[1:] == [("suspend", "c"), ("suspend", "b"), ("suspend", "a")]
    assert workflows.paused["mt__m__x"] is False  # not downstream
    workflows.done.clear()
    assert tables.resume(T("m.b"), cascade=True) == [T("m.b"), T("m.c")]  # upstream-first; m.a stays
    assert tables.resume(T("m.a"), cascade=True) == [T("m.a"), T("m.d")]
    assert ops(workflows) == [("resume", "b"), ("resume", "c"), ("resume", "a"), ("resume", "d")]
    assert not any(workflows.paused.values())


def test_a_repeated_suspend_cascade_is_refused_before_the_dependents_change(
    chain: Setup,
) -> None:
    workflows, tables = chain
    tables.suspend(T("m.a"))
    with pytest.raises(WorkflowException, match=r"m\.a refresh workflow has been suspended"):
        tables.suspend(T("m.a"), cascade=True)
    assert ops(workflows) == [("suspend", "a")]


def test_the_graph_is_read_again_only_when_a_definition_changes(chain: Setup) -> None:
    workflows, tables = chain
    before = tables.graph()
    assert before is tables.graph()  # no query parsed again while the folder is unchanged
    workflows.add("m.e", "SELECT * FROM m.b JOIN other.m.a USING (k) JOIN raw.dim USING (k)")
    graph = tables.graph()
    assert graph.nodes[T("m.e")].inputs == ("m.b", "other.m.a", "raw.dim")
    assert graph.downstream(T("m.b")) == (T("m.c"), T("m.e"))


@pytest.mark.parametrize(("text", "expected"), [
    ("DROP MATERIALIZED TABLE m.a CASCADE", DropMaterializedTable(T("m.a"), False, True)),
    ("drop materialized table if exists m.a cascade;", DropMaterializedTable(T("m.a"), True, True)),
    ("DROP MATERIALIZED TABLE m.a", DropMaterializedTable(T("m.a"), False, False)),
    ("ALTER MATERIALIZED TABLE m.a SUSPEND CASCADE", SuspendMaterializedTable(T("m.a"), True)),
    ("ALTER MATERIALIZED TABLE m.a RESUME CASCADE", ResumeMaterializedTable(T("m.a"), {}, cascade=True)),
    ("ALTER MATERIALIZED TABLE m.a RESUME CASCADE WITH ('k' = 'v')",
     ResumeMaterializedTable(T("m.a"), {"k": "v"}, cascade=True)),
])
def test_cascade_parses(text: str, expected: object) -> None:
    assert parse_materialized_statement(text) == expected


@pytest.mark.parametrize(("text", "column", "match"), [
    ("DROP MATERIALIZED TABLE m.a CASCADE RESTRICT", 37, "expected the end of the statement, found 'RESTRI"),
    ("DROP MATERIALIZED TABLE CASCADE m.a", 33, "expected the end of the statement, found 'm'"),
    ("ALTER MATERIALIZED TABLE m.a RESUME WITH ('k' = 'v') CASCADE", 54, "found 'CASCADE'"),
    ("ALTER MATERIALIZED TABLE m.a REFRESH CASCADE PARTITION (ds = '1')", 46, "found 'PARTITION'"),
])
def test_cascade_anywhere_else_is_an_error_at_it(text: str, column: int, match: str) -> None:
    with pytest.raises(MaterializedStatementError, match=match) as raised:
        parse_materialized_statement(text)
    assert raised.value.column == column


def sql(tables: MaterializedTables, text: str, spark: SchemaSpark | None = None) -> str:
    """The message of ``text`` run by the SQL client on ``tables``."""
    no_settings = lambda: pytest.fail("no settings needed")  # noqa: E731
    session = SqlSession(spark or SchemaSpark(), SessionProperties(), no_settings,
                         lambda _: contextlib.nullcontext(tables))
    return run(session, text).message


def test_the_sql_client_names_a_cycle_before_spark_analyses_the_query(chain: Setup) -> None:
    workflows, tables = chain
    spark = SchemaSpark()
    with pytest.raises(StatementError, match=r"raw\.src -> m\.a -> m\.b -> m\.c -> raw\.src$"):
        sql(tables, "CREATE MATERIALIZED TABLE raw.src AS SELECT * FROM m.c", spark)
    assert spark.queries == [] and workflows.done == []


def test_the_sql_client_drops_suspends_and_resumes_with_cascade(chain: Setup) -> None:
    _, tables = chain
    with pytest.raises(StatementError, match=r"^m\.b not dropped: materialized tables read it: m\.c \("):
        sql(tables, "DROP MATERIALIZED TABLE m.b")
    assert sql(tables, "ALTER MATERIALIZED TABLE m.b SUSPEND CASCADE") == (
        "Materialized tables m.c, m.b suspended.")
    assert sql(tables, "ALTER MATERIALIZED TABLE m.b RESUME CASCADE") == (
        "Materialized tables m.b, m.c resumed.")
    assert sql(tables, "DROP MATERIALIZED TABLE m.b CASCADE") == (
        "Materialized tables m.c, m.b dropped (their data stays in the catalog).")
    assert sql(tables, "DROP MATERIALIZED TABLE m.x CASCADE") == (
        "Materialized table m.x dropped (its data stays in the catalog).")


def mt(workflows: _Workflows, *args: str) -> list[str]:
    """``staged mt`` on the fixture's folder with an Airflow (and a metastore) nothing listens at."""
    return ["mt", "--endpoint", "http://127.0.0.1:9", "--metastore-uri", "thrift://127.0.0.1:9",
            "--definitions-dir", str(workflows.definitions_dir), *args]


def test_staged_mt_graph_prints_edges_then_lone_tables_and_json(chain: Setup) -> None:
    workflows, _ = chain
    # m.c follows its input's commits: marked where it appears downstream.
    workflows.definition_path_for(T("m.c")).write_text(
        "CREATE MATERIALIZED TABLE m.c\nFRESHNESS = DOWNSTREAM\nAS SELECT * FROM m.b\n")
    text = CliRunner().invoke(app, mt(workflows, "graph"))
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines() == ["m.a -> m.b", "m.a -> m.d", "m.b -> m.c (DOWNSTREAM)", "m.x"]
    document = json.loads(CliRunner().invoke(app, mt(workflows, "graph", "-o", "json")).stdout)
    assert document["edges"][0] == {"upstream": "m.a", "downstream": "m.b"}
    first = document["nodes"][0]
    assert first["definitions"] == [str(workflows.definitions_dir / "m__a.sql")]
    assert (first["table"], first["inputs"], first["upstream"], first["downstream"]) == (
        "m.a", ["raw.src"], [], ["m.b", "m.d"])
    assert [node["freshness"] for node in document["nodes"]] == [
        "INTERVAL '1' HOUR", "INTERVAL '1' HOUR", "DOWNSTREAM", "INTERVAL '1' HOUR", "INTERVAL '1' HOUR"]
    assert document["cycles"] == []


def test_staged_mt_refuses_before_the_metastore_or_airflow(chain: Setup, tmp_path: Path) -> None:
    workflows, _ = chain
    fails_with(mt(workflows, "drop", "m.b"), "m.b not dropped: materialized tables read it: m.c (")
    cyclic = tmp_path / "cyclic.sql"
    cyclic.write_text("CREATE MATERIALIZED TABLE raw.src AS SELECT * FROM m.c")
    for check in ("--check", "--no-check"):
        fails_with(mt(workflows, "create", str(cyclic), check), "raw.src -> m.a -> m.b -> m.c -> raw.src")
    # --cascade gets past the graph, as far as the tables' status in the metastore.
    for command in ("drop", "suspend", "resume"):
        fails_with(mt(workflows, command, "m.b", "--cascade"), "cannot reach the Hive Metastore")


class _RefreshedOnly(SchemaSpark):
    """A Spark whose catalog holds ``tables`` only."""

    def __init__(self, *tables: str) -> None:
        super().__init__()
        self.catalog.tableExists = lambda name: name.replace("`", "") in tables  # type: ignore[attr-defined]
        self.catalog.databaseExists = lambda name: True  # type: ignore[attr-defined]


def test_create_of_a_table_reading_one_not_refreshed_yet_says_so_at_its_name(chain: Setup) -> None:
    """Before, Spark's analysis said only TABLE_OR_VIEW_NOT_FOUND, as if m.b were no table at all."""
    _, tables = chain
    spark = _RefreshedOnly("m.a")
    text = "CREATE MATERIALIZED TABLE m.e\nAS SELECT * FROM m.a\n  JOIN m.b USING (k)"
    refused = (r"^AS: the query reads materialized table m\.b, which has not been refreshed yet .*"
               r"ALTER MATERIALIZED TABLE m\.b REFRESH .*then create m\.e$")
    with pytest.raises(StatementError, match=refused) as caught:
        sql(tables, text, spark)
    assert (caught.value.line, caught.value.column) == (3, 8) and spark.queries == []
    refreshed = _RefreshedOnly("m.a", "m.b")
    with pytest.raises(StatementError, match="reached the workflow scheduler"):
        sql(tables, text, refreshed)
    assert refreshed.queries  # analysed by Spark, then on to the workflow


def test_describe_lists_inputs_and_dependents(chain: Setup) -> None:
    workflows, tables = chain
    workflows.add("m.e", "SELECT * FROM m.b JOIN other.m.a USING (k)")
    session = SqlSession(SchemaSpark(), SessionProperties(), lambda: pytest.fail("no settings needed"),
                         lambda _: contextlib.nullcontext(tables))
    facts = dict(run(session, "DESCRIBE MATERIALIZED TABLE m.b").rows)
    assert (facts["inputs"], facts["dependents"]) == ("m.a (materialized)", "m.c, m.e")
    facts = dict(run(session, "DESCRIBE MATERIALIZED TABLE m.e").rows)
    assert (facts["inputs"], facts["dependents"]) == (
        "m.b (materialized), other.m.a (catalog other: not a dependency)", "-")


class _Followed(_Workflows):
    """The fake with a FRESHNESS = DOWNSTREAM table m.f reading m.a, its pause time and its
    input's keyed events; ``audit_log`` False: Airflow refuses this user its audit log."""

    def __init__(self, folder: Path, audit_log: bool = True) -> None:
        super().__init__(folder)
        self.audit_log = audit_log
        self.triggered: list[object] = []
        self.add("m.a", "SELECT ds, n FROM raw.src")
        text = ("CREATE MATERIALIZED TABLE m.f PARTITIONED BY (ds) FRESHNESS = DOWNSTREAM\n"
                "AS SELECT ds, n FROM m.a\n")
        self.definition_path_for(T("m.f")).write_text(text)
        self.paused["mt__m__f"] = True

    def paused_since(self, handler: AirflowRefreshHandler) -> object:
        if not self.audit_log:
            raise WorkflowException("cannot read the audit log of mt__m__f: HTTP 403: Forbidden")
        return datetime(2024, 1, 10, tzinfo=timezone.utc)

    def input_events(self, handler: AirflowRefreshHandler) -> dict[str, list[tuple[str, datetime]]]:
        return {"hive://m:9083/m/a": [("ds=2024-01-11", datetime(2024, 1, 11, tzinfo=timezone.utc)),
                                      ("ds=2024-01-09", datetime(2024, 1, 9, tzinfo=timezone.utc))]}

    def trigger_refresh(self, handler: AirflowRefreshHandler, trigger: object) -> str:
        self.triggered.append(trigger)
        return f"manual__{len(self.triggered)}"


def test_resume_of_a_downstream_table_refreshes_what_its_inputs_committed_while_suspended(
    tmp_path: Path,
) -> None:
    workflows = _Followed(tmp_path)
    tables = MaterializedTables(workflows, None)  # type: ignore[arg-type]
    assert tables.resume(T("m.f")) == [T("m.f")]
    (trigger,) = workflows.triggered
    assert (trigger.static_partitions, trigger.refresh_downstream) == ({"ds": "2024-01-11"}, True)


def test_resume_goes_on_when_airflow_keeps_its_audit_log_from_this_user(tmp_path: Path) -> None:
    workflows = _Followed(tmp_path, audit_log=False)
    tables = MaterializedTables(workflows, None)  # type: ignore[arg-type]
    assert tables.resume(T("m.f")) == [T("m.f")]
    assert workflows.paused["mt__m__f"] is False and workflows.triggered == []
