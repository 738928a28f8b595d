"""Read a staged table's current version without Spark: metastore pointers + Parquet files.

A partitioned table is read the way Spark reads it: the partitions the metastore lists, each
at its own location (a partition refresh points partitions into different version
directories), with the partition values as columns. Row counts come from Parquet footers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import VERSION_KEY, current_location, tracks_partitions
from airflow_provider_staged.staging.errors import TableNotFoundError
from airflow_provider_staged.staging.identifiers import JAVA_INT_MAX, TableIdentifier
from airflow_provider_staged.staging.versions import version_of_location
from airflow_provider_staged.storage.files import resolve


@dataclass(frozen=True)
class TableSnapshot:
    """A table's current data. ``version`` is the attempt that wrote an unpartitioned table (or
    the table's last commit); a partition-refreshed table has a version per partition."""

    version: str
    location: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    total_rows: int
    # "k=v/..." -> rows, and -> the version holding it, for a table whose partitions the metastore tracks.
    partition_rows: dict[str, int] = field(default_factory=dict)
    partition_versions: dict[str, str | None] = field(default_factory=dict)
    per_partition: bool = False  # the metastore tracks its partitions, each at its own version


def read_table(metastore_uri: str, identifier: TableIdentifier, limit: int = 20) -> TableSnapshot:
    import pyarrow as pa
    import pyarrow.dataset as ds

    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= JAVA_INT_MAX:
        raise ValueError(f"invalid limit {limit!r}: expected a whole number of rows from 0 to {JAVA_INT_MAX}")
    with MetastoreClient(metastore_uri) as client:
        table = client.get_table(identifier.database, identifier.table)
        if table is None:
            raise TableNotFoundError(f"table {identifier} does not exist")
        keys = [column.name for column in table.partitionKeys or []]
        tracked = tracks_partitions(table)
        partitions = client.partitions(identifier.database, identifier.table) if tracked else []
    location = current_location(table)
    version = (table.parameters or {}).get(VERSION_KEY, "?")
    if not tracked:
        filesystem, path = resolve(location)
        dataset = ds.dataset(
            path, filesystem=filesystem, format="parquet", partitioning="hive", exclude_invalid_files=True
        )
        head = dataset.head(limit)
        return _snapshot(version, location, head, dataset.count_rows(), {})
    counts, versions, heads = {}, {}, []
    for partition in sorted(partitions, key=lambda p: p.values):
        name = "/".join(f"{k}={v}" for k, v in zip(keys, partition.values, strict=True))
        versions[name] = version_of_location(partition.sd.location)
        filesystem, path = resolve(partition.sd.location)
        dataset = ds.dataset(path, filesystem=filesystem, format="parquet", exclude_invalid_files=True)
        counts[name] = dataset.count_rows()
        missing = limit - sum(len(h) for h in heads)
        if missing > 0 and counts[name]:
            part = dataset.head(missing)
            for key, value in zip(keys, partition.values, strict=True):
                part = part.append_column(key, pa.array([value] * len(part), pa.string()))
            heads.append(part)
    head = pa.concat_tables(heads, promote_options="default") if heads else pa.table({})
    return _snapshot(version, location, head, sum(counts.values()), counts, versions)


def _snapshot(
    version: str, location: str, head: Any, total: int, counts: dict[str, int],
    versions: dict[str, str | None] | None = None,
) -> TableSnapshot:
    """``versions`` None: an untracked table (one version); else each partition's."""
    columns = head.column_names
    rows = [tuple(row[c] for c in columns) for row in head.to_pylist()]
    return TableSnapshot(version, location, columns, rows, total, counts,
                         partition_versions=versions or {}, per_partition=versions is not None)
