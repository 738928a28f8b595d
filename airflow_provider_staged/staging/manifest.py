"""The committable of a staged write: what a Spark job wrote, from the engine to the journal to the commit."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# A manifest beside the data (``_`` hides it from Spark's readers): what callbacks read back.
MANIFEST_NAME = "_STAGED_MANIFEST.json"

__all__ = ["MANIFEST_NAME", "DataFile", "Manifest"]


@dataclass(frozen=True)
class DataFile:
    path: str
    rows: int
    bytes: int


@dataclass
class Manifest:
    """Schema, files, rows and bytes of one attempt, whatever its kind.

    ``location`` is the version directory (Parquet kinds; Spark ignores its ``_``-prefixed
    manifest file) or the staged table (JDBC). ``columns`` are (name, type) in the target's
    type system. ``rows``/``bytes`` default to the files' sums; ``rows`` is None when the
    writer did not count them (a JDBC build without ``count_rows``).
    """

    location: str
    format: str = "parquet"
    schema_json: str = ""
    columns: list[tuple[str, str]] = field(default_factory=list)
    partition_columns: list[str] = field(default_factory=list)
    files: list[DataFile] = field(default_factory=list)
    rows: int | None = None
    bytes: int | None = None
    table_oid: int | None = None
    # The job's audit results (``staging.audits.AuditResult`` as dicts) and the rows that
    # ``drop`` audits kept out of the version (``rows`` counts the rows written).
    audits: list[dict[str, Any]] = field(default_factory=list)
    dropped_rows: int = 0

    def __post_init__(self) -> None:
        if self.format == "parquet":
            self.rows = sum(item.rows for item in self.files) if self.rows is None else self.rows
            self.bytes = sum(item.bytes for item in self.files) if self.bytes is None else self.bytes
        self.bytes = self.bytes or 0

    @property
    def hive_columns(self) -> list[tuple[str, str]]:
        return self.columns

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | Manifest) -> Manifest:
        if isinstance(data, Manifest):
            return data
        if "location" not in data:
            raise ValueError(f"a manifest needs a location, got keys {sorted(data)}")
        return cls(
            location=data["location"],
            format=data.get("format", "parquet"),
            schema_json=data.get("schema_json", ""),
            columns=[tuple(column) for column in data.get("columns", data.get("hive_columns", []))],
            partition_columns=list(data.get("partition_columns", [])),
            files=[DataFile(**item) for item in data.get("files", [])],
            rows=data.get("rows"),
            bytes=data.get("bytes"),
            table_oid=data.get("table_oid"),
            audits=list(data.get("audits", [])),
            dropped_rows=int(data.get("dropped_rows", 0)),
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        return cls.from_dict(json.loads(text))
