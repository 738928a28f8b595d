"""Spark data-source table definitions as Thrift objects, the way Spark itself writes them.

Spark reads a data-source table's location from the serde parameter ``path`` and its schema
from the ``spark.sql.sources.schema*`` table parameters; Hive, Trino and friends read
``sd.location`` and ``sd.cols``. A version switch rewrites all of them in one ``alter_table``.
"""

from __future__ import annotations

import copy
import time

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.storage.files import normalize_location

PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
# What Spark writes when the schema has types Hive cannot describe.
OPAQUE_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
OPAQUE_INPUT = "org.apache.hadoop.mapred.SequenceFileInputFormat"
OPAQUE_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat"

SCHEMA_KEY = "spark.sql.sources.schema"
SCHEMA_CHUNK = 4000
VERSION_KEY = "staged.version"
# "catalog": Spark reads the partitions the metastore lists, not the directories it finds.
PARTITION_PROVIDER_KEY = "spark.sql.partitionProvider"
STAGED_KEYS_PREFIX = "staged."
_NOT_HIVE_COMPATIBLE = ("timestamp_ntz", "interval", "variant", "void", "time", "geo")


def _hive_compatible(columns: list[tuple[str, str]]) -> bool:
    return not any(marker in kind for _, kind in columns for marker in _NOT_HIVE_COMPATIBLE)


def schema_parameters(manifest: Manifest, track_partitions: bool = False) -> dict[str, str]:
    """The Spark schema parameters, split in chunks as Spark does for long schemas.

    Without ``track_partitions`` Spark discovers a partitioned table's partitions from the
    directories under its location, so a whole version switches in one call.
    """
    schema = manifest.schema_json
    params = {}
    if len(schema) <= SCHEMA_CHUNK:
        params[SCHEMA_KEY] = schema
    else:
        chunks = [schema[i : i + SCHEMA_CHUNK] for i in range(0, len(schema), SCHEMA_CHUNK)]
        params[f"{SCHEMA_KEY}.numParts"] = str(len(chunks))
        params.update({f"{SCHEMA_KEY}.part.{i}": chunk for i, chunk in enumerate(chunks)})
    if manifest.partition_columns:
        params[f"{SCHEMA_KEY}.numPartCols"] = str(len(manifest.partition_columns))
        params.update(
            {f"{SCHEMA_KEY}.partCol.{i}": c for i, c in enumerate(manifest.partition_columns)}
        )
        if track_partitions:
            params[PARTITION_PROVIDER_KEY] = "catalog"
    return params


def _storage(manifest: Manifest, location: str) -> ttypes.StorageDescriptor:
    data_columns = [c for c in manifest.hive_columns if c[0] not in manifest.partition_columns]
    if _hive_compatible(manifest.hive_columns):
        cols = [ttypes.FieldSchema(name=n, type=t) for n, t in data_columns]
        serde, input_format, output_format = PARQUET_SERDE, PARQUET_INPUT, PARQUET_OUTPUT
    else:
        cols = [ttypes.FieldSchema(name="col", type="array<string>", comment="from deserializer")]
        serde, input_format, output_format = OPAQUE_SERDE, OPAQUE_INPUT, OPAQUE_OUTPUT
    return ttypes.StorageDescriptor(
        cols=cols,
        location=location,
        inputFormat=input_format,
        outputFormat=output_format,
        compressed=False,
        numBuckets=-1,
        serdeInfo=ttypes.SerDeInfo(
            serializationLib=serde,
            parameters={"serialization.format": "1", "path": location},
        ),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )


def without_hive_columns(table: ttypes.Table) -> ttypes.Table:
    """``table`` with its schema in Spark's parameters only, for a metastore that refuses its Hive
    columns (``hive.metastore.disallow.incompatible.col.type.changes``, Hive's default, checks
    each new column type against the old one at its position: a narrowing or a reorder fails).

    Spark keeps such a schema the same way (``HiveExternalCatalog``: "Updating Hive metastore in
    Spark SQL specific format"), but its placeholder column (``col array<string>``) is refused too
    against real columns; an empty column list has no position to check. Spark reads a data-source
    table's schema, location and partitions from the parameters and the catalog alone; the opaque
    formats make a Hive reader fail instead of reading the files with no columns. The next switch
    whose columns Hive takes writes them again."""
    updated = copy.deepcopy(table)
    updated.sd.cols = []
    updated.sd.inputFormat, updated.sd.outputFormat = OPAQUE_INPUT, OPAQUE_OUTPUT
    updated.sd.serdeInfo.serializationLib = OPAQUE_SERDE
    return updated


def _table_parameters(manifest: Manifest, version: str) -> dict[str, str]:
    return {
        "EXTERNAL": "TRUE",
        "spark.sql.sources.provider": "parquet",
        "spark.sql.create.version": "4.2.0",
        VERSION_KEY: version,
        "staged.rows": str(manifest.rows),
        "staged.bytes": str(manifest.bytes),
        "staged.committed_at": str(int(time.time())),
        **schema_parameters(manifest),
    }


def new_table(
    identifier: TableIdentifier, manifest: Manifest, version: str, owner: str = "staged"
) -> ttypes.Table:
    """An EXTERNAL Parquet data-source table at the manifest's location."""
    partition_keys = [
        ttypes.FieldSchema(name=n, type=t)
        for n, t in manifest.hive_columns
        if n in manifest.partition_columns
    ]
    return ttypes.Table(
        tableName=identifier.table,
        dbName=identifier.database,
        owner=owner,
        createTime=int(time.time()),
        lastAccessTime=0,
        retention=0,
        sd=_storage(manifest, manifest.location),
        partitionKeys=partition_keys,
        parameters=_table_parameters(manifest, version),
        tableType="EXTERNAL_TABLE",
    )


def repointed_table(current: ttypes.Table, manifest: Manifest, version: str) -> ttypes.Table:
    """``current`` switched to the manifest's version: location, serde path, schema, stats."""
    updated = copy.deepcopy(current)
    replacement = new_table(
        TableIdentifier(current.dbName, current.tableName), manifest, version, current.owner
    )
    updated.sd = replacement.sd
    updated.partitionKeys = replacement.partitionKeys
    kept = {
        key: value
        for key, value in (current.parameters or {}).items()
        if not key.startswith((SCHEMA_KEY, STAGED_KEYS_PREFIX, PARTITION_PROVIDER_KEY))
        and key not in ("numFiles", "totalSize", "numRows", "rawDataSize", "COLUMN_STATS_ACCURATE")
    }
    updated.parameters = {**kept, **replacement.parameters}
    updated.tableType = "EXTERNAL_TABLE"
    return updated


def tracks_partitions(table: ttypes.Table) -> bool:
    """Whether Spark reads ``table``'s partitions from the catalog (then only the files directly in
    each partition's location); otherwise it discovers them from the directories under its location."""
    return bool(table.partitionKeys) and (table.parameters or {}).get(PARTITION_PROVIDER_KEY) == "catalog"


def is_version(table: ttypes.Table | None, location: str) -> bool:
    """Whether ``table`` (None: dropped) reads the version directory at ``location``."""
    return table is not None and normalize_location(current_location(table)) == normalize_location(location)


def current_location(table: ttypes.Table) -> str:
    """Where Spark reads the table from (the serde ``path``, else ``sd.location``)."""
    return (table.sd.serdeInfo.parameters or {}).get("path") or table.sd.location
