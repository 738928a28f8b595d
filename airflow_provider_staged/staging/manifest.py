"""The committable of a staged write: what a Spark job wrote into its version directory."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# The job module is shipped to clusters alone, so it owns the name.
from airflow_provider_staged.engine.spark_job import MANIFEST_NAME

__all__ = ["MANIFEST_NAME", "DataFile", "Manifest"]


@dataclass(frozen=True)
class DataFile:
    path: str
    rows: int
    bytes: int


@dataclass
class Manifest:
    """Schema, files, rows and bytes of one attempt; Spark ignores ``_``-prefixed files."""

    location: str
    schema_json: str
    hive_columns: list[tuple[str, str]]
    partition_columns: list[str] = field(default_factory=list)
    files: list[DataFile] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(item.rows for item in self.files)

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.files)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows"] = self.rows
        data["bytes"] = self.bytes
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        return cls(
            location=data["location"],
            schema_json=data["schema_json"],
            hive_columns=[tuple(column) for column in data["hive_columns"]],
            partition_columns=list(data.get("partition_columns", [])),
            files=[DataFile(**item) for item in data.get("files", [])],
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        return cls.from_dict(json.loads(text))
