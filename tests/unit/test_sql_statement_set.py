"""Statement sets in both of Flink's spellings: splitting, the grammar's refusals with positions,
and each INSERT's target and query. Tests named after Flink's (FlinkSqlParserExecuteTest,
SessionContextTest.testStatementSetStateTransition) carry their vectors."""

from __future__ import annotations

import pytest

from airflow_provider_staged.sql.splitting import Statement, is_complete, split_statements, tokenize
from airflow_provider_staged.sql.statement_set import (
    ONLY_INSERT,
    InsertPlan,
    StatementSet,
    StatementSetError,
    parse_statement_set,
    plan_insert,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier


def parsed(sql: str) -> StatementSet | None:
    """The statement set of ``sql``'s first statement, as the session reads it."""
    statement = split_statements(sql)[0]
    return parse_statement_set(statement.text, tokenize(statement.text))


def refused(sql: str) -> StatementSetError:
    with pytest.raises(StatementSetError) as caught:
        parsed(sql)
    return caught.value


def test_execute_statement_set() -> None:  # FlinkSqlParserExecuteTest.testExecuteStatementSet
    sql = "execute statement set begin insert into t1 select * from t2; insert into t2 select * from t3; end"
    assert parsed(sql) == StatementSet((
        Statement("insert into t1 select * from t2", 1, 29),
        Statement("insert into t2 select * from t3", 1, 62),
    ))


def test_begin_statement_set_is_one_statement_with_its_inserts() -> None:  # testBeginStatementSet
    sql = ("BEGIN STATEMENT SET;\nINSERT INTO a SELECT 1;\n"
           "INSERT INTO b SELECT CASE WHEN x THEN 1 END FROM s;\nEND;\nSELECT 2")
    statements = split_statements(sql)
    assert [s.text[:5] for s in statements] == ["BEGIN", "SELEC"]
    assert (statements[1].line, statements[1].column) == (5, 1)
    assert parsed(sql) == StatementSet((
        Statement("INSERT INTO a SELECT 1", 2, 1),
        Statement("INSERT INTO b SELECT CASE WHEN x THEN 1 END FROM s", 3, 1),
    ))


@pytest.mark.parametrize("sql", [
    "EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT 1; INSERT INTO b SELECT 2; END",
    "EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT 1; INSERT INTO b SELECT 2; END;",
    "BEGIN STATEMENT SET; INSERT INTO a SELECT 1; INSERT INTO b SELECT 2; END;",
])
def test_either_spelling_is_one_statement_and_complete_only_at_its_end(sql: str) -> None:
    """Before the fix the EXECUTE form was split at each ``;``: its second INSERT ran alone."""
    assert len(split_statements(sql.rstrip(";") + "; SELECT 9")) == 2
    assert not is_complete(sql[: sql.index("INSERT INTO b")])  # the interactive prompt goes on
    assert is_complete(sql.rstrip(";") + ";")


def test_end() -> None:
    """FlinkSqlParserExecuteTest.testEnd; a dangling 'END' of testStatementSetStateTransition."""
    error = refused("END;")
    assert "No Statement Set to submit" in error.message and (error.line, error.column) == (1, 1)


def test_statement_set_state_transition_refuses_what_is_not_an_insert() -> None:
    """SessionContextTest.testStatementSetStateTransition: 'SELECT 1' inside a set."""
    error = refused("BEGIN STATEMENT SET;\nINSERT INTO whatever VALUES ('test0');\n  SELECT 1;\nEND;")
    assert error.message == ONLY_INSERT and (error.line, error.column) == (3, 3)
    error = refused("EXECUTE STATEMENT SET BEGIN CREATE TABLE t AS SELECT 1; END")
    assert error.message == ONLY_INSERT and (error.line, error.column) == (1, 29)
    error = refused("BEGIN STATEMENT SET; BEGIN STATEMENT SET; INSERT INTO a SELECT 1; END; END")
    assert error.message == ONLY_INSERT and (error.line, error.column) == (1, 22)


@pytest.mark.parametrize(("sql", "fragment", "where"), [
    ("BEGIN STATEMENT SET;\nEND;", "empty", (2, 1)),
    ("EXECUTE STATEMENT SET BEGIN END", "empty", (1, 29)),
    ("BEGIN STATEMENT SET;\nINSERT INTO a SELECT 1;", "no END", (2, 24)),
    ("BEGIN STATEMENT SET INSERT INTO a SELECT 1; END;", "expected ';' after BEGIN STATEMENT SET", (1, 21)),
    ("EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT 1; END now", "unexpected 'now' after END", (1, 57)),
])
def test_broken_sets_are_refused_at_their_place(sql: str, fragment: str, where: tuple[int, int]) -> None:
    error = refused(sql)
    assert fragment in error.message and (error.line, error.column) == where, error


def test_other_statements_are_not_statement_sets() -> None:
    for sql in ("SELECT 1", "BEGIN SELECT 1; END", "EXECUTE IMMEDIATE 'SELECT 1'", "INSERT INTO a SELECT 1"):
        assert parsed(sql) is None, sql


@pytest.mark.parametrize(("sql", "expected"), [
    ("INSERT INTO t SELECT * FROM s", InsertPlan(TableIdentifier("cur", "t"), False, "SELECT * FROM s")),
    ("insert into table db.t values (1, 'a')",
     InsertPlan(TableIdentifier("db", "t"), False, "values (1, 'a')")),
    ("INSERT OVERWRITE TABLE `db`.`t` WITH q AS (SELECT 1) SELECT * FROM q",
     InsertPlan(TableIdentifier("db", "t"), True, "WITH q AS (SELECT 1) SELECT * FROM q")),
    ("INSERT OVERWRITE spark_catalog.db.t (SELECT 1)",
     InsertPlan(TableIdentifier("db", "t"), True, "(SELECT 1)")),
])
def test_each_insert_names_its_target_and_query(sql: str, expected: InsertPlan) -> None:
    assert plan_insert(sql, "cur") == expected


@pytest.mark.parametrize(("sql", "fragment"), [
    ("INSERT INTO t (a, b) SELECT 1, 2", "column list"),
    ("INSERT INTO t PARTITION (ds = '1') SELECT 1", "PARTITION"),
    ("INSERT INTO other.db.t SELECT 1", "catalog 'other'"),
])
def test_what_a_set_cannot_run_is_refused_before_any_work(sql: str, fragment: str) -> None:
    with pytest.raises(StatementSetError, match=fragment):
        plan_insert(sql, "cur")
