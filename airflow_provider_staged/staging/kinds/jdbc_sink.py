"""The commit of the built-in PostgreSQL sink (``jdbc_append``): one transaction per write.

Each task attempt of a write stages its rows in its own UNLOGGED table named
``<table>__s<hash of query and batch><hash of write>_<hash of task attempt>``. The commit copies
the committed staged tables into the target in ONE transaction that also records the write in
``<schema>.staged_sink_batches`` (target, query id, last batch id) — so ``is_published`` is
exact: the recorded batch — and, for an overwrite, empties the target first in that same
transaction. After the commit (and in ``discard``) every staged table of the write is dropped,
including those of failed and speculative attempts.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from airflow_provider_staged.catalogs.postgres_connections import PostgresConnection, postgres_connection
from airflow_provider_staged.catalogs.postgres_types import POSTGRES_MAX_NAME_LENGTH
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.faults import fault_point
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.kinds.jdbc_table import (
    JdbcTarget,
    _relation,
)
from airflow_provider_staged.staging.manifest import Manifest

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings

MARKER_TABLE = "staged_sink_batches"


def _hash(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def batch_tables_prefix(target: JdbcTarget, query_id: str, batch_id: int) -> str:
    """What the staged tables of every run of one micro-batch (or batch write) are named with."""
    return target.table[: POSTGRES_MAX_NAME_LENGTH - 26] + f"__s{_hash(f'{query_id}-b{batch_id}', 8)}"


def write_tables_prefix(target: JdbcTarget, query_id: str, batch_id: int, write_id: str) -> str:
    """What the staged tables of one write (one run of a micro-batch) are named with."""
    return batch_tables_prefix(target, query_id, batch_id) + _hash(write_id, 6) + "_"


def staged_name(target: JdbcTarget, query_id: str, batch_id: int, write_id: str, task_key: str) -> str:
    """A task attempt's staged table (at most 63 characters)."""
    return write_tables_prefix(target, query_id, batch_id, write_id) + _hash(task_key, 8)


def staged_tables(conn: psycopg.Connection[Any], schema: str, prefix: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r' AND starts_with(c.relname, %s)",
        (schema, prefix),
    ).fetchall()
    return sorted(str(row[0]) for row in rows)


def drop_staged(conn: psycopg.Connection[Any], schema: str, prefix: str) -> None:
    for name in staged_tables(conn, schema, prefix):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))


class JdbcAppendStagedTable(JournaledStagedTable):
    """One sink write appended to (or replacing) a PostgreSQL table in one transaction."""

    kind = "jdbc_append"

    def __init__(
        self,
        target: JdbcTarget,
        connection: PostgresConnection,
        journal: AttemptJournal,
        query_id: str,
        batch_id: int,
        overwrite: bool,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
    ) -> None:
        super().__init__(
            target.uri, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, task, attempt_id, target.conn_id
        )
        self.jdbc_target = target
        self.connection = connection
        self.query_id = query_id
        self.batch_id = batch_id
        self.overwrite = overwrite

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> JdbcAppendStagedTable:
        ref = record.catalog
        return cls(
            JdbcTarget.parse(record.target), postgres_connection(record.conn_id or ""), settings.journal,
            ref["query_id"], int(ref["batch_id"]), bool(ref["overwrite"]), record.task, record.attempt_id,
        )

    def check_target(self) -> None:
        """Nothing to check: a sink write appends to or replaces whatever is there, or creates it."""

    def target_exists(self) -> bool:
        with self.connection.reused() as conn:
            return _relation(conn, self.jdbc_target.schema, self.jdbc_target.table) is not None

    def staging_location(self) -> str:
        return write_tables_prefix(self.jdbc_target, self.query_id, self.batch_id, self.attempt_id)

    def write_spec(self) -> dict[str, Any]:
        return {"format": "sink", "location": self.staging_location()}

    def catalog_ref(self) -> dict[str, Any]:
        return {"query_id": self.query_id, "batch_id": self.batch_id, "overwrite": self.overwrite}

    @contextlib.contextmanager
    def catalog_transaction(self, exclusive: bool = True) -> Iterator[psycopg.Connection[Any]]:
        with self.connection.reused() as conn, conn.transaction():
            yield conn

    def _marker(self) -> sql.Composed:
        return sql.Identifier(self.jdbc_target.schema, MARKER_TABLE)

    def _recorded(self, conn: psycopg.Connection[Any], lock: bool) -> bool:
        row = conn.execute(
            sql.SQL("SELECT batch_id FROM {} WHERE target = %s AND query_id = %s{}").format(
                self._marker(), sql.SQL(" FOR UPDATE" if lock else "")
            ),
            (self.target, self.query_id),
        ).fetchone()
        return row is not None and row[0] is not None and int(row[0]) >= self.batch_id

    def load_current(self, txn: psycopg.Connection[Any]) -> bool | None:
        """True when the target exists (its rows are not read), None otherwise."""
        return _relation(txn, self.jdbc_target.schema, self.jdbc_target.table) is not None or None

    def publish(self, record: AttemptRecord) -> None:
        manifest = Manifest.from_dict(record.manifest or {})
        with self.catalog_transaction() as txn:
            txn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, query_id text NOT NULL, "
                    "batch_id bigint, committed_at timestamptz DEFAULT now(), PRIMARY KEY (target, query_id))"
                ).format(self._marker())
            )
            # The row lock orders commits of one query; the first commit inserts the row.
            txn.execute(
                sql.SQL("INSERT INTO {} (target, query_id) VALUES (%s, %s) ON CONFLICT DO NOTHING").format(
                    self._marker()
                ),
                (self.target, self.query_id),
            )
            if self._recorded(txn, lock=True):
                return None
            if self.load_current(txn) is None:
                self.create_target(txn, record, manifest)
            else:
                self.swap(txn, True, record, manifest)
            txn.execute(
                sql.SQL(
                    "UPDATE {} SET batch_id = %s, committed_at = now() WHERE target = %s AND query_id = %s"
                ).format(self._marker()),
                (self.batch_id, self.target, self.query_id),
            )
            fault_point("global_commit")
        return None

    def _target(self) -> sql.Composed:
        return sql.Identifier(self.jdbc_target.schema, self.jdbc_target.table)

    def create_target(self, txn: psycopg.Connection[Any], record: AttemptRecord, manifest: Manifest) -> None:
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(definition))
            for name, definition in manifest.columns
        )
        txn.execute(sql.SQL("CREATE TABLE {} ({})").format(self._target(), columns))
        self._insert(txn, manifest)

    def swap(
        self, txn: psycopg.Connection[Any], current: Any, record: AttemptRecord, manifest: Manifest
    ) -> None:
        if self.overwrite:
            txn.execute(sql.SQL("TRUNCATE {}").format(self._target()))
        self._insert(txn, manifest)

    def _insert(self, txn: psycopg.Connection[Any], manifest: Manifest) -> None:
        names = sql.SQL(", ").join(sql.Identifier(name) for name, _ in manifest.columns)
        for item in manifest.files:
            txn.execute(
                sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
                    self._target(), names, names, sql.Identifier(self.jdbc_target.schema, item.path)
                )
            )

    def is_published(self, record: AttemptRecord) -> bool:
        return self.recorded()

    def recorded(self) -> bool:
        """Whether the target records this write (its batch of its query) as committed."""
        with self.connection.reused() as conn:
            if _relation(conn, self.jdbc_target.schema, MARKER_TABLE) is None:
                return False
            return self._recorded(conn, lock=False)

    def discard(self, record: AttemptRecord) -> None:
        with self.connection.reused() as conn:
            drop_staged(conn, self.jdbc_target.schema, self.staging_location())

    def after_commit(self, record: AttemptRecord) -> None:
        # The copied tables, failed and speculative attempts' and earlier runs' of the micro-batch.
        with self.connection.reused() as conn:
            drop_staged(conn, self.jdbc_target.schema, batch_tables_prefix(self.jdbc_target, self.query_id,
                                                                          self.batch_id))
