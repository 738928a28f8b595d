"""Read a staged table's current version without Spark: metastore pointer + Parquet files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.metastore.tables import VERSION_KEY, current_location
from airflow_provider_staged.staging.errors import TableNotFoundError


@dataclass(frozen=True)
class TableSnapshot:
    version: str
    location: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    total_rows: int


def read_table(metastore_uri: str, identifier: TableIdentifier, limit: int = 20) -> TableSnapshot:
    import pyarrow.dataset as ds

    with MetastoreClient(metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
    if table is None:
        raise TableNotFoundError(f"table {identifier} does not exist")
    location = current_location(table)
    path = location.removeprefix("file:")
    dataset = ds.dataset(path, format="parquet", partitioning="hive", exclude_invalid_files=True)
    data = dataset.to_table()
    head = data.slice(0, limit).to_pylist()
    columns = data.column_names
    return TableSnapshot(
        version=(table.parameters or {}).get(VERSION_KEY, "?"),
        location=location,
        columns=columns,
        rows=[tuple(row[c] for c in columns) for row in head],
        total_rows=data.num_rows,
    )
