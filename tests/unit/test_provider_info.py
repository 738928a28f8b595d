"""The provider metadata Airflow reads: valid as Airflow's schema says, and complete.

Airflow 3.2+ builds the connection form from ``conn-fields`` and ``ui-field-behaviour`` without
importing the hook; every ``[staged]`` option the code reads must be declared with its default.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import airflow
import jsonschema

from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.get_provider_info import get_provider_info
from airflow_provider_staged.staging.settings import DEFAULT_ATTEMPT_TTL_SECONDS, KNOWN_EXTRAS
from airflow_provider_staged.staging.versions import RetentionPolicy

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_staged"
CONF_READERS = {"get", "getboolean", "getint", "getfloat", "getlist", "getjson"}


def provider_schema() -> dict:
    return json.loads((Path(airflow.__file__).parent / "provider.yaml.schema.json").read_text())


def staged_connection_type() -> dict:
    (found,) = get_provider_info()["connection-types"]
    return found


def test_provider_info_is_valid_for_airflow() -> None:
    schema = provider_schema()
    # The provider.yaml schema also asks for fields that only Airflow's own release tooling reads.
    schema["required"] = ["package-name", "name", "description", "versions"]
    jsonschema.validate(get_provider_info(), schema)
    option_schema = schema["definitions"]["option"]
    for name, option in get_provider_info()["config"]["staged"]["options"].items():
        jsonschema.validate(option, option_schema)  # the $ref above is not followed for every key
        assert set(option) <= set(option_schema["properties"]), name


def test_the_form_has_a_typed_field_for_every_extra() -> None:
    conn = staged_connection_type()
    assert conn["connection-type"] == StagedTableHook.conn_type
    assert conn["hook-name"] == StagedTableHook.hook_name
    types = {name: field["schema"]["type"] for name, field in conn["conn-fields"].items()}
    assert set(types) == KNOWN_EXTRAS
    # null: a field left blank (the hook's default).
    assert types == {
        "warehouse": ["string", "null"],
        "journal": ["string", "null"],
        "journal_schema": ["string", "null"],
        "journal_dir": ["string", "null"],
        "atomic": ["boolean", "null"],
        "keep_versions": ["integer", "null"],
        "max_version_age_hours": ["number", "null"],
        "version_grace_minutes": ["number", "null"],
        "attempt_ttl_minutes": ["number", "null"],
        "quarantine_hours": ["number", "null"],
        "spark_conf": ["object", "null"],
        "aws_conn_id": ["string", "null"],
    }
    assert {"host", "port"} <= set(conn["ui-field-behaviour"]["relabeling"])
    # Nothing the hook reads is hidden; nothing it ignores is shown.
    assert set(conn["ui-field-behaviour"]["hidden-fields"]) == {"schema", "login", "password"}


def test_form_descriptions_name_the_code_defaults() -> None:
    fields = staged_connection_type()["conn-fields"]
    defaults = RetentionPolicy()
    assert f"default {defaults.keep_versions}." in fields["keep_versions"]["description"]
    assert f"default {defaults.max_age_seconds / 3600:.0f} " in fields["max_version_age_hours"]["description"]
    assert f"default {defaults.grace_seconds / 60:.0f}." in fields["version_grace_minutes"]["description"]
    assert f"default {DEFAULT_ATTEMPT_TTL_SECONDS / 60:.0f}." in fields["attempt_ttl_minutes"]["description"]
    assert f"default {defaults.quarantine_seconds / 3600:.0f} " in fields["quarantine_hours"]["description"]
    assert fields["atomic"]["schema"]["default"] is True


def staged_options_read() -> dict[str, str | None]:
    """``[staged]`` options the code reads with ``conf.get*("staged", name, fallback=...)``:
    name -> the fallback as written (None: none)."""
    found: dict[str, str | None] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            args = node.args
            if node.func.attr not in CONF_READERS or len(args) < 2:
                continue
            if not (isinstance(args[0], ast.Constant) and args[0].value == "staged"):
                continue
            assert isinstance(args[1], ast.Constant), f"{path}: a [staged] option read by a computed name"
            fallback = next((k.value for k in node.keywords if k.arg == "fallback"), None)
            found[args[1].value] = None if fallback is None else str(ast.literal_eval(fallback))
    return found


def test_every_staged_option_read_is_declared_with_its_default() -> None:
    read = staged_options_read()
    assert {"atomicity_enabled", "refresh_engine", "spark_connect_conn_id"} <= set(read)
    declared = get_provider_info()["config"]["staged"]["options"]
    assert set(read) == set(declared)
    for name, fallback in read.items():
        assert fallback is not None, f"[staged] {name} is read without a fallback"
        # "None" falls back to unset: declared as the empty default.
        assert declared[name]["default"] == ("" if fallback == "None" else fallback), name
