"""Hive-style partition directory names, escaped the way Spark writes them (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import unquote

# Spark's ExternalCatalogUtils.charToEscape (besides control characters).
_ESCAPED = set('"#%\'*/:=?\\{[]^') | {chr(0x7F)}


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
