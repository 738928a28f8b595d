import pytest

from airflow_provider_staged.catalogs.postgres_types import postgres_name
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier, validate_name


@pytest.mark.parametrize(
    ("text", "expected"),
    [("orders", "default.orders"), ("Raw.Orders", "raw.orders"), (" a_1.b_2 ", "a_1.b_2")],
)
def test_parse_valid_names(text, expected):
    assert TableIdentifier.parse(text).name == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "a.b.c",
        "a..b",
        ".b",
        "a.",
        "a;drop table x",
        "a`b",
        "a'b",
        'a"b',
        "1abc",
        "a b",
        "ördner",
        "a.b;--",
        None,
        42,
        "x" * 129,
    ],
)
def test_parse_rejects_bad_names_naming_the_value(bad):
    with pytest.raises(InvalidIdentifierError) as info:
        TableIdentifier.parse(bad)
    assert repr(bad)[:40] in str(info.value) or str(bad)[:40] in str(info.value)


@pytest.mark.parametrize("bad", ["p6\n", "p6\t", "p6\x00", "evil\n", "\np6", "p\r6", "p6\x7f", "p6 "])
def test_validate_name_rejects_control_characters_and_whitespace(bad):
    # re.match with '$' used to accept a trailing newline.
    with pytest.raises(InvalidIdentifierError) as info:
        validate_name(bad, "database name")
    assert f"invalid database name {bad!r}" in str(info.value)


@pytest.mark.parametrize("bad", ["p6\n", "p6\t", "p6\x00"])
def test_postgres_name_rejects_control_characters(bad):
    with pytest.raises(InvalidIdentifierError) as info:
        postgres_name(bad, "column name")
    assert f"invalid column name {bad!r}" in str(info.value)


@pytest.mark.parametrize(
    "bad", ["p6\n.alias", "p6.alias\n", "p6\t.alias", "p6.\x00alias", "\tp6.alias", "p6\n", " p6\n "]
)
def test_parse_rejects_control_characters_naming_the_value(bad):
    with pytest.raises(InvalidIdentifierError) as info:
        TableIdentifier.parse(bad)
    message = str(info.value)
    assert repr(bad.strip(" ")) in message
    assert "\n" not in message and "\t" not in message  # the value is shown escaped: one line


def test_parse_strips_only_spaces_to_the_canonical_name():
    assert TableIdentifier.parse(" P6.Alias ") == TableIdentifier("p6", "alias")
    assert TableIdentifier.parse(" P6.Alias ").name == "p6.alias"


def test_quoted_uses_backticks():
    assert TableIdentifier.parse("raw.orders").quoted == "`raw`.`orders`"


def test_validate_name_kind_in_message():
    with pytest.raises(InvalidIdentifierError, match="database name 'a-b'"):
        validate_name("a-b", "database name")


@pytest.mark.parametrize(
    ("text", "member"),
    [
        ("create", StagingPurpose.CREATE_TABLE_AS),
        ("CREATE_TABLE_AS_IF_NOT_EXISTS", StagingPurpose.CREATE_TABLE_AS_IF_NOT_EXISTS),
        ("replace", StagingPurpose.REPLACE_TABLE_AS),
        (" create_or_replace ", StagingPurpose.CREATE_OR_REPLACE_TABLE_AS),
    ],
)
def test_purpose_parse(text, member):
    assert StagingPurpose.parse(text) is member


def test_purpose_parse_unknown_names_value():
    with pytest.raises(ValueError, match="unknown staging purpose 'upsert'"):
        StagingPurpose.parse("upsert")


def test_purpose_flags():
    assert (
        StagingPurpose.CREATE_OR_REPLACE_TABLE_AS.creates
        and StagingPurpose.CREATE_OR_REPLACE_TABLE_AS.replaces
    )
    assert not StagingPurpose.REPLACE_TABLE_AS.creates
    assert not StagingPurpose.CREATE_TABLE_AS.replaces


def test_operator_partition_columns_are_validated_and_lower_cased_when_the_dag_is_parsed(
    staged_default_connection: str,
) -> None:
    from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator

    operator = StagedCreateTableAsOperator(
        task_id="t", target="db.t", sql="SELECT 1", partition_by=["DS", "Hour"]
    )
    assert operator.partition_by == ["ds", "hour"]
    with pytest.raises(InvalidIdentifierError, match=r"invalid partition column 'ds\\n'"):
        StagedCreateTableAsOperator(task_id="t", target="db.t", sql="SELECT 1", partition_by=["ds\n"])
