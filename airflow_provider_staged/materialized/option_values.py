"""The values of the refresh options (``dynamicOptions``, ``executionConfig``) Spark would refuse.

A value is checked the way Spark reads it (``ConfigBuilder``'s typed settings, the Parquet
writer's options), without a Spark session, when a request or a stored default is made: one that
Spark refuses would otherwise be stored and fail every later refresh. Only the allowlisted keys
whose type is plain are checked (booleans, whole numbers, sizes, durations, names from a fixed
set); a time zone as Java's ``ZoneId`` reads it; a rule list is left to Spark. Compared with a Spark 4.2
session, the checks refuse more only where Spark's reading is an accident: digits other than
ASCII (Java also takes fullwidth ones), hexadecimal numbers (Hadoop reads them), an infinite
factor, and a dictionary flag that is no boolean (Hadoop uses its default without a word).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from zoneinfo import available_timezones

from airflow_provider_staged.staging.identifiers import JAVA_INT_MAX

# A check returns None for a value Spark takes, else what it expects ("a boolean", ...).
Check = Callable[[str], "str | None"]

_LONG = 2**63 - 1  # Java's long: Spark's sizes, durations and long settings
_WHOLE = re.compile(r"[+-]?[0-9]{1,19}")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_SUFFIXED = re.compile(r"([0-9]{1,19})([a-z]*)")
# JavaUtils' suffixes: bytes (k = KiB) and durations (no suffix: the setting's own unit).
_BYTE_UNITS = {"": 1, "b": 1, **{s: 1024**(i + 1) for i, p in enumerate("kmgtp") for s in (p, p + "b")}}
# A duration's number itself must be a long: Java's TimeUnit conversion then saturates.
_TIME_UNITS = dict.fromkeys(("", "us", "ms", "s", "m", "min", "h", "d"), 1)
PARQUET_CODECS = ("none", "uncompressed", "snappy", "gzip", "lzo", "brotli", "lz4", "lz4_raw", "zstd")


def boolean(text: str) -> str | None:
    """Spark's ``toBoolean`` and Hadoop's ``getBoolean``: true or false, any case, trimmed.

    (Hadoop takes any other value as the default without a word.)"""
    return None if text.strip().lower() in ("true", "false") else "true or false"


def whole(least: int = -_LONG - 1, most: int = _LONG, trim: bool = True) -> Check:
    """Java's ``parseInt``/``parseLong`` (``trim``: of the trimmed text) within a range."""
    bounds = f" from {least} to {most}" if least > -_LONG - 1 or most < _LONG else ""
    expected = f"a whole number{bounds}"

    def check(text: str) -> str | None:
        value = text.strip() if trim else text
        if text.isascii() and _WHOLE.fullmatch(value) and least <= int(value) <= most:
            return None
        return expected

    return check


def decimal(least: float) -> Check:
    """Java's ``parseDouble`` of the trimmed text, at least ``least``."""

    def check(text: str) -> str | None:
        value = text.strip()
        if text.isascii() and _DECIMAL.fullmatch(value) and least <= float(value) < float("inf"):
            return None
        return f"a number >= {least:g}"

    return check


def _suffixed(text: str, units: dict[str, int], sign_first: bool) -> int | None:
    """JavaUtils' ``byteStringAs``/``timeStringAs``: digits and a suffix of the lower-cased,
    trimmed text, the number in the setting's unit (times the suffix's factor). A size's '-' is
    the text's first character (Spark's ``byteFromString``), a duration's goes with its digits."""
    if not text.isascii():
        return None
    body = text if sign_first else text.strip().lower()
    sign, body = (-1, body[1:]) if body.startswith("-") else (1, body)
    found = _SUFFIXED.fullmatch(body.strip().lower() if sign_first else body)
    if found is None or found.group(2) not in units:
        return None
    magnitude = int(found.group(1)) * units[found.group(2)]
    # A duration's digits are a long with their sign; a size's are one without it.
    return sign * magnitude if magnitude <= _LONG + (sign < 0 and not sign_first) else None


def size(least: int = -_LONG - 1) -> Check:
    """A size in bytes as Spark's ``bytesConf`` reads it: '64m', '128MB', '1g', '1048576'."""
    floor = f" of at least {least} bytes" if least > -_LONG - 1 else ""
    expected = f"a size{floor} such as 64m, 128MB or 1g (units b, k, kb, m, mb, g, gb, t, tb, p, pb)"

    def check(text: str) -> str | None:
        value = _suffixed(text, _BYTE_UNITS, sign_first=True)
        return None if value is not None and value >= least else expected

    return check


def duration(text: str) -> str | None:
    """A duration as Spark's ``timeConf`` reads it: '300' (its unit), '300s', '5min', '1h'."""
    if _suffixed(text, _TIME_UNITS, sign_first=False) is not None:
        return None
    return "a duration such as 300, 300s, 5min or 1h (units us, ms, s, m, min, h, d)"


def one_of(names: tuple[str, ...], trim: bool) -> Check:
    """A name of ``names``, any case (Spark's ``transform`` to one case)."""

    def check(text: str) -> str | None:
        value = text.strip() if trim else text
        return None if value.lower() in names else f"one of {', '.join(names)}"

    return check


# Java's ZoneId.SHORT_IDS, which Spark's getZoneId also accepts ("PST", "EST", ...).
_SHORT_ZONE_IDS = frozenset((
    "ACT", "AET", "AGT", "ART", "AST", "BET", "BST", "CAT", "CNT", "CST", "CTT", "EAT", "ECT", "IET",
    "IST", "JST", "MIT", "NET", "NST", "PLT", "PNT", "PRT", "PST", "SST", "VST", "EST", "MST", "HST",
))
# Ids of the tz database that Java's own copy leaves out (measured on JDK 17 and 25): ZoneId.of refuses them.
_NOT_IN_JAVA = frozenset(("Factory", "localtime", "posixrules", "ROC"))
# ZoneRegion.ofId's shape of a region id.
_REGION_ID = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+")
# The characters of any zone id or offset, as a JSON Schema pattern: what Airflow's Trigger form
# can check of a time zone (quotes, spaces, ';' refused there); the ids themselves by zone_id.
ZONE_ID_PATTERN = "^[A-Za-z0-9~/._+:-]+$(?!\\n)"
# ZoneOffset.of's forms by length: +h, +hh, +hhmm, +hh:mm, +hhmmss, +hh:mm:ss ('+' or '-').
_OFFSET_FORMS = {
    2: re.compile(r"[+-]([0-9])()()"),
    3: re.compile(r"[+-]([0-9]{2})()()"),
    5: re.compile(r"[+-]([0-9]{2})([0-9]{2})()"),
    6: re.compile(r"[+-]([0-9]{2}):([0-9]{2})()"),
    7: re.compile(r"[+-]([0-9]{2})([0-9]{2})([0-9]{2})"),
    9: re.compile(r"[+-]([0-9]{2}):([0-9]{2}):([0-9]{2})"),
}


@cache
def _region_ids() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_IN_JAVA


def _offset(text: str) -> bool:
    """Java's ``ZoneOffset.of``: hours up to 18, minutes and seconds up to 59, at most +-18:00."""
    form = _OFFSET_FORMS.get(len(text))
    found = form.fullmatch(text) if form else None
    if found is None:
        return False
    hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return hours <= 18 and minutes <= 59 and seconds <= 59 and (hours < 18 or minutes == seconds == 0)


def zone_id(text: str) -> str | None:
    """A time zone as Spark's ``getZoneId`` reads it: its rewrites of one-digit hours and minutes
    (``+8:00``, ``+08:0``), then Java's ``ZoneId.of`` with its short ids (``PST``): an offset,
    Z/UTC/GMT/UT alone or before an offset, or a region id of the tz database."""
    text = re.sub(r"([+-])([0-9]):", r"\g<1>0\2:", text, count=1)
    text = re.sub(r"([+-])([0-9]{2}):([0-9])$", r"\1\2:0\3", text, count=1)
    if text in _SHORT_ZONE_IDS or text in ("Z", "UTC", "GMT", "UT"):
        return None
    prefix = next((p for p in ("UTC", "GMT", "UT") if text.startswith(p) and text[len(p):][:1] in "+-"), "")
    if text[:1] in ("+", "-") or prefix:
        valid = _offset(text[len(prefix):])
    else:
        valid = bool(_REGION_ID.fullmatch(text)) and text in _region_ids()
    return None if valid else "a time zone such as UTC, +08:00 or America/Los_Angeles"


# Per allowlisted key (params.WRITER_OPTIONS, params.EXECUTION_CONFIG_KEYS): its check, or None
# where the value is free text Spark checks (a test keeps this in step with the allowlists).
# Spark 4.2 also refuses what the least values refuse (e.g. 0 shuffle partitions).
WRITER_OPTION_CHECKS: dict[str, Check | None] = {
    "compression": one_of(PARQUET_CODECS, trim=False),
    "maxRecordsPerFile": whole(trim=False),  # Scala's toLong, untrimmed
    "parquet.block.size": whole(),
    "parquet.page.size": whole(64, JAVA_INT_MAX),  # Parquet: at least its first slab (64 bytes)
    "parquet.enable.dictionary": boolean,
}
EXECUTION_CONFIG_CHECKS: dict[str, Check | None] = {
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": size(1),
    "spark.sql.adaptive.autoBroadcastJoinThreshold": size(),  # -1: never broadcast
    "spark.sql.adaptive.coalescePartitions.enabled": boolean,
    "spark.sql.adaptive.coalescePartitions.minPartitionSize": size(1),
    "spark.sql.adaptive.enabled": boolean,
    "spark.sql.adaptive.localShuffleReader.enabled": boolean,
    "spark.sql.adaptive.skewJoin.enabled": boolean,
    "spark.sql.adaptive.skewJoin.skewedPartitionFactor": decimal(0),
    "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes": size(),
    "spark.sql.ansi.enabled": boolean,
    "spark.sql.autoBroadcastJoinThreshold": size(),
    "spark.sql.broadcastTimeout": duration,
    "spark.sql.cbo.enabled": boolean,
    "spark.sql.cbo.joinReorder.enabled": boolean,
    "spark.sql.codegen.wholeStage": boolean,
    "spark.sql.files.maxPartitionBytes": size(),
    "spark.sql.files.maxRecordsPerFile": whole(),
    "spark.sql.files.minPartitionNum": whole(1, JAVA_INT_MAX),
    "spark.sql.files.openCostInBytes": size(),
    "spark.sql.join.preferSortMergeJoin": boolean,
    "spark.sql.legacy.timeParserPolicy": one_of(("exception", "legacy", "corrected"), trim=True),
    "spark.sql.optimizer.excludedRules": None,
    "spark.sql.parquet.compression.codec": one_of(PARQUET_CODECS, trim=False),
    "spark.sql.parquet.filterPushdown": boolean,
    "spark.sql.session.timeZone": zone_id,
    "spark.sql.shuffle.partitions": whole(1, JAVA_INT_MAX),
}
