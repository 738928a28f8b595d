"""The staged-table kinds and the one registry that rebuilds a journaled attempt.

Every kind is a ``JournaledStagedTable`` subclass that journals what it needs in its record's
``catalog`` and rebuilds itself with ``from_record``. Abort, reconcile, expiry and the CLI
rebuild attempts only through :func:`from_record`, so an attempt is always handled by the
kind that made it. A new kind (e.g. a sink) registers itself with :func:`register`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_staged.staging.attempts import JournaledStagedTable
    from airflow_provider_staged.staging.journal import AttemptRecord
    from airflow_provider_staged.staging.settings import StagedSettings

# Built-in kinds, imported on first use (the JDBC kind needs psycopg).
_BUILTIN = {
    "hive_table": "airflow_provider_staged.staging.kinds.hive_table:HiveStagedTable",
    "hive_partitions": "airflow_provider_staged.staging.kinds.hive_partitions:HivePartitionStagedTable",
    "hive_partitions_continuous":
        "airflow_provider_staged.staging.kinds.continuous_partitions:ContinuousPartitionStagedTable",
    "jdbc_table": "airflow_provider_staged.staging.kinds.jdbc_table:JdbcStagedTable",
    "hive_expire": "airflow_provider_staged.staging.expiry:HivePartitionExpiry",
    "hive_rollback": "airflow_provider_staged.staging.rollback:HiveRollback",
    "hive_append": "airflow_provider_staged.staging.kinds.hive_sink:HiveAppendStagedTable",
    "hive_overwrite": "airflow_provider_staged.staging.kinds.hive_sink:HiveOverwriteStagedTable",
    "jdbc_append": "airflow_provider_staged.staging.kinds.jdbc_sink:JdbcAppendStagedTable",
    "sink": "airflow_provider_staged.sink.staged:SinkStagedTable",
}
_REGISTERED: dict[str, type[JournaledStagedTable]] = {}


def register(kind_class: type[JournaledStagedTable]) -> type[JournaledStagedTable]:
    """Make ``kind_class`` (with its ``kind`` name) rebuildable from the journal; a class decorator."""
    existing = _REGISTERED.get(kind_class.kind)
    if existing is not None and existing is not kind_class:
        raise ValueError(f"staged kind {kind_class.kind!r} is already registered by {existing.__qualname__}")
    _REGISTERED[kind_class.kind] = kind_class
    return kind_class


def kind_class(kind: str) -> type[JournaledStagedTable]:
    if kind not in _REGISTERED and kind in _BUILTIN:
        module, _, name = _BUILTIN[kind].partition(":")
        register(getattr(importlib.import_module(module), name))
    try:
        return _REGISTERED[kind]
    except KeyError:
        known = ", ".join(sorted({*_BUILTIN, *_REGISTERED}))
        raise ValueError(f"unknown staged kind {kind!r}: known kinds are {known}") from None


def from_record(record: AttemptRecord, settings: StagedSettings) -> JournaledStagedTable:
    """The staged table of a journaled attempt, rebuilt exactly by the kind that made it, with
    the audits it declared."""
    staged = kind_class(record.kind).from_record(record, settings)
    if record.audits:
        from airflow_provider_staged.staging.audits import AuditSuite

        staged.audits = AuditSuite.from_list(record.audits["declared"])
    return staged
