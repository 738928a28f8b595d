"""The pure audit model: parsing and refusals, the common SQL provider's vocabulary, results."""

from __future__ import annotations

import pytest

from airflow_provider_staged.staging.audits import (
    AuditError,
    AuditResult,
    AuditSuite,
    Expectation,
    Mode,
    RowCountChange,
    RowExpectation,
    SchemaUnchanged,
    TableExpectation,
    change_results,
    coerce_audits,
    failure_message,
    row_results,
    schema_results,
    table_results,
    unique,
)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RowExpectation("pos", "amount >= "), "audit 'pos': does not parse at line 1, column 9"),
        (lambda: RowExpectation("two", "a > 1; DROP TABLE t"), "audit 'two': one expression expected, not "
         "several statements at line 1, column 6"),
        (lambda: RowExpectation("arith", "amount + 1"), "audit 'arith': not a boolean expression"),
        (lambda: RowExpectation("case", "CASE WHEN a > 1 THEN 1 ELSE 0 END"), "audit 'case': not a boolean"),
        (lambda: RowExpectation("sub", "a IN (SELECT id FROM t)"), "audit 'sub': a subquery or statement is "
         "not allowed in an expectation at line 1, column 7"),
        (lambda: RowExpectation("agg", "COUNT(*) > 0"), "audit 'agg': an aggregate is not allowed in a row"),
        (lambda: RowExpectation("win", "SUM(a) OVER () > 1"), "audit 'win': a window function"),
        (lambda: TableExpectation("noagg", "a > 1"), "audit 'noagg': a table expectation needs an aggregate"),
        (lambda: TableExpectation("d", "COUNT(*) > 0", mode="drop"),
         "audit 'd': mode 'drop' is for row expectations"),
        (lambda: RowExpectation("m", "a > 1", mode="explode"), "audit 'm': unknown mode 'explode'"),
        (lambda: RowCountChange("c", -1), "audit 'c': min_ratio must be a number >= 0"),
        (lambda: RowExpectation("bad\nname", "a > 1"), "invalid audit name 'bad\\nname'"),
    ],
)
def test_bad_expectations_are_refused_naming_the_audit_and_position(make, message) -> None:
    with pytest.raises(AuditError) as raised:
        make()
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "condition",
    ["amount >= 0", "id IS NOT NULL", "(a > 1) OR NOT b", "status IN ('a', 'b')", "isnotnull(id)",
     "x BETWEEN 1 AND 2", "name LIKE 'a%'", "flag", "exists(tags, t -> t = 'x')",
     "CASE WHEN kind = 'a' THEN amount > 0 ELSE TRUE END", "IF(a > 1, b < 2, FALSE)",
     "coalesce(a > 1, FALSE)", "startswith(s, 'x')", "s RLIKE '^[a-z]+$'"],
)
def test_boolean_row_expressions_are_accepted(condition: str) -> None:
    assert RowExpectation("ok", condition).condition == condition


def test_databricks_mode_names() -> None:
    assert RowExpectation("a", "x > 0", "DROP ROW").mode is Mode.DROP
    assert RowExpectation("a", "x > 0", "fail update").mode is Mode.FAIL


def test_unknown_column_is_refused_with_its_position() -> None:
    suite = AuditSuite((RowExpectation("pos", "amount >= 0 AND cost < 5"), unique("id")))
    suite.check_columns(["ID", "amount", "cost"])  # names are case-insensitive
    with pytest.raises(AuditError, match=r"audit 'pos': unknown column 'cost' .* at line 1, column 17"):
        suite.check_columns(["id", "amount"])


def test_lambda_parameters_are_no_columns() -> None:
    AuditSuite((RowExpectation("t", "exists(tags, t -> t = 'x')"),)).check_columns(["tags"])


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(AuditError, match=r"\['a'\] are given more than once"):
        AuditSuite((RowExpectation("a", "x > 0"), TableExpectation("a", "COUNT(*) > 0")))


def test_round_trip_through_dicts() -> None:
    suite = AuditSuite((RowExpectation("a", "x > 0", "drop"), unique("id"), RowCountChange("c", 0.5, "warn")))
    assert AuditSuite.from_list(suite.to_list()) == suite


def test_column_mapping_translation_follows_the_provider() -> None:
    suite = coerce_audits([{
        "column_mapping": {
            "id": {"null_check": {"equal_to": 0}, "unique_check": {"equal_to": 0},
                   "distinct_check": {"geq_to": 10}},
            "amount": {"min": {"geq_to": 10, "tolerance": 0.1}, "max": {"less_than": 100}},
        },
        "mode": "warn",
    }])
    by_name = {e.name: e for e in suite.expectations}
    assert sorted(by_name) == ["amount.max", "amount.min", "id.distinct_check", "id.null_check",
                               "id.unique_check"]
    null_count = "SUM(CASE WHEN id IS NULL THEN 1 ELSE 0 END)"
    assert by_name["id.null_check"].condition == f"COALESCE({null_count}, 0) = 0"
    assert by_name["id.unique_check"].measure == "COUNT(id) - COUNT(DISTINCT(id))"
    # The tolerance widens the bound outward by abs(bound) * tolerance, as _get_match does.
    assert by_name["amount.min"].condition == "COALESCE(MIN(amount), 0) >= 9.0"
    assert by_name["amount.max"].condition == "COALESCE(MAX(amount), 0) < 100"
    assert all(e.kind == "table" and e.mode is Mode.WARN for e in suite.expectations)


def test_column_mapping_equal_to_with_tolerance_and_accept_none_false() -> None:
    (check,) = coerce_audits([{"column_mapping": {"d": {"max": {"equal_to": -10, "tolerance": 0.5}}},
                              "accept_none": False}]).expectations
    assert check.condition == "MAX(d) BETWEEN -15.0 AND -5.0"


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"id": {"median": {"equal_to": 0}}}, "unknown column check 'median'"),
        ({"id": {"min": {}}}, "give one or more of"),
        ({"id": {"min": {"equal_to": 1, "geq_to": 0}}}, "equal_to cannot be passed"),
        ({"id": {"min": {"greater_than": 1, "geq_to": 0}}}, "one lower and one upper bound"),
        ({"d": {"min": {"geq_to": "2024-01-01", "tolerance": 0.1}}}, "a tolerance needs numeric bounds"),
        ({"id": {"min": {"geq_to": 0, "partition_clause": "COUNT(x) > 1"}}}, "audit 'id.min': an aggregate"),
    ],
)
def test_bad_column_mapping_is_refused(mapping, message) -> None:
    with pytest.raises(AuditError, match=message):
        coerce_audits([{"column_mapping": mapping}])


def test_partition_clauses_filter_what_is_measured() -> None:
    suite = coerce_audits([
        {"column_mapping": {"id": {"unique_check": {"equal_to": 0, "partition_clause": "id > 0"}}},
         "partition_clause": "ds = '2024-01-01'"},
        {"checks": {"rows": {"check_statement": "COUNT(*) > 3"},
                    "sums": {"check_statement": "a < b", "partition_clause": "a IS NOT NULL"}},
         "partition_clause": "ds = '2024-01-01'"},
    ])
    by_name = {e.name: e for e in suite.expectations}
    where = "FILTER(WHERE (ds = '2024-01-01') AND (id > 0))"
    assert by_name["id.unique_check"].measure == f"COUNT(id) {where} - COUNT(DISTINCT (id)) {where}"
    assert by_name["rows"].condition == "COUNT(*) FILTER(WHERE (ds = '2024-01-01')) > 3"
    assert by_name["sums"].kind == "row"
    assert by_name["sums"].condition == (
        "CASE WHEN (ds = '2024-01-01') AND (a IS NOT NULL) THEN (a < b) ELSE TRUE END")


def test_table_checks_split_into_table_and_row_expectations() -> None:
    suite = coerce_audits([{"checks": {"row_count": {"check_statement": "COUNT(*) >= 3"},
                                       "sums": {"check_statement": "a + b < c"}}}])
    kinds = {e.name: e.kind for e in suite.expectations}
    assert kinds == {"row_count": "table", "sums": "row"}
    with pytest.raises(AuditError, match="audit 'bad': does not parse"):
        coerce_audits([{"checks": {"bad": {"check_statement": "COUNT(* > 3"}}}])
    with pytest.raises(AuditError, match="needs 'column_mapping', 'checks' or 'kind'"):
        coerce_audits([{"table": "x"}])
    with pytest.raises(AuditError, match=r"unknown key\(s\) \['table'\]"):
        coerce_audits([{"checks": {}, "table": "x"}])


def test_row_and_table_results() -> None:
    rows = row_results(
        [RowExpectation("f", "x > 0"), RowExpectation("d", "y > 0", "drop"),
         RowExpectation("w", "z > 0", "warn")],
        {"f": 2, "d": 3, "w": 0},
        {"f": [{"x": "-1"}]},
    )
    assert [(r.name, r.passed, r.failing, r.blocks) for r in rows] == [
        ("f", False, 2, True), ("d", True, 3, False), ("w", True, 0, False)]
    assert rows[0].samples == [{"x": "-1"}]
    assert rows[1].line() == "audit d [row, drop]: dropped 3 row(s)"
    tables = table_results([TableExpectation("n", "COUNT(*) > 0"), unique("id", "warn")],
                           {"n": (None, None), "id_unique": (False, 4)})
    assert [(r.passed, r.blocks) for r in tables] == [(False, True), (False, False)]
    assert tables[1].line() == "audit id_unique [table, warn]: failed (warn: published), value 4"


def test_change_results_per_partition() -> None:
    check = RowCountChange("no_shrink", 0.5)
    (whole,) = change_results([check], {"": 40}, {"": 100})
    assert not whole.passed and whole.failing == 1 and "table: 100 -> 40 rows" in whole.detail
    (parts,) = change_results([check], {"ds=1": 60, "ds=3": 1}, {"ds=1": 100, "ds=2": 10, "ds=4": None})
    # ds=2 is gone (0 rows), ds=4 has no recorded count, ds=3 is new.
    assert not parts.passed and parts.failing == 1
    assert "ds=2: 10 -> 0 rows" in parts.detail and "not recorded for ds=4" in parts.detail
    (first,) = change_results([check], {"": 5}, {})
    assert first.passed and first.detail == "no previous version"


def test_schema_results_name_each_added_dropped_and_retyped_column() -> None:
    check = SchemaUnchanged()
    before = [("id", "bigint"), ("Amount", "int"), ("label", "string"), ("ds", "string")]
    (same,) = schema_results([check], before, [("ID", "BIGINT"), ("ds", "string"), ("amount", "int"),
                                               ("label", "string")])
    assert same.passed and same.failing == 0 and same.detail == ""  # case and order aside
    after = [("id", "bigint"), ("amount", "decimal(10,2)"), ("ds", "string"), ("note", "string")]
    (changed,) = schema_results([SchemaUnchanged("cols", "warn")], before, after)
    assert (changed.passed, changed.failing, changed.blocks) == (False, 3, False)
    assert changed.detail == "added note string; dropped label string; amount int -> decimal(10,2)"
    (first,) = schema_results([check], None, before)
    assert first.passed and first.detail == "no previous version"
    assert not schema_results([check], before, before[:1])[0].passed  # fail mode: blocks
    assert coerce_audits([{"kind": "schema", "name": "s"}]).expectations == (SchemaUnchanged("s"),)
    with pytest.raises(AuditError, match="mode 'drop' is for row expectations only"):
        SchemaUnchanged(mode="drop")


def test_failure_message_names_audit_count_and_samples() -> None:
    results = [AuditResult("pos", "row", "fail", False, 2, samples=[{"amount": "-1"}]),
               AuditResult("w", "row", "warn", False, 1)]
    message = failure_message("db.t", "att1", results)
    assert message.startswith("audit(s) failed on db.t: pos (2 failing row(s), e.g. [{'amount': '-1'}]).")
    assert "w (" not in message and "staged publish att1" in message


def test_expectation_objects_pass_through() -> None:
    given = RowExpectation("a", "x > 0")
    suite = coerce_audits([given, {"kind": "table", "name": "n", "condition": "COUNT(*) > 0"}])
    assert suite.expectations == (given, Expectation("n", "table", Mode.FAIL, "COUNT(*) > 0"))


def test_operator_checks_audits_when_the_dag_file_is_parsed() -> None:
    from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator

    operator = StagedCreateTableAsOperator(
        task_id="t", target="db.t", sql="SELECT 1 AS id", outlets=[],  # no connection to name its asset
        audits=[unique("id"), {"checks": {"rows": {"check_statement": "COUNT(*) > 0"}}, "mode": "warn"}],
    )
    assert [item["name"] for item in operator.audits] == ["id_unique", "rows"]
    with pytest.raises(AuditError, match=r"audit 'ids': not a boolean expression .* at line 1, column 1"):
        StagedCreateTableAsOperator(task_id="t", target="db.t", sql="SELECT 1",
                                    audits=[{"checks": {"ids": {"check_statement": "id + 1"}}}])
    with pytest.raises(ValueError, match="audits are for Hive targets"):
        StagedCreateTableAsOperator(task_id="t", target="jdbc://pg/public.t", sql="SELECT 1",
                                    audits=[unique("id")])


def test_sample_rows_are_kept_small() -> None:
    from airflow_provider_staged.staging.audits import SAMPLE_COLUMNS, SAMPLE_VALUE_CHARS, sample_row

    row = {f"c{i}": "x" * 1000 for i in range(50)} | {"c0": None}
    sample = sample_row(row)
    assert len(sample) == SAMPLE_COLUMNS and sample["c0"] is None
    assert all(len(value) == SAMPLE_VALUE_CHARS for value in list(sample.values())[1:])


def test_which_table_expectations_are_counted_during_the_write() -> None:
    observed = [TableExpectation("n", "COUNT(*) > 0"), TableExpectation("m", "COALESCE(MIN(a), 0) >= 0"),
                TableExpectation("s", "SUM(CASE WHEN a IS NULL THEN 1 ELSE 0 END) = 0", measure="AVG(a)")]
    scanned = [unique("id"), TableExpectation("f", "COUNT(*) FILTER (WHERE a > 1) > 0"),
               TableExpectation("r", "COUNT(*) > rand()"), TableExpectation("x", "max_by(a, b) > 1")]
    assert [e.observable for e in observed] == [True] * 3
    assert [e.observable for e in scanned] == [False] * 4
    assert not RowExpectation("row", "a > 0").observable


def test_a_reference_audit_round_trips_and_names_its_key() -> None:
    from airflow_provider_staged.staging.audits import references
    from airflow_provider_staged.staging.identifiers import TableIdentifier

    check = references("customer_id", "crm.customers", "id")
    assert (check.name, check.kind, check.condition) == ("customer_id_references_customers", "reference",
                                                         "customer_id")
    assert check.referenced == (TableIdentifier("crm", "customers"), "id")
    suite = AuditSuite((check,))
    assert AuditSuite.from_list(suite.to_list()) == suite
    (declared,) = coerce_audits([{"kind": "reference", "name": "fk", "condition": "customer_id",
                                  "references": "crm.customers.id", "mode": "warn"}]).expectations
    assert declared.mode.value == "warn"
    with pytest.raises(AuditError, match=r"audit 'pos': unknown column 'customer_id'"):
        AuditSuite((references("customer_id", "crm.customers", "id", name="pos"),)).check_columns(["id"])


@pytest.mark.parametrize(("column", "table", "key", "message"), [
    ("a;b", "crm.customers", "id", r"invalid column 'a;b': a column name of the output"),
    ("customer_id", "crm.customers", "id) OR (1=1", r"invalid reference 'crm.customers.id\) OR \(1=1'"),
    ("customer_id", "crm.cust omers", "id", r"invalid reference 'crm.cust omers.id'"),
    ("customer_id", "", "id", r"invalid reference '.id': expected db.table.column"),
])
def test_a_bad_reference_is_refused_naming_it(column: str, table: str, key: str, message: str) -> None:
    from airflow_provider_staged.staging.audits import references

    with pytest.raises(AuditError, match=message):
        references(column, table, key, name="fk")


def test_a_reference_cannot_drop_rows() -> None:
    from airflow_provider_staged.staging.audits import references

    with pytest.raises(AuditError, match=r"mode 'drop' is for row expectations only"):
        references("customer_id", "crm.customers", "id", mode="drop", name="fk")
