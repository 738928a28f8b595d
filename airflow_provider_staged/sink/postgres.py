"""The built-in PostgreSQL sink: each task attempt stages its rows in its own table (COPY), one
transaction publishes a write and records its batch (``staging.kinds.jdbc_sink``)."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow
from psycopg import sql

from airflow_provider_staged.catalogs.postgres_connections import PostgresConnection, postgres_connection
from airflow_provider_staged.catalogs.postgres_types import postgres_columns
from airflow_provider_staged.sink.api import (
    GlobalCommitter,
    Sink,
    SinkWriter,
    WriterContext,
    WriteRef,
    check_mode,
)
from airflow_provider_staged.sink.recovery import abort_once, commit_once, filter_recovered
from airflow_provider_staged.sink.secret_files import read_secret, secret_file
from airflow_provider_staged.staging.kinds.jdbc_sink import (
    JdbcAppendStagedTable,
    batch_tables_prefix,
    drop_staged,
    staged_name,
)
from airflow_provider_staged.staging.kinds.jdbc_table import (
    JdbcTarget,
)
from airflow_provider_staged.staging.manifest import DataFile, Manifest

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings


@dataclass(frozen=True)
class PostgresStagedCommittable(WriteRef):
    """The staged table one task attempt filled."""

    overwrite: bool
    schema_json: str
    table: str
    rows: int


@dataclass(frozen=True)
class PostgresWriteCommittable(WriteRef):
    """One whole write: its staged tables and the batch it is."""

    overwrite: bool
    schema_json: str
    tables: tuple[tuple[str, int], ...]


class PostgresSink(Sink[PostgresStagedCommittable, PostgresWriteCommittable]):
    """Appends to (``mode="append"``) or replaces (``"overwrite"``) ``target``, a
    ``jdbc://<postgres conn id>/<schema>.<table>`` (created from the rows' schema when missing).

    The connection is looked up where the sink is made. The password never travels with the
    sink: a pickled sink (Spark's write options and plan, a staged build's journal) carries the
    conn id, the endpoint and at most the path of a secret file (``secret_files``) that the
    runtime creates for one write (``shipping``) — how Spark's Python workers, which get neither
    the driver's objects nor its environment, reach the database. An unpickled sink reads the
    password from that file, or, when it is gone (recovery after the write, a cluster without
    a shared filesystem), looks the Airflow connection up again (``AIRFLOW_CONN_*``, a secrets
    backend), as the ``jdbc_append`` kind does.
    """

    def __init__(
        self,
        target: JdbcTarget | str,
        settings: StagedSettings,
        mode: str = "append",
        connection: PostgresConnection | None = None,
    ) -> None:
        self.target = target if isinstance(target, JdbcTarget) else JdbcTarget.parse(target)
        self.settings = settings
        self.mode = check_mode(mode)
        self._connection: PostgresConnection | None = connection or postgres_connection(self.target.conn_id)
        self.endpoint = self._connection.endpoint()
        self.secret_file: str | None = None

    @property
    def name(self) -> str:
        return self.target.uri

    @property
    def connection(self) -> PostgresConnection:
        """The connection with its password, resolved once per process (see the class docstring)."""
        if self._connection is None:
            password = read_secret(self.secret_file) if self.secret_file is not None else None
            if password is None:
                self._connection = postgres_connection(self.target.conn_id)
            else:
                self._connection = PostgresConnection.from_endpoint(self.endpoint, password)
        return self._connection

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the connection, which holds the password."""
        return {**self.__dict__, "_connection": None}

    @contextlib.contextmanager
    def shipping(self) -> Iterator[PostgresSink]:
        """A copy that reads the password from a 0600 file living only while the block runs."""
        with secret_file(self.settings.journal_dir, self.connection.password) as path:
            shipped = copy.copy(self)
            shipped.secret_file = path
            yield shipped

    def create_writer(self, context: WriterContext) -> SinkWriter[PostgresStagedCommittable]:
        return _CopyWriter(self, context)

    def create_global_committer(
        self,
    ) -> GlobalCommitter[PostgresStagedCommittable, PostgresWriteCommittable]:
        return _PostgresGlobalCommitter(self)

    def commit_table(self, write: PostgresWriteCommittable) -> JdbcAppendStagedTable:
        return JdbcAppendStagedTable(
            self.target, self.connection, self.settings.journal, write.query_id, write.batch_id,
            write.overwrite, attempt_id=write.write_id,
        )


class _CopyWriter(SinkWriter[PostgresStagedCommittable]):
    """COPYs a task attempt's rows into its own UNLOGGED staged table."""

    def __init__(self, sink: PostgresSink, context: WriterContext) -> None:
        self.sink = sink
        self.context = context
        self.columns = postgres_columns(json.loads(context.schema_json))
        target = sink.target
        self.table = staged_name(
            target, context.query_id, context.batch_id, context.write_id, context.task_key
        )
        self.identifier = sql.Identifier(target.schema, self.table)
        self.conn = sink.connection.connect()
        definition = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.definition)) for c in self.columns
        )
        # A task attempt runs once: a leftover of the same name is a crashed twin's, never committed.
        self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.identifier))
        self.conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(self.identifier, definition))
        self.rows = 0

    def write(self, batch: pyarrow.RecordBatch) -> None:
        names = sql.SQL(", ").join(sql.Identifier(c.name) for c in self.columns)
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(self.identifier, names)
        values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        with self.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            for row in zip(*values, strict=True):
                copy.write_row(row)
        self.rows += batch.num_rows

    def prepare_commit(self, flush: bool) -> list[PostgresStagedCommittable]:
        context = self.context
        return [PostgresStagedCommittable(
            context.write_id, context.query_id, context.batch_id, context.streaming,
            "overwrite" in (self.sink.mode, context.mode), context.schema_json, self.table, self.rows,
        )]

    def close(self) -> None:
        self.conn.close()


class _PostgresGlobalCommitter(GlobalCommitter[PostgresStagedCommittable, PostgresWriteCommittable]):
    def __init__(self, sink: PostgresSink) -> None:
        self.sink = sink

    def combine(self, committables: list[PostgresStagedCommittable]) -> PostgresWriteCommittable:
        if not committables:
            raise ValueError(f"sink {self.sink.name}: a write needs at least one committable")
        first = committables[0]
        return PostgresWriteCommittable(
            first.write_id, first.query_id, first.batch_id, first.streaming, first.overwrite,
            first.schema_json, tuple((c.table, c.rows) for c in committables),
        )

    def filter_recovered_committables(
        self, global_committables: list[PostgresWriteCommittable]
    ) -> list[PostgresWriteCommittable]:
        # Earlier runs' staged tables need no sweep here: every commit and abort of a micro-batch
        # drops all of its runs' tables by name prefix (one catalog query).
        return filter_recovered(
            self.sink.settings, global_committables, lambda write: self.sink.commit_table(write).recorded()
        )

    def commit(self, global_committables: list[PostgresWriteCommittable]) -> list[PostgresWriteCommittable]:
        for write in global_committables:
            staged = self.sink.commit_table(write)
            commit_once(self.sink.settings, write, staged, lambda write=write: self.manifest_of(write))
        return []

    def manifest_of(self, write: PostgresWriteCommittable) -> Manifest:
        """The write's manifest, once its attempt began: the staged tables to copy, their columns."""
        columns = postgres_columns(json.loads(write.schema_json))
        return Manifest(
            location=self.sink.commit_table(write).location, format="jdbc",
            columns=[(c.name, c.definition) for c in columns],
            files=[DataFile(table, rows, 0) for table, rows in write.tables],
            rows=sum(rows for _, rows in write.tables),
        )

    def abort(self, global_committables: list[PostgresWriteCommittable]) -> None:
        for write in global_committables:
            abort_once(self.sink.commit_table(write), "the write failed or was already committed")
            # Every run of this micro-batch, not only this one: a replay of a committed batch is
            # never committed again, so the tables of an earlier replay that a crash cut short
            # would otherwise stay forever. No other run of the batch is alive (a streaming query
            # runs one at a time) and an earlier run's commit never needs its tables once this
            # run exists (it is either published already or aborted by ``settle_earlier_runs``).
            with self.sink.connection.reused() as conn:
                prefix = batch_tables_prefix(self.sink.target, write.query_id, write.batch_id)
                drop_staged(conn, self.sink.target.schema, prefix)
