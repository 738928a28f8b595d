"""The refresh call of FLIP-448 as DAG-run params: their schemas and their validation.

A DAG run's conf carries ``{isPeriodic, scheduleTime, staticPartitions, dynamicOptions,
executionConfig}``. This module is pure (no Airflow import): ``dag_params`` turns the schemas
into Airflow ``Param`` objects for the Trigger form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from types import MappingProxyType
from typing import Any

from airflow_provider_staged.materialized.continuous import one_time_refresh_refused
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.freshness import RefreshMode
from airflow_provider_staged.materialized.option_values import (
    EXECUTION_CONFIG_CHECKS,
    WRITER_OPTION_CHECKS,
    ZONE_ID_PATTERN,
    Check,
)
from airflow_provider_staged.materialized.partitions import (
    SCHEDULE_TIME_PATTERN,
    PartitionError,
    format_schedule_time,
    formatter_example,
    local_schedule_time,
    parse_schedule_time,
    partition_value_schema,
    periodic_partition,
    validate_static_partitions,
)
from airflow_provider_staged.staging.date_patterns import JAVA_TOKENS

IS_PERIODIC = "isPeriodic"
SCHEDULE_TIME = "scheduleTime"
STATIC_PARTITIONS = "staticPartitions"
DYNAMIC_OPTIONS = "dynamicOptions"
EXECUTION_CONFIG = "executionConfig"
# Not FLIP-448's: a one-time refresh whose commit the tables downstream follow (.propagation).
REFRESH_DOWNSTREAM = "refreshDownstream"
PARAM_NAMES = (IS_PERIODIC, SCHEDULE_TIME, STATIC_PARTITIONS, DYNAMIC_OPTIONS, EXECUTION_CONFIG,
               REFRESH_DOWNSTREAM)

# Parquet writer options a refresh may set through dynamicOptions.
WRITER_OPTIONS = frozenset(WRITER_OPTION_CHECKS)
# Spark SQL settings a refresh may set through executionConfig: runtime settings (Spark 4's
# ``spark.conf.isModifiable``) that tune how the one query runs, or how it reads times and
# handles errors. Left out on purpose: catalog, extension and commit-protocol settings (the
# staged commit decides where and how data lands), spark.sql.caseSensitive (columns that differ
# only by case collide in the metastore) and settings that change the bytes other readers see
# (datetime rebase modes, timestamp types). The keys and the checks of their values:
# :mod:`.option_values`.
EXECUTION_CONFIG_KEYS = frozenset(EXECUTION_CONFIG_CHECKS)
TIME_ZONE_KEY = "spark.sql.session.timeZone"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The look-ahead: Python's '$' (jsonschema) also matches before a final newline. [0-9], not \d:
# Python's \d (jsonschema) also matches fullwidth and other non-ASCII digits.
_SCHEDULE_TIME_REGEX = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$(?!\n)"


class RefreshRequestError(ValueError):
    """A refresh request (DAG-run conf) that cannot be run; nothing has been changed."""


@dataclass(frozen=True)
class RefreshRequest:
    """A validated refresh call.

    ``partition_spec`` is the partition the refresh replaces: column -> value, possibly covering
    only some partition columns; empty means the whole table.
    """

    is_periodic: bool
    schedule_time: datetime  # wall-clock time in the scheduling time zone, naive
    partition_spec: Mapping[str, str] = field(default_factory=dict, hash=False)
    dynamic_options: Mapping[str, str] = field(default_factory=dict, hash=False)
    execution_config: Mapping[str, str] = field(default_factory=dict, hash=False)
    # A one-time refresh that the tables downstream follow (a periodic one always is).
    refresh_downstream: bool = False

    @property
    def schedule_time_text(self) -> str:
        return format_schedule_time(self.schedule_time)


# The Trigger form's section for the FLIP-448 JSON objects; Airflow shows a section other than
# its default one collapsed, so the partition fields above are what a user meets first.
ADVANCED_SECTION = "Advanced: the FLIP-448 refresh call as JSON"
_AUTOMATIC = None


def param_schemas(definition: MaterializedTableDefinition) -> dict[str, dict[str, Any]]:
    """JSON Schema (with ``default``, ``title`` and ``description``) of each refresh param.

    In the order of the Trigger form: one plain string per partition column (pattern from its
    date-formatter), the refresh kind, scheduleTime, then the FLIP-448 objects. Airflow checks
    these schemas when a run is triggered (form, REST API), so a bad partition value is refused
    before any run exists. Object params allow null: Airflow's form marks any param whose type
    excludes null as required. The executionConfig allowlist is left to
    ``parse_refresh_request``: Airflow checks every schema against the JSON Schema meta-schema
    for every DAG it parses, and a 26-key enum would cost that on every parse.
    """
    formatters = definition.partition_formatters
    columns = list(definition.partition_by)
    schemas: dict[str, dict[str, Any]] = {}
    for column in columns:
        example = formatter_example(column, formatters)
        shape = (
            f"a value such as {example!r} (date-formatter {_java(formatters[column])})"
            if example is not None
            else "its value as the data has it (quotes and newlines included)"
        )
        schemas[column] = {
            "default": None,
            **partition_value_schema(column, formatters),
            "type": ["null", "string"],
            "title": f"Partition {column}",
            "description": (
                f"Refresh partition {column} = {shape}, now, once. Empty: "
                + ("the other partition fields decide; all empty: " if len(columns) > 1 else "")
                + "the partition of the schedule time, as a scheduled run does."
            ),
        }
    partitions_text = (
        f"the partitions ({', '.join(columns)}) given above or in staticPartitions"
        if columns else "the whole table (it is not partitioned)"
    )
    schemas[IS_PERIODIC] = {
        "default": _AUTOMATIC,
        # The enum is what Airflow checks; 'string' comes first only so that the form draws the
        # enum as a select (it picks the widget by the first non-null type: a boolean would be
        # a switch, which cannot show "automatic").
        "type": ["null", "string", "boolean"],
        "enum": [_AUTOMATIC, True, False],
        "values_display": {
            "null": "Automatic: one-time when partitions are given, else periodic",
            "true": "Periodic: the partition of the schedule time",
            "false": "One-time: the partitions given (none: the whole table)",
        },
        "title": "Periodic or one-time (isPeriodic)",
        "description": (
            f"Periodic refreshes the partition the schedule time is responsible for (schedule "
            f"time minus the freshness, {definition.freshness}), as a scheduled run does. "
            f"One-time refreshes {partitions_text}. Automatic (empty): one-time when partition "
            "values are given, else periodic."
        ),
    }
    schemas[SCHEDULE_TIME] = {
        "default": None,
        "type": ["null", "string"],
        "pattern": _SCHEDULE_TIME_REGEX,
        "title": "Schedule time (scheduleTime)",
        "description": (
            f"Optional, {SCHEDULE_TIME_PATTERN!r} without time zone, e.g. '2024-01-02 00:00:00': "
            "the periodic partition is the one this time is responsible for. Empty: the run's "
            "logical date (the time of the click)."
        ),
    }
    schemas[STATIC_PARTITIONS] = {
        **_optional_object(
            "Static partitions (staticPartitions)",
            f"The partitions of a one-time refresh as JSON, e.g. {_example_object(definition)}; "
            "the partition fields above do the same without JSON."
            if columns
            else "The table is not partitioned: leave empty (a refresh replaces the whole table).",
        ),
        "properties": {column: partition_value_schema(column, formatters) for column in columns},
        "additionalProperties": False,
    }
    schemas[DYNAMIC_OPTIONS] = _optional_object(
        "Dynamic options (dynamicOptions)",
        "Options for the table's writer, e.g. {\"compression\": \"zstd\"}; allowed keys: "
        f"{', '.join(sorted(WRITER_OPTIONS))}.",
    )
    schemas[EXECUTION_CONFIG] = {
        **_optional_object(
            "Execution config (executionConfig)",
            "Spark SQL settings for this refresh, e.g. {\"spark.sql.shuffle.partitions\": 8}; "
            f"allowed keys: {', '.join(sorted(EXECUTION_CONFIG_KEYS))}.",
        ),
        # The one free-text value that reaches Spark's session as is: refused by its shape here.
        "properties": {TIME_ZONE_KEY: {"type": "string", "pattern": ZONE_ID_PATTERN}},
    }
    schemas[REFRESH_DOWNSTREAM] = {
        "default": False,
        "type": ["null", "boolean"],
        "title": "Refresh downstream too (refreshDownstream)",
        "section": ADVANCED_SECTION,
        "description": (
            "A one-time refresh whose commit the FRESHNESS = DOWNSTREAM tables reading this one "
            "follow (each refreshes the same partition, then its own dependents). A periodic "
            "refresh always does."
        ),
    }
    return schemas


def _optional_object(title: str, description: str) -> dict[str, Any]:
    """A FLIP-448 object param: ``{}`` by default, in the folded section of the form."""
    return {"default": {}, "type": ["null", "object"], "title": title, "section": ADVANCED_SECTION,
            "description": description}


def _java(strftime_pattern: str) -> str:
    """``%Y-%m-%d`` back as ``yyyy-MM-dd``, the way the definition wrote it."""
    for java, directive in JAVA_TOKENS.items():
        strftime_pattern = strftime_pattern.replace(directive, java)
    return strftime_pattern


def _example_object(definition: MaterializedTableDefinition) -> str:
    column = definition.partition_by[0]
    example = formatter_example(column, definition.partition_formatters) or "value"
    return f'{{"{column}": "{example}"}}'


def parse_refresh_request(
    conf: Mapping[str, Any] | None,
    definition: MaterializedTableDefinition,
    run_time: datetime,
    zone: str | tzinfo = "UTC",
) -> RefreshRequest:
    """Validate a refresh call and work out the partition it refreshes.

    ``conf`` is the run's params (or conf): the FLIP-448 keys plus, from the Trigger form, one
    key per partition column. ``run_time`` is when the scheduler fired the run (its logical
    date), used as scheduleTime when none is given; ``zone`` is the zone in which scheduleTime
    is wall-clock time. isPeriodic null (automatic) means one-time when partition values are
    given, else periodic.
    """
    conf = {} if conf is None else conf
    if not isinstance(conf, Mapping):
        raise RefreshRequestError(f"invalid refresh request {conf!r}: expected an object")
    known = (*PARAM_NAMES, *definition.partition_by)
    unknown = sorted(str(key) for key in conf if key not in known)
    if unknown:
        raise RefreshRequestError(
            f"unknown refresh parameter(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(known)}"
        )
    is_periodic = conf.get(IS_PERIODIC, _AUTOMATIC)
    if is_periodic is not _AUTOMATIC and not isinstance(is_periodic, bool):
        raise RefreshRequestError(
            f"invalid {IS_PERIODIC} {is_periodic!r}: expected true, false or null (automatic)"
        )
    refresh_downstream = conf.get(REFRESH_DOWNSTREAM)
    if refresh_downstream is not None and not isinstance(refresh_downstream, bool):
        raise RefreshRequestError(
            f"invalid {REFRESH_DOWNSTREAM} {refresh_downstream!r}: expected true or false"
        )
    try:
        raw_time = conf.get(SCHEDULE_TIME)
        if raw_time in (None, ""):
            schedule_time = local_schedule_time(run_time, zone)
        else:
            schedule_time = parse_schedule_time(raw_time)
        static = validate_static_partitions(
            _object(conf, STATIC_PARTITIONS),
            definition.partition_by,
            definition.partition_formatters,
        )
        fields = validate_static_partitions(
            {column: conf[column] for column in definition.partition_by
             if conf.get(column) not in (None, "")},
            definition.partition_by,
            definition.partition_formatters,
        )
    except PartitionError as err:
        raise RefreshRequestError(str(err)) from None
    for column, value in fields.items():
        if static.get(column, value) != value:
            raise RefreshRequestError(
                f"partition {column} is {value!r} in its field but {static[column]!r} in "
                f"{STATIC_PARTITIONS}: give it once"
            )
    partitions = {**static, **fields}
    if is_periodic is _AUTOMATIC:
        is_periodic = not partitions
    if is_periodic and partitions:
        given = ", ".join(f"{column}={value}" for column, value in partitions.items())
        raise RefreshRequestError(
            f"partitions ({given}) only apply to a one-time refresh: set {IS_PERIODIC} to false "
            "or leave it empty (automatic)"
        )
    if is_periodic:
        spec = periodic_partition(
            schedule_time, definition.freshness, definition.partition_formatters, zone,
            definition.schedule,
        )
    else:
        spec = partitions
    return RefreshRequest(
        is_periodic=is_periodic,
        schedule_time=schedule_time,
        partition_spec=MappingProxyType(spec),
        dynamic_options=MappingProxyType(writer_options(_object(conf, DYNAMIC_OPTIONS))),
        execution_config=MappingProxyType(execution_conf(_object(conf, EXECUTION_CONFIG))),
        refresh_downstream=bool(refresh_downstream),
    )


def writer_options(dynamic_options: Mapping[str, Any]) -> dict[str, str]:
    """``dynamicOptions`` as the writer's options; a key outside ``WRITER_OPTIONS`` raises."""
    return _options(dynamic_options, DYNAMIC_OPTIONS, WRITER_OPTION_CHECKS)


def execution_conf(execution_config: Mapping[str, Any]) -> dict[str, str]:
    """``executionConfig`` as Spark SQL conf; a key outside ``EXECUTION_CONFIG_KEYS`` raises."""
    return _options(execution_config, EXECUTION_CONFIG, EXECUTION_CONFIG_CHECKS)


def _object(conf: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = conf.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RefreshRequestError(f"invalid {name} {value!r}: expected an object")
    return value


def _options(options: Mapping[str, Any], name: str, allowed: Mapping[str, Check | None]) -> dict[str, str]:
    """Flat key -> string map; values reach Spark as strings (booleans as true/false), checked as
    Spark reads them where their type is plain (:mod:`.option_values`)."""
    checked = {}
    for key, value in options.items():
        if key not in allowed:
            raise RefreshRequestError(
                f"{name} key {key!r} is not allowed; allowed keys: {', '.join(sorted(allowed))}"
            )
        if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
            # A JSON conf's integer past a float (math.isfinite overflows) or Python's int-to-text
            # limit (repr fails): named by its length, as no option takes more than a Java long.
            raise RefreshRequestError(
                f"invalid value for {name} key {key!r}: a whole number of {_digit_count(value)} digits, "
                "beyond a Java long (at most 19 digits)"
            )
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str) or (isinstance(value, (int, float)) and math.isfinite(value)):
            text = str(value)
        else:
            raise RefreshRequestError(
                f"invalid value {value!r} for {name} key {key!r}: expected a string, number "
                "or boolean"
            )
        if not text.strip() or _CONTROL.search(text):
            raise RefreshRequestError(
                f"invalid value {value!r} for {name} key {key!r}: expected a non-empty string "
                "without control characters"
            )
        expected = allowed[key](text) if allowed[key] else None
        if expected:
            raise RefreshRequestError(f"invalid value {value!r} for {name} key {key!r}: expected {expected}")
        checked[key] = text
    return checked


def _digit_count(number: int) -> int:
    """How many decimal digits ``number`` has, without ``str`` (refused past 4300 digits)."""
    number = abs(number)
    digits = max(1, int((number.bit_length() - 1) * 0.30102999566398120))  # log10(2)
    while 10**digits <= number:
        digits += 1
    while digits > 1 and 10 ** (digits - 1) > number:
        digits -= 1
    return digits


def check_refresh_call(
    conf: Mapping[str, Any] | None, definition: MaterializedTableDefinition, now: datetime
) -> RefreshRequest:
    """What a refresh call must pass before any run exists, wherever it enters (``staged mt
    refresh``, the SQL client, the page, the Trigger form): the refresh task's own parse, and a
    CONTINUOUS table's limits on a one-time refresh. ``now`` only fills in a missing scheduleTime."""
    request = parse_refresh_request(conf, definition, now)
    if definition.refresh_mode is RefreshMode.CONTINUOUS and not request.is_periodic:
        why = one_time_refresh_refused(definition.identifier, definition.query, request.partition_spec)
        if why:
            raise RefreshRequestError(why)
    return request
