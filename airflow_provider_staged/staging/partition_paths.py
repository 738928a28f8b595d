"""Hive-style partition directory names, escaped the way Spark writes them (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import unquote

# Spark's ExternalCatalogUtils.charToEscape (besides control characters).
_ESCAPED = set('"#%\'*/:=?\\{[]^') | {chr(0x7F)}
# The longest partition value the metastore stores (PARTITION_KEY_VALS.PART_KEY_VAL, VARCHAR(256)
# in Hive 2.3 to 4.0's schemas), in bytes: 255 bytes fit any of its databases (a MySQL latin1
# column counts bytes). A longer one passes Spark and fails the partition's registration.
MAX_VALUE_BYTES = 255
# PARTITIONS.PART_NAME is VARCHAR(767): the escaped ``col=value/...`` name, in which each quote
# or newline takes three characters, so 255 bytes of them overflow it.
MAX_NAME_LENGTH = 767


def escape_path_name(value: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED or ord(ch) < 0x20 else ch for ch in value)


def partition_path(columns: Sequence[str], values: Sequence[str]) -> str:
    pairs = zip(columns, values, strict=True)
    return "/".join(f"{escape_path_name(column)}={escape_path_name(value)}" for column, value in pairs)


def partition_values(relative_file: str, columns: Sequence[str]) -> tuple[str, ...] | None:
    """The partition values of a data file path relative to the version directory."""
    parts = relative_file.split("/")[: len(columns)]
    values = []
    for column, part in zip(columns, parts, strict=False):
        name, sep, value = part.partition("=")
        if not sep or unquote(name) != column:
            return None
        values.append(unquote(value))
    return tuple(values) if len(values) == len(columns) else None


def matches(values: Sequence[str], columns: Sequence[str], spec: Mapping[str, str]) -> bool:
    """Whether a partition (values in ``columns`` order) lies inside ``spec`` (a prefix or full spec)."""
    return all(spec.get(column, value) == value for column, value in zip(columns, values, strict=True))


def unstorable(columns: Sequence[str], values: Sequence[str]) -> str | None:
    """Why the metastore cannot register this partition (or spec prefix), or None."""
    for column, value in zip(columns, values, strict=True):
        size = len(value.encode())
        if size > MAX_VALUE_BYTES:
            return (f"value {value[:40]!r}… of partition column {column!r} is {size} bytes long, the "
                    f"metastore stores at most {MAX_VALUE_BYTES}")
    name = partition_path(columns, values)
    if len(name) > MAX_NAME_LENGTH:
        return (f"partition {name[:60]!r}… has a name of {len(name)} characters escaped, the metastore "
                f"stores at most {MAX_NAME_LENGTH}")
    return None


def spec_text(spec: Mapping[str, str]) -> str:
    """``ds=2024-01-03,hr=01``: a partition spec as a person reads it ("" for none)."""
    return ",".join(f"{column}={value}" for column, value in spec.items())


def is_data_path(relative: str) -> bool:
    """Whether a file at ``relative`` (under a version directory) is data Spark reads: no part
    hidden (``_SUCCESS``, ``.crc`` checksums), partition directories (``k=v``) aside."""
    return not any(part.startswith(("_", ".")) and "=" not in part for part in relative.split("/"))
