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

from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.partitions import (
    SCHEDULE_TIME_PATTERN,
    PartitionError,
    format_schedule_time,
    local_schedule_time,
    parse_schedule_time,
    periodic_partition,
    validate_static_partitions,
)

IS_PERIODIC = "isPeriodic"
SCHEDULE_TIME = "scheduleTime"
STATIC_PARTITIONS = "staticPartitions"
DYNAMIC_OPTIONS = "dynamicOptions"
EXECUTION_CONFIG = "executionConfig"
PARAM_NAMES = (IS_PERIODIC, SCHEDULE_TIME, STATIC_PARTITIONS, DYNAMIC_OPTIONS, EXECUTION_CONFIG)

# Parquet writer options a refresh may set through dynamicOptions.
WRITER_OPTIONS = frozenset({
    "compression",
    "maxRecordsPerFile",
    "parquet.block.size",
    "parquet.page.size",
    "parquet.enable.dictionary",
})
# Spark SQL settings a refresh may set through executionConfig: runtime settings (Spark 4's
# ``spark.conf.isModifiable``) that tune how the one query runs, or how it reads times and
# handles errors. Left out on purpose: catalog, extension and commit-protocol settings (the
# staged commit decides where and how data lands), spark.sql.caseSensitive (columns that differ
# only by case collide in the metastore) and settings that change the bytes other readers see
# (datetime rebase modes, timestamp types).
EXECUTION_CONFIG_KEYS = frozenset({
    "spark.sql.adaptive.advisoryPartitionSizeInBytes",
    "spark.sql.adaptive.autoBroadcastJoinThreshold",
    "spark.sql.adaptive.coalescePartitions.enabled",
    "spark.sql.adaptive.coalescePartitions.minPartitionSize",
    "spark.sql.adaptive.enabled",
    "spark.sql.adaptive.localShuffleReader.enabled",
    "spark.sql.adaptive.skewJoin.enabled",
    "spark.sql.adaptive.skewJoin.skewedPartitionFactor",
    "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes",
    "spark.sql.ansi.enabled",
    "spark.sql.autoBroadcastJoinThreshold",
    "spark.sql.broadcastTimeout",
    "spark.sql.cbo.enabled",
    "spark.sql.cbo.joinReorder.enabled",
    "spark.sql.codegen.wholeStage",
    "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.maxRecordsPerFile",
    "spark.sql.files.minPartitionNum",
    "spark.sql.files.openCostInBytes",
    "spark.sql.join.preferSortMergeJoin",
    "spark.sql.legacy.timeParserPolicy",
    "spark.sql.optimizer.excludedRules",
    "spark.sql.parquet.compression.codec",
    "spark.sql.parquet.filterPushdown",
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
})
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SCHEDULE_TIME_REGEX = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$"


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

    @property
    def schedule_time_text(self) -> str:
        return format_schedule_time(self.schedule_time)


def param_schemas(definition: MaterializedTableDefinition) -> dict[str, dict[str, Any]]:
    """JSON Schema (with ``default``, ``title`` and ``description``) of each refresh param.

    The object params are only typed: Airflow checks every schema against the JSON Schema
    meta-schema for every DAG it parses, and key/value sub-schemas doubled that cost (about
    4 ms per DAG). Their contents are checked by ``parse_refresh_request`` before anything runs.
    """
    columns = list(definition.partition_by)
    formats = ", ".join(
        f"{column} like {datetime(2024, 1, 1).strftime(pattern)!r}"
        for column, pattern in definition.partition_formatters.items()
    )
    partitions_text = (
        f"Partition columns: {', '.join(columns)}"
        + (f" ({formats})" if formats else "")
        + ". Only used when isPeriodic is off; empty refreshes the whole table."
        if columns
        else "The table is not partitioned: leave empty (a refresh replaces the whole table)."
    )
    return {
        IS_PERIODIC: {
            "default": True,
            "type": "boolean",
            "title": "Periodic refresh",
            "description": (
                "On: refresh the partition this schedule time is responsible for (scheduleTime "
                f"minus the freshness, {definition.freshness}). Off: a one-time refresh of the "
                "staticPartitions."
            ),
        },
        SCHEDULE_TIME: {
            "default": None,
            "type": ["null", "string"],
            "pattern": _SCHEDULE_TIME_REGEX,
            "title": "Schedule time",
            "description": (
                f"Optional, {SCHEDULE_TIME_PATTERN!r} without time zone, e.g. "
                "'2024-01-02 00:00:00'. Empty: the run's own time."
            ),
        },
        STATIC_PARTITIONS: {
            "default": {},
            "type": "object",
            "title": "Static partitions",
            "description": partitions_text,
        },
        DYNAMIC_OPTIONS: {
            "default": {},
            "type": "object",
            "title": "Dynamic options",
            "description": (
                "Options for the table's writer, e.g. {\"compression\": \"zstd\"}; allowed keys: "
                f"{', '.join(sorted(WRITER_OPTIONS))}."
            ),
        },
        EXECUTION_CONFIG: {
            "default": {},
            "type": "object",
            "title": "Execution config",
            "description": (
                "Spark SQL settings for this refresh, e.g. {\"spark.sql.shuffle.partitions\": 8}; "
                f"allowed keys: {', '.join(sorted(EXECUTION_CONFIG_KEYS))}."
            ),
        },
    }


def parse_refresh_request(
    conf: Mapping[str, Any] | None,
    definition: MaterializedTableDefinition,
    run_time: datetime,
    zone: str | tzinfo = "UTC",
) -> RefreshRequest:
    """Validate a refresh call and work out the partition it refreshes.

    ``conf`` is the run's params (or conf); ``run_time`` is when the scheduler fired the run
    (its logical date), used as scheduleTime when none is given; ``zone`` is the zone in which
    scheduleTime is wall-clock time.
    """
    conf = {} if conf is None else conf
    if not isinstance(conf, Mapping):
        raise RefreshRequestError(f"invalid refresh request {conf!r}: expected an object")
    unknown = sorted(str(key) for key in conf if key not in PARAM_NAMES)
    if unknown:
        raise RefreshRequestError(
            f"unknown refresh parameter(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(PARAM_NAMES)}"
        )
    is_periodic = conf.get(IS_PERIODIC, True)
    if not isinstance(is_periodic, bool):
        raise RefreshRequestError(f"invalid {IS_PERIODIC} {is_periodic!r}: expected true or false")
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
    except PartitionError as err:
        raise RefreshRequestError(str(err)) from None
    if is_periodic and static:
        raise RefreshRequestError(
            f"{STATIC_PARTITIONS} only apply to a one-time refresh: set {IS_PERIODIC} to false"
        )
    if is_periodic:
        spec = periodic_partition(
            schedule_time, definition.freshness, definition.partition_formatters
        )
    else:
        spec = static
    return RefreshRequest(
        is_periodic=is_periodic,
        schedule_time=schedule_time,
        partition_spec=MappingProxyType(spec),
        dynamic_options=MappingProxyType(writer_options(_object(conf, DYNAMIC_OPTIONS))),
        execution_config=MappingProxyType(execution_conf(_object(conf, EXECUTION_CONFIG))),
    )


def writer_options(dynamic_options: Mapping[str, Any]) -> dict[str, str]:
    """``dynamicOptions`` as the writer's options; a key outside ``WRITER_OPTIONS`` raises."""
    return _options(dynamic_options, DYNAMIC_OPTIONS, WRITER_OPTIONS)


def execution_conf(execution_config: Mapping[str, Any]) -> dict[str, str]:
    """``executionConfig`` as Spark SQL conf; a key outside ``EXECUTION_CONFIG_KEYS`` raises."""
    return _options(execution_config, EXECUTION_CONFIG, EXECUTION_CONFIG_KEYS)


def _object(conf: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = conf.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RefreshRequestError(f"invalid {name} {value!r}: expected an object")
    return value


def _options(options: Mapping[str, Any], name: str, allowed: frozenset[str]) -> dict[str, str]:
    """Flat key -> string map; values reach Spark as strings (booleans as true/false)."""
    checked = {}
    for key, value in options.items():
        if key not in allowed:
            raise RefreshRequestError(
                f"{name} key {key!r} is not allowed; allowed keys: {', '.join(sorted(allowed))}"
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
        checked[key] = text
    return checked
