"""What a staged build read and wrote, as lineage (pure: no Airflow, no OpenLineage import).

:mod:`.openlineage` turns a :class:`Lineage` into the OpenLineage provider's ``OperatorLineage``.
Datasets are named as OpenLineage's naming spec says: a Hive table ``hive://<metastore host>:
<port>`` + ``<database>.<table>``, a PostgreSQL table ``postgres://<host>:<port>`` +
``<database>.<schema>.<table>``. The table name is primary: it is what the table's Airflow
Asset joins (``airflow.assets``) and the ``TABLE`` symlink openlineage-spark gives a Hive table,
whose primary name there is its location, a new ``_v=`` directory per commit; a committed output
lists that directory (:func:`location_dataset`) as its ``LOCATION`` symlink.

Input tables and column lineage come from the query with sqlglot (Spark dialect) and no schema,
so a ``*`` or an unqualified column of a join is not resolved: such columns get no column
lineage rather than a guessed one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import partition_values

log = logging.getLogger(__name__)

CREATE, OVERWRITE, DROP = "CREATE", "OVERWRITE", "DROP"
IDENTITY, TRANSFORMATION, AGGREGATION = "IDENTITY", "TRANSFORMATION", "AGGREGATION"
# Spark's current database when a query names a table without one.
DEFAULT_DATABASE = "default"
SESSION_CATALOG = "spark_catalog"


@dataclass(frozen=True)
class DatasetName:
    namespace: str
    name: str


@dataclass(frozen=True)
class ColumnOrigin:
    """An input column an output column is computed from, and how (OpenLineage's DIRECT subtypes)."""

    dataset: DatasetName
    column: str
    subtype: str


@dataclass(frozen=True)
class OutputLineage:
    """The written table: its lifecycle change, statistics (from the manifest), schema and columns."""

    dataset: DatasetName
    lifecycle: str | None = None
    # The committed attempt's id: the table's version that the commit made current.
    version: str | None = None
    # The version's directory (a Hive table), named as openlineage-spark names the location.
    location: DatasetName | None = None
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    schema: tuple[tuple[str, str], ...] = ()
    columns: Mapping[str, tuple[ColumnOrigin, ...]] = field(default_factory=dict)
    # The partitions written (or dropped) when not the whole table: OpenLineage's output subset.
    partitions: tuple[Mapping[str, str], ...] = ()
    # The audits the version passed (or failed, but published: ``warn``, ``drop``, published
    # anyway), as journaled (``staging.audits.AuditResult`` dicts): ``dataQualityAssertions``.
    assertions: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Lineage:
    inputs: tuple[DatasetName, ...] = ()
    outputs: tuple[OutputLineage, ...] = ()


HIVE_SCHEME = "hive"
HIVE_DEFAULT_PORT = 9083
# openlineage-java's FilesystemDatasetUtils names an object store's directory by its bucket
# (s3a and s3n as s3) and the path without its leading slash.
_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs"}


def hive_namespace(metastore_uri: str) -> str:
    """``thrift://host:port`` → ``hive://host:port`` (host lower-cased, port 9083 by default); of
    several URIs of one metastore (``thrift://h1:9083,thrift://h2:9083``) the first names it."""
    parts = urlsplit(metastore_uri.split(",")[0].strip())
    return f"{HIVE_SCHEME}://{parts.hostname}:{parts.port or HIVE_DEFAULT_PORT}"


def location_dataset(location: str) -> DatasetName:
    """A directory as openlineage-spark names it (``FilesystemDatasetUtils.fromLocation``):
    ``file`` + ``/path``; ``s3://bucket`` + ``key`` (also s3a, s3n), ``gs://bucket`` + ``key``;
    else ``<scheme>://<authority>`` + ``/path`` (e.g. ``hdfs://namenode:8020``)."""
    parts = urlsplit(location)
    path = parts.path.rstrip("/") or "/"
    if parts.scheme in ("", "file"):
        return DatasetName("file", path)
    store = _OBJECT_STORES.get(parts.scheme)
    if store is not None:
        return DatasetName(f"{store}://{parts.netloc}", path.lstrip("/") or "/")
    return DatasetName(f"{parts.scheme}://{parts.netloc}", path)


def hive_dataset(metastore_uri: str, table: str) -> DatasetName:
    return DatasetName(hive_namespace(metastore_uri), table)


def postgres_dataset(host: str, port: int, database: str, schema: str, table: str) -> DatasetName:
    return DatasetName(f"postgres://{host}:{port}", f"{database}.{schema}.{table}")


@dataclass(frozen=True)
class QueryLineage:
    inputs: tuple[DatasetName, ...] = ()
    columns: Mapping[str, tuple[ColumnOrigin, ...]] = field(default_factory=dict)


def read_tables(sql: str, database: str = DEFAULT_DATABASE) -> tuple[tuple[str | None, str], ...]:
    """``(catalog, db.table)`` (lower case) of every table the query reads: catalog None for
    Spark's session catalog (unqualified names in ``database``), else the other catalog's name
    (``cat.db.t``); CTEs and table functions are left out; empty if unparseable."""
    import sqlglot  # deferred: ~0.25 s to import, paid only where lineage is wanted
    from sqlglot import exp
    from sqlglot.errors import SqlglotError
    from sqlglot.optimizer.scope import traverse_scope

    try:
        query = sqlglot.parse_one(sql, read="spark")
        if not isinstance(query, exp.Query):
            return ()
        names = {}
        for scope in traverse_scope(query):
            for source in scope.sources.values():
                if _is_named_table(source, exp):
                    names[(_catalog(source), _table_name(source, database))] = None
    except (SqlglotError, ValueError, KeyError) as err:
        log.info("no source tables derived from the query: %s", err)
        return ()
    return tuple(names)


def source_tables(sql: str, database: str = DEFAULT_DATABASE) -> tuple[str, ...]:
    """``db.table`` of every table in Spark's session catalog the query reads (:func:`read_tables`
    without other catalogs' tables)."""
    return tuple(name for catalog, name in read_tables(sql, database) if catalog is None)


def query_lineage(sql: str, namespace: str) -> QueryLineage:
    """Input tables and column origins of a Spark SQL query; empty when sqlglot cannot parse it."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError
    from sqlglot.lineage import lineage

    inputs = tuple(DatasetName(namespace, name) for name in source_tables(sql))
    try:
        nodes = lineage(None, sqlglot.parse_one(sql, read="spark"), {}, dialect="spark")
    except (SqlglotError, ValueError, KeyError) as err:  # lineage() raises plain errors too
        log.info("no column lineage derived from the query: %s", err)
        return QueryLineage(inputs)
    columns = {}
    for column, node in nodes.items():
        origins = _origins(node, namespace, exp)
        if origins and column != "*":
            columns[column] = origins
    return QueryLineage(inputs, columns)


def _is_named_table(source: Any, exp: Any) -> bool:
    """A table of a catalog, not a CTE's query or a table function such as ``range(10)``."""
    return isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier)


def _catalog(table: Any) -> str | None:
    """The table's catalog when not Spark's session catalog (``cat`` of ``cat.db.t``)."""
    catalog = table.catalog.lower()
    return None if catalog in ("", SESSION_CATALOG) else catalog


def _is_table(source: Any, exp: Any) -> bool:
    """A table of the session catalog (not of another catalog, ``cat.db.t``)."""
    return _is_named_table(source, exp) and _catalog(source) is None


def _table_name(table: Any, database: str = DEFAULT_DATABASE) -> str:
    return f"{table.db or database}.{table.name}".lower()


def _origins(node: Any, namespace: str, exp: Any) -> tuple[ColumnOrigin, ...]:
    """The source-table columns under ``node`` (the lineage tree of one output column)."""
    chain = list(node.walk())
    if any(isinstance(n.expression, exp.Expression) and n.expression.find(exp.AggFunc) for n in chain):
        subtype = AGGREGATION
    elif all(_is_plain_column(n.expression, exp) for n in chain if n.downstream):
        subtype = IDENTITY
    else:
        subtype = TRANSFORMATION
    origins = {}
    for leaf in chain:
        source = leaf.source
        if leaf.downstream or not _is_table(source, exp):
            continue
        column = leaf.name.rsplit(".", 1)[-1]
        if column != "*":
            origins[(_table_name(source), column)] = None
    return tuple(ColumnOrigin(DatasetName(namespace, t), c, subtype) for t, c in origins)


def _is_plain_column(expression: Any, exp: Any) -> bool:
    inner = expression.this if isinstance(expression, exp.Alias) else expression
    return isinstance(inner, exp.Column)


def committed_output(
    dataset: DatasetName, record: AttemptRecord, columns: Mapping[str, tuple[ColumnOrigin, ...]]
) -> OutputLineage | None:
    """The output of a COMMITTED attempt (None otherwise: an aborted attempt wrote nothing).

    The lifecycle change is CREATE when the commit created the table (it superseded nothing),
    else OVERWRITE: of the table, or of the partitions the attempt wrote (a partition refresh).
    """
    if record.state is not AttemptState.COMMITTED or record.manifest is None:
        return None
    manifest = Manifest.from_dict(record.manifest)
    names = {name for name, _ in manifest.columns}
    keys = manifest.partition_columns or list(record.catalog.get("partition_columns") or [])
    written = {partition_values(item.path, keys) for item in manifest.files} if keys else set()
    return OutputLineage(
        dataset=dataset,
        lifecycle=CREATE if record.superseded_location is None else OVERWRITE,
        version=record.attempt_id,
        # A Hive attempt writes a directory; a JDBC attempt's location is a staged table's name.
        location=location_dataset(record.location) if _is_hive(dataset) else None,
        rows=manifest.rows,
        bytes=manifest.bytes,
        files=len(manifest.files) if manifest.files else None,
        schema=tuple(manifest.columns),
        columns={name: origins for name, origins in columns.items() if name in names},
        partitions=tuple(dict(zip(keys, values, strict=True)) for values in sorted(written - {None})),
        assertions=tuple((record.audits or {}).get("results", [])),
    )


def _is_hive(dataset: DatasetName) -> bool:
    return dataset.namespace.startswith(f"{HIVE_SCHEME}://")


def attempt_lineage(
    sql: str | None, input_namespace: str | None, dataset: DatasetName, record: AttemptRecord | None
) -> Lineage:
    """Lineage of one staged attempt: the query's inputs; the output only once committed."""
    derived = query_lineage(sql, input_namespace) if sql and input_namespace else QueryLineage()
    output = committed_output(dataset, record, derived.columns) if record is not None else None
    return Lineage(derived.inputs, (output,) if output is not None else ())


def planned_lineage(sql: str | None, input_namespace: str | None, dataset: DatasetName) -> Lineage:
    """What a staged build is about to read and write (its START event): the query's input
    tables and the target by name, before any attempt exists."""
    inputs = attempt_lineage(sql, input_namespace, dataset, None).inputs
    return Lineage(inputs, (OutputLineage(dataset),))


def dropped(dataset: DatasetName, partitions: Sequence[Mapping[str, str]] = ()) -> OutputLineage:
    """An expiry's output: DROP of the table, or (``partitions``) of those partitions of it."""
    return OutputLineage(dataset=dataset, lifecycle=DROP, partitions=tuple(dict(p) for p in partitions))


def expiry_lineage(metastore_uri: str, dropped_partitions: Mapping[str, Iterable[str]]) -> Lineage:
    """An expiry sweep's lineage: DROP of the partitions it dropped, per table.

    ``dropped_partitions``: ``db.table`` → Hive partition names (``ds=2024-01-01/h=3``), e.g.
    ``{plan.target: plan.expired.keys() for plan in report.plans if plan.expired}``.
    """
    outputs = []
    for table, names in dropped_partitions.items():
        specs = [_partition_spec(name) for name in names]
        if specs:
            outputs.append(dropped(hive_dataset(metastore_uri, table), specs))
    return Lineage(outputs=tuple(outputs))


def _partition_spec(name: str) -> dict[str, str]:
    """``ds=2024-01-01/h=3`` → ``{"ds": "2024-01-01", "h": "3"}`` (Hive escapes undone)."""
    pairs = (part.partition("=") for part in name.split("/"))
    return {unquote(key): unquote(value) for key, _, value in pairs}
