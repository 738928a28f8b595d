"""``staged`` reports user errors as one ``error:`` line (exit code 1) before reaching any server."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.cli.main import app
from airflow_provider_staged.cli.output import one_line
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier

DEFINITION = """
CREATE MATERIALIZED TABLE analytics.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, count(*) AS n FROM raw.orders GROUP BY ds
"""
# Nothing listens there: a command that got past validation would fail with "cannot authenticate".
UNREACHABLE_AIRFLOW = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def _no_local_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty STAGED_HOME: no local metastore or Airflow, whatever runs on this machine."""
    monkeypatch.setenv("STAGED_HOME", str(tmp_path / "staged-home"))
    for name in ("STAGED_DEBUG", "STAGED_AIRFLOW_ENDPOINT", "STAGED_MT_DEFINITIONS_DIR",
                 "STAGED_METASTORE_URI", "STAGED_AIRFLOW_USERNAME", "STAGED_AIRFLOW_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def definitions(tmp_path: Path) -> Path:
    folder = tmp_path / "definitions"
    folder.mkdir()
    (folder / "analytics__orders_daily.sql").write_text(DEFINITION)
    return folder


def fails_with(args: list[str], *expected: str) -> str:
    """Run ``staged args``; assert exit code 1 and one ``error:`` line holding ``expected``."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, (result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for text in expected:
        assert text in lines[0]
    return lines[0]


@pytest.mark.parametrize("name", ["evil\n", "p6\t", "p6\x00", "a;b"])
def test_create_database_names_the_bad_value(name: str) -> None:
    fails_with(["create-database", "ok", name], f"invalid database name {name!r}")


@pytest.mark.parametrize("name", ["p6\n.alias", "p6.alias\n", "a.b.c", "x;drop"])
def test_show_names_the_bad_table(name: str) -> None:
    fails_with(["show", name], f"invalid table name {name!r}")


def test_bad_conn_names_the_connection() -> None:
    fails_with(["show", "db.t", "--conn", "no_such_conn"],
               "no Airflow connection 'no_such_conn' (conn type staged_hive)")


def test_a_missing_conn_never_falls_back_to_the_local_metastore(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the default id means the local metastore; a typo would build into the wrong catalog."""
    from airflow_provider_staged.airflow.hooks import staged_table

    monkeypatch.delenv("AIRFLOW_CONN_STAGED_DEFAULT", raising=False)
    local = SimpleNamespace(host="127.0.0.1", port=9, warehouse="file:/nowhere/warehouse")
    monkeypatch.setattr(staged_table, "metastore_status", lambda: local)
    with pytest.raises(RuntimeError, match=r"^no Airflow connection 'other' \(conn type staged_hive\)"):
        staged_table.StagedTableHook("other").get_settings()
    fails_with(["show", "db.t", "--conn", "other"], "no Airflow connection 'other'")
    assert staged_table.StagedTableHook().get_settings().metastore_uri == "thrift://127.0.0.1:9"


def test_mt_without_configuration_names_the_flags_and_env_vars() -> None:
    line = fails_with(["mt", "list"], "--endpoint", "STAGED_AIRFLOW_ENDPOINT", "--definitions-dir",
                      "STAGED_MT_DEFINITIONS_DIR")
    assert "workflow-scheduler." not in line


def mt_refresh(definitions: Path, *args: str) -> list[str]:
    return ["mt", "--endpoint", UNREACHABLE_AIRFLOW, "--definitions-dir", str(definitions),
            "refresh", *args]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--partition", "ds=2024-13-01"], "invalid value '2024-13-01' for partition column 'ds'"),
        (["--partition", "ds=x'; drop"], "invalid value \"x'; drop\" for partition column 'ds'"),
        (["--partition", "dt=2024-01-01"], "unknown partition column 'dt'"),
        (["--schedule-time", "0001-01-01 00:00:00"], "scheduleTime '0001-01-01 00:00:00' is out of range"),
        (["--schedule-time", "2024-01-02"], "invalid scheduleTime '2024-01-02'"),
        (["--schedule-time", "\uff12\uff10\uff12\uff14-01-01 00:00:00"],  # fullwidth digits
         "invalid scheduleTime '\uff12\uff10\uff12\uff14-01-01 00:00:00'"),
    ],
)
def test_mt_refresh_refuses_a_bad_request_before_contacting_airflow(
    definitions: Path, args: list[str], expected: str
) -> None:
    fails_with(mt_refresh(definitions, "analytics.orders_daily", *args),
               "refresh of analytics.orders_daily not triggered", expected)


@pytest.mark.parametrize(
    ("flag", "key"),
    [
        ("--execution-config", "spark.sql.extensions"),
        ("--execution-config", "spark.sql.sources.commitProtocolClass"),
        ("--execution-config", "spark.executor.memory"),
        ("--dynamic-option", "path"),
    ],
)
def test_mt_options_outside_the_allowlist_are_refused(definitions: Path, flag: str, key: str) -> None:
    fails_with(mt_refresh(definitions, "analytics.orders_daily", flag, f"{key}=x"),
               f"{flag}: ", f"key {key!r} is not allowed", "allowed keys: ")


@pytest.mark.parametrize("command", ["resume", "refresh", "create"])
@pytest.mark.parametrize(
    ("flag", "pair", "expected"),
    [
        ("--execution-config", "spark.sql.shuffle.partitions=abc",
         "invalid value 'abc' for executionConfig key 'spark.sql.shuffle.partitions': expected a whole "),
        ("--execution-config", "spark.sql.adaptive.enabled=yes", "expected true or false"),
        ("--dynamic-option", "compression=zip", "invalid value 'zip' for dynamicOptions key 'compression'"),
    ],
)
def test_mt_option_values_spark_would_refuse_are_refused_before_airflow(
    definitions: Path, command: str, flag: str, pair: str, expected: str
) -> None:
    """Not stored as a default (resume, create) that would fail every later refresh."""
    table = "analytics.orders_daily"
    if command == "create":
        table = str(definitions / "analytics__orders_daily.sql")
    args = ["mt", "--endpoint", UNREACHABLE_AIRFLOW, "--definitions-dir", str(definitions), command, table]
    fails_with([*args, flag, pair], f"{flag}: ", expected)


def test_mt_bad_table_name(definitions: Path) -> None:
    fails_with(mt_refresh(definitions, "analytics.orders\n"), "invalid table name 'analytics.orders\\n'")


def test_a_good_request_gets_as_far_as_airflow(definitions: Path) -> None:
    fails_with(mt_refresh(definitions, "analytics.orders_daily", "--partition", "ds=2024-01-01"),
               f"cannot authenticate to Airflow at {UNREACHABLE_AIRFLOW}")


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        (["ds"], "expected KEY=VALUE"),
        (["ds=2024-01-01", "DS=2024-01-02"], "--partition 'ds' given twice"),
        (["ds="], "--partition ds= has no value"),
    ],
)
def test_usage_errors_keep_exit_code_2(definitions: Path, partitions: list[str], expected: str) -> None:
    flags = [arg for value in partitions for arg in ("--partition", value)]
    result = CliRunner().invoke(app, mt_refresh(definitions, "analytics.orders_daily", *flags))
    assert result.exit_code == 2
    assert expected in " ".join(result.stderr.split())


def test_a_partition_column_in_upper_case_is_the_column(definitions: Path) -> None:
    fails_with(mt_refresh(definitions, "analytics.orders_daily", "--partition", "DS=2024-01-01"),
               f"cannot authenticate to Airflow at {UNREACHABLE_AIRFLOW}")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["show", "db.t", "--limit", "99999999999999999999999"],
         "'--limit': Input should be less than or equal to 2147483647, not '99999999999999999999999'"),
        (["show", "db.t", "--limit", "1e23"], "'--limit': Input should be a valid integer"),
        (["show", "db.t", "--limit", "-1"], "greater than or equal to 0, not '-1'"),
        (["up", "--port", "99999999999999999999"], "'--port': Input should be less than or equal to 65535"),
    ],
)
def test_huge_numbers_are_refused_by_name_before_any_server(args: list[str], expected: str) -> None:
    """Not an OverflowError from pyarrow or the socket once the metastore was read or bound."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)  # a usage error, in one line
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: Invalid value for ") and expected in line, line
    assert args[-1] in line and "Traceback" not in result.output


def test_read_table_refuses_a_limit_beyond_a_java_int() -> None:
    from airflow_provider_staged.catalogs.metastore.reader import read_table
    from airflow_provider_staged.staging.identifiers import JAVA_INT_MAX

    for limit in (JAVA_INT_MAX + 1, 10**23, -1):
        with pytest.raises(ValueError, match=f"invalid limit {limit}: expected a whole number"):
            read_table("thrift://127.0.0.1:9", TableIdentifier("db", "t"), limit)  # before connecting


@pytest.mark.parametrize(("args", "env"), [(["--debug"], {}), ([], {"STAGED_DEBUG": "1"})])
def test_debug_raises_the_error(args: list[str], env: dict[str, str]) -> None:
    result = CliRunner().invoke(app, [*args, "show", "a;b"], env=env)
    assert isinstance(result.exception, InvalidIdentifierError)
    assert "error: " not in result.output


def test_one_line_joins_a_multi_line_message() -> None:
    assert one_line("cannot parse:\n  line 1\n\n  line 2 ") == "cannot parse: line 1 line 2"


@pytest.mark.parametrize("uri", ["thrift://127.0.0.1:abc", "thrift://127.0.0.1:\u00b9", "thrift://127.0.0.1:99999",
                                 "thrift://127.0.0.1:0", "thrift://127.0.0.1:"])
def test_sql_client_names_a_metastore_uri_with_a_bad_port(uri: str) -> None:
    """Not a catalog without a port (letters) nor a traceback (a superscript digit)."""
    result = CliRunner().invoke(app, ["sql", "-e", "SELECT 1"], env={"STAGED_METASTORE_URI": uri})
    assert result.exit_code == 1, (result.output, result.exception)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: invalid metastore URI {uri!r}: expected thrift://host:port"), line


def test_catalog_settings_keeps_the_metastore_uri() -> None:
    from airflow_provider_staged.cli.sql import catalog_settings

    assert catalog_settings("thrift://127.0.0.1:9083", None).metastore_uri == "thrift://127.0.0.1:9083"
    assert catalog_settings("thrift://[::1]:9083", None).metastore_uri == "thrift://[::1]:9083"


@pytest.mark.parametrize("command", [["run-dag", "example_staged_ctas"], ["mt", "refresh", "db.t"]])
@pytest.mark.parametrize(("value", "expected"), [
    ("nan", "less than or equal to 604800"), ("inf", "less than or equal to 604800"),
    ("1e300", "less than or equal to 604800"), ("-inf", "greater than or equal to"),
    ("-1", "greater than or equal to"),
])
def test_wait_is_finite_and_bounded(command: list[str], value: str, expected: str) -> None:
    """--wait inf waited forever; nan or a negative made `mt refresh` return at once, unsaid."""
    result = CliRunner().invoke(app, [*command, "--wait", value])
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: Invalid value for '--wait': ") and expected in line, line
    assert line.endswith(f", not {value!r} (see `root {' '.join(command[:-1])} --help`)"), line


@pytest.mark.parametrize(("count", "expected"), [
    ("1", "invalid shard count 1: between 2 and 256"),
    ("300", "invalid shard count 300: between 2 and 256"),
])
def test_mt_shards_refuses_a_bad_count_and_writes_nothing(tmp_path: Path, count: str, expected: str) -> None:
    fails_with(["mt", "shards", count, "--dags-folder", str(tmp_path)], expected)
    assert not list(tmp_path.glob("*.py"))


def test_mt_shards_beside_the_one_file_factory_names_it(tmp_path: Path) -> None:
    (tmp_path / "materialized_tables.py").write_text("# the one-file factory")
    fails_with(["mt", "shards", "4", "--dags-folder", str(tmp_path)],
               f"{tmp_path / 'materialized_tables.py'} builds every table: remove it first")
    assert [path.name for path in tmp_path.iterdir()] == ["materialized_tables.py"]
