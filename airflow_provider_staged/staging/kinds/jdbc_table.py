"""Staged tables in PostgreSQL (FLIP-305's JDBC demo): a staged table, a rename on commit.

An attempt on ``jdbc://<conn id>/<schema>.<table>`` owns the table ``<table>__stg_<hash of the
attempt id>`` in the same schema:

- ``begin`` checks the target, journals the attempt and creates the staged table as an empty
  placeholder (so abort always has a table to drop, and a job of an aborted attempt fails);
- the Spark job (``engine.jdbc_write``) adds the query's
  columns to the placeholder (types from ``jdbc_types``) in one statement, then writes into
  it through Spark's JDBC data source, in parallel partitions;
- ``commit`` renames the staged table to the target in ONE transaction; a replace renames the
  old table away, renames the staged one in and carries over comments in that same
  transaction: readers see the old table or the new one, never neither. The old table is
  dropped right after (``housekeep``), so the switch never waits for its files to be deleted;
- ``abort`` ends the sessions still writing into the staged table and drops it.

Every step borrows its connection from this process's ``catalogs.postgres_connections``: a build
authenticates once instead of four times.

The password comes from the Airflow connection and reaches the job only as an environment
variable (``job_env``); it is never in the journal, the write spec, a repr or a log line.
The connection (``catalogs.postgres_connections``) comes from an Airflow postgres connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from airflow_provider_staged.catalogs.postgres_connections import PostgresConnection, postgres_connection
from airflow_provider_staged.catalogs.postgres_types import (
    POSTGRES_MAX_NAME_LENGTH,
    PostgresColumn,
    postgres_name,
)
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose, SupportsStaging
from airflow_provider_staged.staging.attempts import JournaledStagedTable, abort_attempt
from airflow_provider_staged.staging.errors import StagingError, TableAlreadyExistsError, TableNotFoundError
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.manifest import Manifest

if TYPE_CHECKING:

    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

JDBC_SCHEME = "jdbc://"
POSTGRES_DRIVER = "org.postgresql.Driver"
_CONN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}$")
_HASH_LENGTH = 10
_RELATION_KINDS = {"v": "view", "m": "materialized view", "f": "foreign table", "S": "sequence"}


# -- targets, options, connections ------------------------------------------------------------


@dataclass(frozen=True)
class JdbcTarget:
    """A validated ``jdbc://<airflow postgres conn id>/<schema>.<table>`` (schema defaults to public)."""

    conn_id: str
    schema: str
    table: str

    @classmethod
    def parse(cls, text: object) -> JdbcTarget:
        if not isinstance(text, str) or not text.startswith(JDBC_SCHEME):
            raise ValueError(f"invalid JDBC target {text!r}: expected 'jdbc://<conn id>/<schema>.<table>'")
        conn_id, slash, name = text[len(JDBC_SCHEME) :].partition("/")
        if not slash or not _CONN_ID.match(conn_id):
            raise ValueError(
                f"invalid JDBC target {text!r}: the connection id {conn_id!r} must be letters, digits, "
                "'_', '-' or '.', followed by '/<schema>.<table>'"
            )
        parts = name.split(".")
        if len(parts) > 2:
            raise ValueError(
                f"invalid JDBC target {text!r}: expected '<schema>.<table>' after the connection id"
            )
        try:
            schema = postgres_name(parts[0] if len(parts) == 2 else "public", "schema name")
            table = postgres_name(parts[-1], "table name")
        except InvalidIdentifierError as error:
            raise InvalidIdentifierError(f"invalid JDBC target {text!r}: {error}") from None
        return cls(conn_id, schema, table)

    @property
    def uri(self) -> str:
        return f"{JDBC_SCHEME}{self.conn_id}/{self.schema}.{self.table}"

    def sibling(self, kind: str, attempt_id: str) -> str:
        """``<table>__<kind>_<hash of attempt>``: a per-attempt name within PostgreSQL's 63 characters."""
        return self.sibling_prefix(kind) + hashlib.sha256(attempt_id.encode()).hexdigest()[:_HASH_LENGTH]

    def sibling_prefix(self, kind: str) -> str:
        """What every ``sibling(kind, ...)`` name starts with."""
        marker = f"__{kind}_"
        return self.table[: POSTGRES_MAX_NAME_LENGTH - len(marker) - _HASH_LENGTH] + marker


@dataclass(frozen=True)
class JdbcWriteOptions:
    """How the job writes and how long commit/abort wait for locks.

    ``batch_size`` rows per JDBC batch; at most ``num_partitions`` parallel connections (default:
    the query's partitions); ``count_rows`` reads the whole staged table once more for the row
    count of the manifest and the asset event (off by default: Spark's JDBC writer does not
    report it, and the scan costs 2-3 % of a build); ``lock_timeout_ms`` per lock wait;
    ``commit_attempts`` tries when readers keep the target locked.
    """

    batch_size: int = 10_000
    num_partitions: int | None = None
    count_rows: bool = False
    lock_timeout_ms: int = 5_000
    commit_attempts: int = 3

    def __post_init__(self) -> None:
        for name in ("batch_size", "num_partitions", "lock_timeout_ms", "commit_attempts"):
            value = getattr(self, name)
            if value is None and name == "num_partitions":  # the query's partitioning
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"invalid {name} {value!r}: must be a positive integer")
        if not isinstance(self.count_rows, bool):
            raise ValueError(f"invalid count_rows {self.count_rows!r}: must be true or false")

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> JdbcWriteOptions:
        """Options from an operator argument; unknown names are errors, not silently ignored."""
        options = dict(options or {})
        unknown = sorted(set(options) - {f.name for f in fields(cls)})
        if unknown:
            known = ", ".join(f.name for f in fields(cls))
            raise ValueError(f"unknown JDBC option(s) {', '.join(map(repr, unknown))}: expected {known}")
        return cls(**options)


def password_env_var(conn_id: str) -> str:
    """The environment variable that carries ``conn_id``'s password to the Spark job."""
    return "STAGED_JDBC_PASSWORD_" + re.sub(r"[^A-Z0-9]", "_", conn_id.upper())


# -- SQL helpers (every identifier through psycopg.sql) ---------------------------------------


def _relation(conn: psycopg.Connection[Any], schema: str, name: str) -> tuple[int, str] | None:
    """(oid, relkind) of ``schema.name``, or None."""
    row = conn.execute(
        "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s",
        (schema, name),
    ).fetchone()
    return (int(row[0]), str(row[1])) if row else None


def _columns_of(conn: psycopg.Connection[Any], oid: int) -> list[tuple[str, str]]:
    """``(column, type)`` of the relation ``oid``, as PostgreSQL spells the types."""
    return [(str(name), str(kind)) for name, kind in conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (oid,))]


def _set_lock_timeout(conn: psycopg.Connection[Any], milliseconds: int) -> None:
    """Bound lock waits for the current transaction (``SET LOCAL`` takes no parameters)."""
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{milliseconds}ms",))


def type_staged_table(
    conn: psycopg.Connection[Any],
    schema: str,
    staged: str,
    columns: list[PostgresColumn],
    lock_timeout_ms: int,
) -> int:
    """Give the attempt's empty placeholder the query's columns, in one statement; return its oid.

    The placeholder must exist: when an abort has dropped it, this fails and the job stops
    instead of leaving a table that nothing would ever drop. It must still have no columns: a
    second run of the same attempt would append to what the first one wrote.
    """
    additions = sql.SQL(", ").join(
        sql.SQL("ADD COLUMN {} {}").format(sql.Identifier(column.name), sql.SQL(column.definition))
        for column in columns
    )
    with conn.transaction():
        _set_lock_timeout(conn, lock_timeout_ms)
        found = _relation(conn, schema, staged)
        if found is None:
            raise StagingError(f"staged table {schema}.{staged} is gone: its attempt was aborted")
        typed = conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
            (found[0],),
        ).fetchone()
        if typed and typed[0]:
            raise StagingError(
                f"staged table {schema}.{staged} was already written by an earlier run of this attempt: "
                "retry the task (a new attempt)"
            )
        conn.execute(sql.SQL("ALTER TABLE {} {}").format(sql.Identifier(schema, staged), additions))
    return found[0]


# -- the staged table -------------------------------------------------------------------------


class JdbcStagedTable(JournaledStagedTable):
    """An atomic CTAS/RTAS target in PostgreSQL: a staged table renamed to the target on commit."""

    kind = "jdbc_table"

    def __init__(
        self,
        target: JdbcTarget,
        purpose: StagingPurpose,
        journal: AttemptJournal,
        options: JdbcWriteOptions | None = None,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
        connection: PostgresConnection | None = None,
        conn_id: str | None = None,
    ) -> None:
        super().__init__(target.uri, purpose, journal, task, attempt_id, conn_id)
        self.table = target
        self.options = options or JdbcWriteOptions()
        self._connection = connection
        self.staged_name = target.sibling("stg", self.attempt_id)

    @property
    def connection(self) -> PostgresConnection:
        if self._connection is None:
            self._connection = postgres_connection(self.table.conn_id)
        return self._connection

    def _describe_target(self, conn: psycopg.Connection[Any]) -> tuple[int, str] | None:
        """(oid, relkind) of the target, or None; raise for a missing schema or a view to replace."""
        exists = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.table.schema,)
        ).fetchone()
        if not exists:
            raise TableNotFoundError(
                f"schema {self.table.schema!r} does not exist in database {self.connection.database!r} "
                f"(connection {self.table.conn_id!r})"
            )
        found = _relation(conn, self.table.schema, self.table.table)
        if found is not None and found[1] not in ("r", "p") and self.purpose.replaces:
            kind = _RELATION_KINDS.get(found[1], "relation")
            raise StagingError(f"{self.target} is a {kind}, not a table: it cannot be replaced")
        return found

    def target_exists(self) -> bool:
        with self.connection.reused() as conn:
            return self._describe_target(conn) is not None

    def staging_location(self) -> str:
        return f"{self.table.schema}.{self.staged_name}"

    def begin(self) -> None:
        super().begin()
        if self.skipped:
            return
        try:
            with self.connection.reused() as conn, conn.transaction():
                _set_lock_timeout(conn, self.options.lock_timeout_ms)
                # Zero columns: the job adds the query's columns (see type_staged_table).
                conn.execute(
                    sql.SQL("CREATE TABLE IF NOT EXISTS {} ()").format(
                        sql.Identifier(self.table.schema, self.staged_name)
                    )
                )
        except Exception as error:
            abort_attempt(self, f"begin failed: {error}")
            raise

    def write_spec(self) -> dict[str, Any]:
        return {
            "format": "jdbc",
            "endpoint": self.connection.endpoint(),
            "password_env": password_env_var(self.table.conn_id),
            "schema": self.table.schema,
            "staged_table": self.staged_name,
            "batch_size": self.options.batch_size,
            "num_partitions": self.options.num_partitions,
            "count_rows": self.options.count_rows,
            "lock_timeout_ms": self.options.lock_timeout_ms,
        }

    def job_env(self) -> dict[str, str]:
        return {password_env_var(self.table.conn_id): self.connection.password}

    def catalog_ref(self) -> dict[str, Any]:
        return {
            "conn_id": self.table.conn_id,
            "schema": self.table.schema,
            "staged_table": self.staged_name,
            "options": asdict(self.options),
        }

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> JdbcStagedTable:
        return cls(
            JdbcTarget.parse(record.target),
            StagingPurpose.parse(record.purpose),
            settings.journal,
            JdbcWriteOptions.from_mapping(record.catalog.get("options")),
            task=record.task,
            attempt_id=record.attempt_id,
            conn_id=record.conn_id,
        )

    @contextlib.contextmanager
    def catalog_transaction(self, exclusive: bool = True) -> Iterator[psycopg.Connection[Any]]:
        with self.connection.reused() as conn, conn.transaction():
            _set_lock_timeout(conn, self.options.lock_timeout_ms)
            yield conn

    def load_current(self, txn: psycopg.Connection[Any]) -> tuple[int, str] | None:
        return self._describe_target(txn)

    def supports_audits(self) -> bool:
        return True  # the Spark job audits the staged table (``engine.jdbc_write``)

    def replaced_parts(self) -> dict[str, str]:
        """The target table as its oid: a commit swaps in another table (another oid), so a
        changed oid tells ``staged publish`` that the table moved on."""
        with self.connection.reused() as conn:
            found = _relation(conn, self.table.schema, self.table.table)
        return {} if found is None else {"": str(found[0])}

    def recorded_rows(self, location: str) -> int | None:
        """The rows the attempt that wrote the table of oid ``location`` counted (its staged table
        became the target by rename, which keeps the oid)."""
        for record in self.journal.records():
            if record.target != self.target or not record.manifest:
                continue
            manifest = Manifest.from_dict(record.manifest)
            if str(manifest.table_oid) == location:
                return manifest.rows
        return None

    def current_columns(self) -> list[tuple[str, str]] | None:
        with self.connection.reused() as conn:
            found = _relation(conn, self.table.schema, self.table.table)
            return None if found is None else _columns_of(conn, found[0])

    def written_columns(self, manifest: Manifest) -> list[tuple[str, str]]:
        """The staged table's, read from the catalog: both sides spelled alike."""
        with self.connection.reused() as conn:
            return _columns_of(conn, self._staged_oid(conn, manifest))

    def publish(self, record: AttemptRecord) -> str | list[str] | None:
        """The shared commit in one transaction; retried when a lock wait times out."""
        for attempt in range(1, self.options.commit_attempts + 1):
            try:
                return super().publish(record)
            except (
                psycopg.errors.DuplicateTable,
                psycopg.errors.DuplicateObject,
                psycopg.errors.UniqueViolation,
            ):
                # Someone created the target after our check: a create loses, create-or-replace retries.
                if not self.purpose.replaces:
                    raise TableAlreadyExistsError(
                        f"table {self.target} was created by someone else before this commit"
                    ) from None
            except psycopg.errors.LockNotAvailable:
                log.warning(
                    "commit of %s: target locked by readers for %d ms (try %d of %d)",
                    self.target,
                    self.options.lock_timeout_ms,
                    attempt,
                    self.options.commit_attempts,
                )
            if attempt < self.options.commit_attempts:
                time.sleep(0.2 * attempt)
        raise StagingError(
            f"could not commit {self.target}: its table stayed locked or contended "
            f"({self.options.commit_attempts} tries with lock_timeout {self.options.lock_timeout_ms} ms)"
        )

    def _staged_oid(self, conn: psycopg.Connection[Any], manifest: Manifest) -> int:
        found = _relation(conn, self.table.schema, self.staged_name)
        if found is None or (manifest.table_oid is not None and found[0] != manifest.table_oid):
            raise StagingError(f"staged table {manifest.location} is missing or is not what the job wrote")
        return found[0]

    def create_target(self, txn: psycopg.Connection[Any], record: AttemptRecord, manifest: Manifest) -> None:
        self._staged_oid(txn, manifest)
        txn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                sql.Identifier(self.table.schema, self.staged_name), sql.Identifier(self.table.table)
            )
        )

    def swap(
        self,
        txn: psycopg.Connection[Any],
        current: tuple[int, str],
        record: AttemptRecord,
        manifest: Manifest,
    ) -> str:
        schema, table = self.table.schema, self.table.table
        staged_oid = self._staged_oid(txn, manifest)
        target, staged = sql.Identifier(schema, table), sql.Identifier(schema, self.staged_name)
        # Waits (lock_timeout) for running readers; readers arriving later wait for us and
        # then see the new table: PostgreSQL looks the name up again after a lock wait.
        txn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(target))
        _refuse_dependents(txn, current[0], self.target)
        old_name = self.table.sibling("old", self.attempt_id)
        txn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(target, sql.Identifier(old_name)))
        txn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(staged, sql.Identifier(table)))
        _carry_comments(txn, current[0], staged_oid, schema, table)
        return f"{schema}.{old_name}"

    def recovered_superseded(self, record: AttemptRecord) -> str:
        """The name a replace renamed the old table to (a create left none: dropping it is a no-op)."""
        return f"{self.table.schema}.{self.table.sibling('old', self.attempt_id)}"

    def after_commit(self, record: AttemptRecord) -> None:
        """Drop the table this commit renamed away, and any that an earlier commit left behind."""
        doomed = {record.superseded_location} if record.superseded_location else set()
        with self.connection.reused() as conn:
            found = _relations_like(conn, self.table.schema, self.table.sibling_prefix("old"))
            if {f"{self.table.schema}.{name}" for name in found} - doomed:
                # Only names the journal says a commit renamed away: never a user's look-alike.
                doomed |= {
                    r.superseded_location
                    for r in self.journal.records()
                    if r.kind == self.kind and r.target == self.target and r.superseded_location
                }
            for location in sorted(doomed):
                schema, _, name = location.partition(".")
                with conn.transaction():
                    _set_lock_timeout(conn, self.options.lock_timeout_ms)
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
                log.info("dropped %s, superseded by a commit of %s", location, self.target)

    def is_published(self, record: AttemptRecord) -> bool:
        written_oid = Manifest.from_dict(record.manifest).table_oid if record.manifest else None
        if written_oid is None:
            return False
        with self.connection.reused() as conn:
            found = _relation(conn, self.table.schema, self.table.table)
        return found is not None and found[0] == written_oid

    def discard(self, record: AttemptRecord) -> None:
        with self.connection.reused() as conn:
            found = _relation(conn, self.table.schema, self.staged_name)
            if found is None:
                return
            # Writers into this attempt's own table are doomed: end their sessions rather than
            # wait for them. Cancelling is not enough: between two JDBC batches a writer is idle
            # in its transaction, still holding its lock, and a cancel does nothing.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks"
                " WHERE relation = %s AND pid <> pg_backend_pid() AND granted",
                (found[0],),
            )
            with conn.transaction():
                _set_lock_timeout(conn, max(self.options.lock_timeout_ms, 30_000))
                conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {}").format(
                        sql.Identifier(self.table.schema, self.staged_name)
                    )
                )
        log.info("dropped staged table %s of %s", record.location, self.target)


def _refuse_dependents(conn: psycopg.Connection[Any], oid: int, target: str) -> None:
    """Fail a replace when views or foreign keys depend on the old table.

    They follow the table, not its name: after the swap they would silently keep reading the
    old data, and the old table could never be dropped. (No CASCADE: dropping them is the
    owner's decision.)
    """
    dependents = [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT pg_describe_object(classid, objid, objsubid) FROM pg_depend"
            " WHERE refclassid = 'pg_class'::regclass AND refobjid = %s AND deptype = 'n'"
            " ORDER BY 1",
            (oid,),
        )
    ]
    if dependents:
        raise StagingError(
            f"cannot replace {target}: {', '.join(dependents)} depend(s) on it and would keep "
            "the old data; drop or redefine them first"
        )


def _relations_like(conn: psycopg.Connection[Any], schema: str, prefix: str) -> set[str]:
    """Names in ``schema`` that start with ``prefix`` (taken literally, not as a pattern)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND left(c.relname, length(%s)) = %s",
        (schema, prefix, prefix),
    ).fetchall()
    return {str(row[0]) for row in rows}


def _carry_comments(
    conn: psycopg.Connection[Any], old_oid: int, new_oid: int, schema: str, table: str
) -> None:
    """Copy the replaced table's comment and the comments of columns that kept their name."""
    # pg_description directly (its index), not obj_description() per column: a third of the swap.
    rows = conn.execute(
        "SELECT a.attname, d.description FROM pg_description d"
        " LEFT JOIN pg_attribute a ON a.attrelid = d.objoid AND a.attnum = d.objsubid"
        " WHERE d.classoid = 'pg_class'::regclass AND d.objoid = %(old)s"
        "  AND (d.objsubid = 0 OR EXISTS (SELECT 1 FROM pg_attribute b WHERE b.attrelid = %(new)s"
        "   AND b.attname = a.attname AND b.attnum > 0 AND NOT b.attisdropped))",
        {"old": old_oid, "new": new_oid},
    ).fetchall()
    for column, comment in rows:
        if column is None:
            statement = sql.SQL("COMMENT ON TABLE {} IS {}").format(
                sql.Identifier(schema, table), sql.Literal(comment)
            )
        else:
            statement = sql.SQL("COMMENT ON COLUMN {} IS {}").format(
                sql.Identifier(schema, table, column), sql.Literal(comment)
            )
        conn.execute(statement)


# -- the sink ---------------------------------------------------------------------------------


class JdbcStagingSink(SupportsStaging):
    """``SupportsStaging`` for a PostgreSQL table (FLIP-305's JdbcTableSink)."""

    def __init__(
        self,
        target: JdbcTarget,
        journal: AttemptJournal,
        task: TaskRef | None = None,
        options: JdbcWriteOptions | None = None,
        connection: PostgresConnection | None = None,
        conn_id: str | None = None,
    ) -> None:
        self.target = target
        self.journal = journal
        self.task = task
        self.options = options
        self.connection = connection
        self.conn_id = conn_id

    def apply_staging(self, context: StagingContext) -> JdbcStagedTable:
        return JdbcStagedTable(
            self.target,
            context.purpose,
            self.journal,
            self.options,
            self.task,
            connection=self.connection,
            conn_id=self.conn_id,
        )


def jdbc_sink_for_target(
    target: str,
    journal: AttemptJournal,
    task: TaskRef | None = None,
    options: JdbcWriteOptions | None = None,
    conn_id: str | None = None,
) -> JdbcStagingSink:
    """The sink of ``jdbc://<postgres conn id>/<schema>.<table>``; raise ValueError naming a bad one."""
    return JdbcStagingSink(JdbcTarget.parse(target), journal, task, options, conn_id=conn_id)
