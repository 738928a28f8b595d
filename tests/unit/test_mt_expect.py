"""EXPECT constraints of materialized tables (Databricks' syntax): parsed in the column list,
refused at parse with the constraint's name and position, shown by SHOW CREATE and DESCRIBE,
turned into the row audits every refresh checks, and counted toward auto-suspend when one fails."""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    ExpectConstraint,
    RefreshMode,
    definition_audits,
    parse_definition,
    render_definition,
)
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.refresh import commit_summary
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.sql.materialized_statements import (
    AlterMaterializedTableChange,
    CreateMaterializedTable,
    MaterializedStatementError,
    parse_materialized_statement,
)
from airflow_provider_staged.sql.properties import SessionProperties
from airflow_provider_staged.sql.session import SqlSession, StatementError
from airflow_provider_staged.staging.audits import AuditFailedError, Mode
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from tests.unit.test_mt_cascade import _Workflows
from tests.unit.test_sql_session import creating_session, run

# Line 2 and 3 hold the constraints; {second} is the second one's text after "CONSTRAINT ".
TEMPLATE = """CREATE MATERIALIZED TABLE shop.orders (
  CONSTRAINT positive EXPECT (amount >= 0) ON VIOLATION FAIL UPDATE,
  CONSTRAINT {second}
)
PARTITIONED BY (ds)
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, amount, label FROM raw.orders;
"""
GOOD = "has_label EXPECT (label IS NOT NULL) ON VIOLATION DROP ROW"


def test_constraints_are_parsed_with_their_action() -> None:
    definition = parse_definition(TEMPLATE.format(second=GOOD))
    assert definition.constraints == (
        ExpectConstraint("positive", "amount >= 0", "FAIL UPDATE"),
        ExpectConstraint("has_label", "label IS NOT NULL", "DROP ROW"),
    )
    assert [c.mode for c in definition.constraints] == ["fail", "drop"]
    assert definition.position("EXPECT", "has_label") == (3, 32)
    # Without ON VIOLATION the row is kept and the violation reported (Databricks' default).
    warned = parse_definition(TEMPLATE.format(second="`Label ok` EXPECT (length(label) > (1 + 1))"))
    assert warned.constraints[1] == ExpectConstraint("Label ok", "length(label) > (1 + 1)", None)
    assert warned.constraints[1].mode == "warn"


def test_constraints_beside_columns_and_a_key_and_alone() -> None:
    typed = parse_definition(
        "CREATE MATERIALIZED TABLE t (id BIGINT NOT NULL, CONSTRAINT pk PRIMARY KEY (id) NOT ENFORCED,\n"
        "  CONSTRAINT id_set EXPECT (id > 0 AND id IS NOT NULL))\n"
        "FRESHNESS = INTERVAL '1' HOUR AS SELECT id, 'x' AS label FROM src")
    assert (typed.primary_key, [c.name for c in typed.columns], typed.constraints[0].name) == (
        ("id",), ["id"], "id_set")
    names = parse_definition("CREATE MATERIALIZED TABLE t (a, b, CONSTRAINT ok EXPECT (b <> 'x'))\n"
                             "FRESHNESS = INTERVAL '1' HOUR AS SELECT * FROM src")
    assert [c.name for c in names.columns] == ["a", "b"] and names.constraints[0].expression == "b <> 'x'"
    alone = parse_definition("CREATE MATERIALIZED TABLE t (CONSTRAINT ok EXPECT (a IN (1, 2)))\n"
                             "FRESHNESS = INTERVAL '1' HOUR AS SELECT * FROM src")
    assert alone.columns == () and alone.constraints[0].expression == "a IN (1, 2)"


@pytest.mark.parametrize(("second", "position", "message"), [
    ("x EXPECT (amount + 1)", (3, 24),
     "constraint 'x': not a boolean expression (a comparison, IS NULL, AND, ...)"),
    ("x EXPECT (cost > 0)", (3, 24),
     "constraint 'x': unknown column 'cost' (the output has ['amount', 'ds', 'label'])"),
    ("x EXPECT (amount > 0 AND\n    cost > 0)", (4, 5), "constraint 'x': unknown column 'cost'"),
    ("x EXPECT (amount > 0; DROP TABLE raw.orders)", (3, 34),
     "constraint 'x': one expression expected, not several statements"),
    ("x EXPECT (amount > (SELECT max(a) FROM t))", (3, 34),
     "constraint 'x': a subquery or statement is not allowed in an expectation"),
    ("x EXPECT (count(*) > 0)", (3, 24), "constraint 'x': an aggregate is not allowed in a row expectation"),
    ("x EXPECT (amount >)", (3, 31), "constraint 'x': does not parse (Required keyword"),
    ("Positive EXPECT (amount > 1)", (3, 14), "duplicate constraint name 'Positive'"),
    ("x EXPECT (amount > 0) ON VIOLATION IGNORE", (3, 49),
     "constraint 'x': expected FAIL UPDATE or DROP ROW after ON VIOLATION, found 'IGNORE'"),
    ("x EXPECT (amount > 0) ON VIOLATION FAIL ROW", (3, 54), "expected UPDATE, found 'ROW'"),
    ("x EXPECT ()", (3, 24), "constraint 'x': expected a condition in EXPECT (...)"),
    ("x EXPECT amount > 0", (3, 23), "expected '(', found 'amount'"),
    ("x EXPECT (label = \"a\")", (3, 32), "unexpected '\"'"),
])
def test_bad_constraints_are_refused_at_parse_naming_them_and_the_place(
    second: str, position: tuple[int, int], message: str
) -> None:
    text = TEMPLATE.format(second=second)
    with pytest.raises(DefinitionError) as caught:
        parse_definition(text, "orders.sql")
    error = caught.value
    assert (error.line, error.column) == position, str(error)
    assert error.message.startswith(message), str(error)
    assert str(error).startswith(f"orders.sql:{position[0]}: ") and "\n" not in str(error)
    # The SQL client's CREATE: the same message at the same place.
    with pytest.raises(MaterializedStatementError) as statement:
        parse_materialized_statement(text)
    assert (statement.value.line, statement.value.column) == position
    assert message in statement.value.message


def test_a_file_error_of_a_constraint_names_its_column_too() -> None:
    with pytest.raises(DefinitionError, match=r"^orders\.sql:3: EXPECT: constraint 'x': not a boolean "
                       r"expression .* \(line 3, column 24\)$"):
        parse_definition(TEMPLATE.format(second="x EXPECT (amount + 1)"), "orders.sql")


def test_an_expect_after_a_column_is_refused_and_a_continuous_table_audits_its_stream() -> None:
    with pytest.raises(DefinitionError, match="an EXPECT constraint is an element of the column list of its "
                       "own") as caught:
        parse_definition("CREATE MATERIALIZED TABLE t (a INT CONSTRAINT x EXPECT (a > 0))\n"
                         "FRESHNESS = INTERVAL '1' HOUR AS SELECT 1 AS a")
    assert (caught.value.line, caught.value.column) == (1, 49)
    # CONTINUOUS (a 3-minute default freshness): its sink audits each micro-batch.
    continuous = parse_definition("CREATE MATERIALIZED TABLE t (CONSTRAINT x EXPECT (a > 0))\n"
                                  "AS SELECT 1 AS a")
    assert continuous.refresh_mode is RefreshMode.CONTINUOUS
    assert [e.name for e in definition_audits(continuous).expectations] == ["x"]
    with pytest.raises(DefinitionError, match="constraint 'x'"):
        parse_definition("CREATE MATERIALIZED TABLE t (CONSTRAINT x EXPECT (a >))\nAS SELECT 1 AS a")


def test_a_star_query_meets_its_columns_at_spark_analysis() -> None:
    """``SELECT *`` tells no columns: CREATE in the SQL client refuses the unknown one once Spark
    analysed the query (``SchemaSpark``: shop_id, user_id), at the constraint, creating nothing."""
    s, tables, _ = creating_session()
    statement = ("CREATE MATERIALIZED TABLE t (\n  CONSTRAINT ok EXPECT (shop_id > 0),\n"
                 "  CONSTRAINT bad EXPECT (shop_id > 0 OR cost > 0))\nFRESHNESS = INTERVAL '1' HOUR\n"
                 "AS SELECT * FROM (SELECT 1 AS shop_id, 2 AS user_id)")
    with pytest.raises(StatementError) as caught:
        run(s, statement)
    assert (caught.value.line, caught.value.column) == (3, 41)
    assert caught.value.message.startswith("constraint 'bad': unknown column 'cost' (the output has "
                                           "['shop_id', 'user_id'])")
    assert tables.created == []
    run(s, statement.replace(" OR cost > 0", ""))
    assert len(tables.created) == 1


def test_show_create_and_the_definition_file_round_trip() -> None:
    definition = parse_definition(TEMPLATE.format(second="`Label ok` EXPECT (label RLIKE '^[a-z]+$')"))
    shown = render_definition(definition, definition.options, enriched=True)
    assert ("(\n  CONSTRAINT `positive` EXPECT (amount >= 0) ON VIOLATION FAIL UPDATE,\n"
            "  CONSTRAINT `Label ok` EXPECT (label RLIKE '^[a-z]+$')\n)\nPARTITIONED BY (`ds`)") in shown
    again = parse_materialized_statement(shown)
    assert isinstance(again, CreateMaterializedTable)
    assert again.definition.constraints == definition.constraints
    file_text = render_definition(definition, definition.options)
    assert parse_definition(file_text).constraints == definition.constraints
    assert render_definition(parse_definition(file_text), definition.options) == file_text


def test_alter_keeps_the_constraints() -> None:
    definition = parse_definition(TEMPLATE.format(second=GOOD))
    alter = parse_materialized_statement("ALTER MATERIALIZED TABLE shop.orders SET ('owner' = 'ana')")
    assert isinstance(alter, AlterMaterializedTableChange)
    assert alter.apply(definition).constraints == definition.constraints
    # A new query must still give the constraints their columns.
    query = parse_materialized_statement("ALTER MATERIALIZED TABLE shop.orders AS SELECT ds, amount FROM x")
    assert isinstance(query, AlterMaterializedTableChange)
    with pytest.raises(MaterializedStatementError, match="constraint 'has_label': unknown column 'label'"):
        query.apply(definition)


def test_each_refresh_checks_the_constraints_as_row_audits() -> None:
    suite = definition_audits(parse_definition(TEMPLATE.format(second=GOOD)))
    assert [(e.name, e.kind, e.mode, e.condition) for e in suite.expectations] == [
        ("positive", "row", Mode.FAIL, "amount >= 0"), ("has_label", "row", Mode.DROP, "label IS NOT NULL")]
    assert not definition_audits(parse_definition("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' "
                                                  "HOUR AS SELECT 1 AS x"))


def test_the_commit_line_counts_dropped_rows() -> None:
    definition = parse_definition(TEMPLATE.format(second=GOOD))
    request = parse_refresh_request({"ds": "2024-01-03"}, definition, datetime(2024, 1, 4))
    written = Manifest("/w/_v=a1", files=[DataFile("ds=2024-01-03/part-0.parquet", 4, 10)], dropped_rows=2)
    assert commit_summary(definition, request, "a1", written).endswith(
        "version a1, 4 rows (2 rows dropped by DROP ROW constraints)")


def test_describe_lists_the_expectations(tmp_path: Path) -> None:
    workflows = _Workflows(tmp_path)
    workflows.add("m.plain", "SELECT 1 AS k")
    path = workflows.definition_path_for(TableIdentifier("shop", "orders"))
    path.write_text(TEMPLATE.format(second=GOOD))
    workflows.paused["mt__shop__orders"] = False
    tables = MaterializedTables(workflows, None)  # type: ignore[arg-type]
    assert tables.describe(TableIdentifier("shop", "orders")).expectations == (
        "CONSTRAINT `positive` EXPECT (amount >= 0) ON VIOLATION FAIL UPDATE",
        "CONSTRAINT `has_label` EXPECT (label IS NOT NULL) ON VIOLATION DROP ROW",
    )
    session = SqlSession(creating_session()[2], SessionProperties(), lambda: pytest.fail("no settings"),
                         lambda _: contextlib.nullcontext(tables))
    facts = dict(run(session, "DESCRIBE MATERIALIZED TABLE shop.orders").rows)
    assert facts["expectations"].startswith("CONSTRAINT `positive` EXPECT (amount >= 0) ON VIOLATION FAIL "
                                            "UPDATE; CONSTRAINT `has_label`")
    assert dict(run(session, "DESCRIBE MATERIALIZED TABLE m.plain").rows)["expectations"] == "-"


# -- auto-suspend counts a refresh that failed its audit ----------------------------------------


class _Engine:
    def close(self) -> None:
        pass


def test_a_failed_audit_fails_the_refresh_for_good_and_counts_toward_auto_suspend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh task turns the audit's failure into a final one (no retry of the same data) and
    its final-failure callback counts it as any failed scheduled refresh: the table suspends at
    its 'suspend-after-num-failures'."""
    from airflow.providers.common.compat.sdk import AirflowFailException

    import airflow_provider_staged.engine.runners as runners
    import airflow_provider_staged.materialized.refresh as refresh
    from airflow_provider_staged.airflow.operators import materialized_refresh
    from airflow_provider_staged.materialized.catalog_status import CatalogStatusStore
    from airflow_provider_staged.materialized.workflow import auto_suspend

    path = tmp_path / "shop__orders.sql"
    path.write_text(TEMPLATE.format(second=GOOD).replace(
        "PARTITIONED BY (ds)\n", "PARTITIONED BY (ds)\nWITH ('suspend-after-num-failures' = '2')\n"))
    definition = parse_definition(path.read_text(), path)
    message = "audit(s) failed on shop.orders: positive (3 failing row(s)). shop.orders is unchanged"

    def failing_refresh(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AuditFailedError(message)

    monkeypatch.setattr(refresh, "run_refresh", failing_refresh)
    monkeypatch.setattr(refresh, "staged_refresh", lambda *args: SimpleNamespace(attempt_id="a1"))
    monkeypatch.setattr(runners, "make_engine", lambda *args, **kwargs: _Engine())
    monkeypatch.setattr(materialized_refresh, "task_ref", lambda context: None)
    monkeypatch.setattr(materialized_refresh.StagedTableHook, "get_settings",
                        lambda self: SimpleNamespace(metastore_uri=None))
    operator = materialized_refresh.MaterializedTableRefreshOperator(task_id="refresh", definition=definition)
    assert any(getattr(callback, "func", None) is materialized_refresh._count_failure
               for callback in operator.on_failure_callback)  # type: ignore[union-attr]
    run = SimpleNamespace(run_id="scheduled__2024-01-04T00:00:00+00:00", run_type="scheduled",
                          run_after=datetime(2024, 1, 4), partition_key=None)
    context = {"params": {"ds": "2024-01-03"}, "logical_date": datetime(2024, 1, 4), "dag_run": run}
    with pytest.raises(AirflowFailException, match=r"audit.*positive") as failed:
        operator.execute(context)  # type: ignore[arg-type]

    suspended: list[str] = []
    monkeypatch.setattr(auto_suspend, "_suspend", lambda definition, *args: suspended.append(
        definition.identifier.name))
    status = auto_suspend.record_failure(definition, {"dag_run": run, "exception": failed.value}, None)
    assert status is not None and status.failures.count == 1 and suspended == []
    assert "positive (3 failing row(s))" in (status.failures.last_failure or "")
    auto_suspend.record_failure(definition, {"dag_run": run, "exception": failed.value}, None)
    assert suspended == ["shop.orders"]
    assert CatalogStatusStore(None).load(definition.identifier, path).failures.count == 2


# -- the Materialized tables page ---------------------------------------------------------------


def test_the_page_shows_the_last_audits_and_marks_a_quarantined_run() -> None:
    from airflow_provider_staged.airflow.ui.history import RunHistoryFacts, history_rows
    from airflow_provider_staged.airflow.ui.rows import refresh_from_event
    from airflow_provider_staged.staging.audits import audit_summary
    from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef

    results = [
        {"name": "positive", "kind": "row", "mode": "fail", "passed": False, "failing": 1},
        {"name": "has_region", "kind": "row", "mode": "drop", "passed": True, "failing": 2},
        {"name": "label", "kind": "row", "mode": "warn", "passed": False, "failing": 3},
    ]
    assert audit_summary(results) == "positive: 1 failing; has_region: dropped 2; label: 3 failing (warn)"
    assert audit_summary(None) is None
    # The last committed refresh (its asset event's extra is what run_refresh returned).
    extra = {"rows": 2, "partitions": {"ds": "2024-01-02"}, "version": "v", "audits": results[1:2]}
    assert refresh_from_event(extra, datetime(2024, 1, 3)).audits == "has_region: dropped 2"
    assert refresh_from_event({"rows": 1}, datetime(2024, 1, 3)).audits is None
    # A run whose version failed its audits: quarantined, with what failed.
    dag = "mt__shop__orders"
    record = AttemptRecord(
        "a1", "hive_partitions", "shop.orders", "create_or_replace", "file:/wh/_v=a1",
        state=AttemptState.WRITTEN, task=TaskRef(dag, "refresh", "manual__1", 1), manifest={"rows": 3},
        audits={"declared": [], "results": results[:2], "verdict": "quarantined"}, created_at=1.0,
    )
    run = RunHistoryFacts("manual__1", "manual", "failed", {}, None, None)
    [row] = history_rows(dag, [run], [record])
    assert (row["outcome"], row["audits"]) == ("QUARANTINED", "positive: 1 failing; has_region: dropped 2")


# -- the SQL client's CTAS ------------------------------------------------------------------------


def test_a_ctas_takes_the_same_expect_clauses_as_row_audits() -> None:
    from airflow_provider_staged.sql.ctas import CtasError, plan_ctas
    from airflow_provider_staged.sql.splitting import tokenize

    sql = ("CREATE TABLE db.t (\n  CONSTRAINT positive EXPECT (amount >= 0) ON VIOLATION FAIL UPDATE,\n"
           "  CONSTRAINT has_label EXPECT (label IS NOT NULL) ON VIOLATION DROP ROW\n)\n"
           "USING parquet PARTITIONED BY (ds) COMMENT 'c' AS SELECT * FROM x")
    plan = plan_ctas(sql, tokenize(sql), "cur")
    assert (plan.target.name, plan.partition_by, plan.properties) == ("db.t", ("ds",), {"comment": "c"})
    assert [(e.name, e.mode.value) for e in plan.audit_suite().expectations] == [("positive", "fail"),
                                                                                ("has_label", "drop")]
    assert plan.query == "SELECT * FROM x"
    # A second statement inside EXPECT (the client's splitter already cuts at the ';': plan alone).
    sql = "CREATE TABLE t (CONSTRAINT p EXPECT (amount > 0; DROP TABLE x)) AS SELECT 1 AS amount"
    with pytest.raises(CtasError, match=r"^EXPECT: constraint 'p': one expression expected") as caught:
        plan_ctas(sql, tokenize(sql), "cur")
    assert (caught.value.line, caught.value.column) == (1, 48)


@pytest.mark.parametrize(("columns", "position", "message"), [
    ("(CONSTRAINT pos EXPECT (amount + 1))", (1, 40), "EXPECT: constraint 'pos': not a boolean expression"),
    ("(CONSTRAINT p EXPECT (amount > 0), CONSTRAINT P EXPECT (amount > 1))", (1, 62),
     "EXPECT: duplicate constraint name 'P'"),
    ("(CONSTRAINT p EXPECT (amount > 0), b INT)", (1, 51), "EXPECT: the column list of an atomic CTAS holds "
     "EXPECT constraints only"),
    # The query's columns are known once Spark analysed it (SchemaSpark: shop_id, user_id).
    ("(CONSTRAINT p EXPECT (shop_id > 0),\n CONSTRAINT q EXPECT (user_id > 0 AND amount > 0))", (2, 39),
     "EXPECT: constraint 'q': unknown column 'amount' (the output has ['shop_id', 'user_id'])"),
])
def test_a_bad_expect_of_a_ctas_is_refused_before_anything_runs(
    columns: str, position: tuple[int, int], message: str
) -> None:
    s, _, spark = creating_session()
    with pytest.raises(StatementError) as caught:
        run(s, f"CREATE TABLE t {columns} AS SELECT 1 AS shop_id, 2 AS user_id")
    assert caught.value.message.startswith(message), caught.value.message
    assert (caught.value.line, caught.value.column) == position
    # Refused before the settings were read (creating_session fails the test if they are).
    assert spark.queries in ([], ["SELECT 1 AS shop_id, 2 AS user_id"])
