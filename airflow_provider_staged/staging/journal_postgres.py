"""The shared journal: attempt records in PostgreSQL, seen alike by every host (``AttemptJournal``).

Every worker, the DAG processor (abort callbacks of lost tasks), the CLI and the UI read and write
the same rows, so no host's sweep mistakes another host's attempt for an orphan. What makes it
hold across hosts (docs/DESIGN.md, "The shared journal"):

- ``locked`` is a session-level advisory lock (``pg_advisory_lock`` on a 64-bit hash of the
  journal's schema and the attempt id) on a connection held for the block. It dies with its
  session: a killed process's connection closes at once, and a vanished host's session is ended
  by the server's TCP keepalives (``SERVER_KEEPALIVES``: within about 30 s).
- Transitions do not rely on that lock alone: each is a compare-and-set ``UPDATE … WHERE state =
  <read> AND revision = <read>``, so a holder whose lock was taken away (its session reaped)
  cannot overwrite what the next holder journaled; it gets ``CommitConflictError``.
- Every time in a record (history, ``updated_at``, ``heartbeat_at``), a retention mark and an
  orphan's first sighting is the database's ``clock_timestamp()``; ``now()`` reads that clock for
  whatever compares with them, so hosts whose clocks differ agree on grace periods and TTLs.

The tables are created on first use (``CREATE … IF NOT EXISTS`` under a transaction-level
advisory lock, in a schema whose name is checked). The URL's password is never shown: messages
and ``repr`` carry ``redacted_url``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from airflow_provider_staged.catalogs.postgres_connections import APPLICATION_NAME, POSTGRES_CONNECTIONS
from airflow_provider_staged.staging.errors import CommitConflictError, StagingError
from airflow_provider_staged.staging.journal import (
    AttemptJournal,
    AttemptRecord,
    AttemptState,
    TaskRef,
    check_attempt_id,
    check_transition,
    owned_by,
)

URL_SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "staged_journal"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# The server ends the session of a client that stopped answering: idle 10 s, then 3 probes 5 s
# apart (~25 s), or 30 s of unacknowledged data; its advisory locks go with it.
SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
# And this side notices a server that vanished as soon.
CLIENT_KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
_ENDED = [AttemptState.COMMITTED.value, AttemptState.ABORTED.value]
_NOW = "extract(epoch FROM clock_timestamp())::float8"
# Any fixed key: serializes the first-use CREATEs of concurrent processes (concurrent CREATE …
# IF NOT EXISTS of one name can fail on the catalog's unique index).
_SCHEMA_LOCK_KEY = 0x5374616765644A6E
_READY: set[tuple[str, str]] = set()
_READY_LOCK = threading.Lock()


def is_postgres_url(location: str) -> bool:
    return urlsplit(location).scheme in URL_SCHEMES


def redacted_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` parameter)."""
    url = re.sub(r"(://[^/@:]*):[^/@]*@", r"\1:***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


class PostgresJournal(AttemptJournal):
    """Attempt records in ``<schema>.attempts`` of the database at ``url`` (``AttemptJournal``)."""

    def __init__(self, url: str, schema: str = DEFAULT_SCHEMA) -> None:
        self.redacted_url = redacted_url(url)
        if not is_postgres_url(url):
            raise ValueError(f"invalid journal URL {self.redacted_url!r}: expected postgresql://...")
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(
                f"invalid journal schema {schema!r}: lower-case letters, digits and _ (at most 63)"
            )
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as error:
            raise ValueError(f"invalid journal URL {self.redacted_url!r}: {error}") from None
        options = " ".join(f"-c {key}={value}" for key, value in SERVER_KEEPALIVES.items())
        params["options"] = f"{params.get('options') or ''} {options}".strip()
        self._params = {
            "connect_timeout": "10",
            "application_name": APPLICATION_NAME,
            **CLIENT_KEEPALIVES,
            **params,
        }
        self._url = url
        self.schema = schema
        self._tables = {
            name: sql.Identifier(schema, name) for name in ("attempts", "retention_marks", "orphans_seen")
        }

    def __repr__(self) -> str:
        return f"PostgresJournal({self.redacted_url!r}, schema={self.schema!r})"

    def __str__(self) -> str:
        return f"{self.redacted_url} (schema {self.schema})"

    # -- connections ------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(autocommit=True, **self._params)
        except psycopg.Error as error:
            # libpq's message names the host and user, never the password; the URL is redacted.
            raise StagingError(f"cannot reach the journal at {self.redacted_url}: {error}") from None

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """An open connection of this process to the journal (reused), its tables created."""
        with POSTGRES_CONNECTIONS.connection(("journal", self._url), self._connect) as conn:
            if (self._url, self.schema) not in _READY:
                self._create_tables(conn)
            yield conn

    def _create_tables(self, conn: psycopg.Connection[Any]) -> None:
        """Create the schema and tables unless they exist: a role that may not create them (an
        administrator made them) never runs a CREATE, which checks privileges before existence."""
        attempts, marks, orphans = self._tables.values()
        with _READY_LOCK, conn.transaction():
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (orphans.as_string(conn),))
            if (exists.fetchone() or (False,))[0]:
                _READY.add((self._url, self.schema))
                return
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            # ``COLLATE "C"``: ``records(prefix)``'s LIKE 'prefix%' can use the primary key.
            conn.execute(
                sql.SQL(
                    'CREATE TABLE IF NOT EXISTS {} (attempt_id text COLLATE "C" PRIMARY KEY,'
                    " state text NOT NULL, revision bigint NOT NULL, record jsonb NOT NULL)"
                ).format(attempts)
            )
            conn.execute(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS attempts_open ON {} (state)"
                    " WHERE state NOT IN ('COMMITTED', 'ABORTED')"
                ).format(attempts)
            )
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (target text PRIMARY KEY,"
                    " superseded_at double precision NOT NULL)"
                ).format(marks)
            )
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, location text NOT NULL,"
                    " seen_at double precision NOT NULL, PRIMARY KEY (target, location))"
                ).format(orphans)
            )
        _READY.add((self._url, self.schema))

    def _query(self, query: sql.Composable | str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._connection() as conn:
            return conn.execute(query, params).fetchall()

    def _records(self, where: str, params: tuple[Any, ...] = ()) -> list[AttemptRecord]:
        query = sql.SQL("SELECT record::text FROM {} WHERE " + where + " ORDER BY attempt_id")
        rows = self._query(query.format(self._tables["attempts"]), params)
        return [AttemptRecord.from_json(text) for (text,) in rows]

    # -- the journal ------------------------------------------------------------------------

    def now(self) -> float:
        return float(self._query("SELECT " + _NOW)[0][0])

    @contextlib.contextmanager
    def locked(self, attempt_id: str) -> Iterator[None]:
        """Hold the attempt's advisory lock on a connection of its own for the block."""
        digest = hashlib.sha256(f"{self.schema}\0{check_attempt_id(attempt_id)}".encode()).digest()
        key = int.from_bytes(digest[:8], "big", signed=True)
        with self._connection() as conn:
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            except BaseException:
                conn.close()  # interrupted while waiting: the lock may have been granted even so
                raise
            try:
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error:
                    conn.close()  # its session, and with it the lock, ends: never lent out holding it

    def create(self, record: AttemptRecord) -> AttemptRecord:
        check_attempt_id(record.attempt_id)
        with self._connection() as conn, conn.transaction():
            (now,) = conn.execute("SELECT " + _NOW).fetchone() or (0.0,)
            stored = replace(
                record,
                created_at=now,
                updated_at=now,
                heartbeat_at=now,
                history=[*record.history, (record.state.value, now)],
            )
            inserted = conn.execute(
                sql.SQL(
                    "INSERT INTO {} (attempt_id, state, revision, record) VALUES (%s, %s, 1, %s::jsonb)"
                    " ON CONFLICT (attempt_id) DO NOTHING"
                ).format(self._tables["attempts"]),
                (record.attempt_id, record.state.value, stored.to_json()),
            ).rowcount
        if not inserted:
            raise CommitConflictError(f"attempt {record.attempt_id} is already journaled")
        record.created_at, record.updated_at, record.heartbeat_at = now, now, now
        record.history = stored.history
        return record

    def get(self, attempt_id: str) -> AttemptRecord | None:
        found = self._records("attempt_id = %s", (check_attempt_id(attempt_id),))
        return found[0] if found else None

    def transition(self, attempt_id: str, state: AttemptState, **changes: Any) -> AttemptRecord:
        """Move an attempt to ``state``: a compare-and-set on the state and revision it read."""
        attempts = self._tables["attempts"]
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                sql.SQL("SELECT record::text, revision, " + _NOW + " FROM {} WHERE attempt_id = %s").format(
                    attempts
                ),
                (check_attempt_id(attempt_id),),
            ).fetchone()
            if row is None:
                raise CommitConflictError(f"attempt {attempt_id} is not in the journal at {self}")
            text, revision, now = row
            record = AttemptRecord.from_json(text)
            check_transition(record, state)
            read_state = record.state
            for key, value in changes.items():
                setattr(record, key, value)
            record.state = state
            record.updated_at = record.heartbeat_at = now
            record.history.append((state.value, now))
            updated = conn.execute(
                sql.SQL(
                    "UPDATE {} SET state = %s, revision = revision + 1, record = %s::jsonb"
                    " WHERE attempt_id = %s AND state = %s AND revision = %s"
                ).format(attempts),
                (state.value, record.to_json(), attempt_id, read_state.value, revision),
            ).rowcount
        if not updated:
            raise CommitConflictError(
                f"attempt {attempt_id} of {record.target} changed while it became {state.value} "
                f"(another process moved it from {read_state.value}): nothing journaled"
            )
        return record

    def heartbeat(self, attempt_id: str) -> None:
        """One UPDATE of the heartbeat alone: no lock, no revision (a transition that read before
        it writes a later heartbeat anyway)."""
        with self._connection() as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET record = jsonb_set(record, '{{heartbeat_at}}', to_jsonb(" + _NOW + "))"
                    " WHERE attempt_id = %s AND state <> ALL(%s)"
                ).format(self._tables["attempts"]),
                (check_attempt_id(attempt_id), _ENDED),
            )

    def retention_mark(self, target: str) -> float | None:
        rows = self._query(
            sql.SQL("SELECT superseded_at FROM {} WHERE target = %s").format(self._tables["retention_marks"]),
            (target,),
        )
        return float(rows[0][0]) if rows else None

    def set_retention_mark(self, target: str, superseded_at: float) -> None:
        with self._connection() as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (target, superseded_at) VALUES (%s, %s)"
                    " ON CONFLICT (target) DO UPDATE SET superseded_at = EXCLUDED.superseded_at"
                ).format(self._tables["retention_marks"]),
                (target, superseded_at),
            )

    def orphans_seen(self, target: str, locations: list[str]) -> dict[str, float]:
        orphans = self._tables["orphans_seen"]
        with self._connection() as conn, conn.transaction():
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE target = %s AND location <> ALL(%s)").format(orphans),
                (target, locations),
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (target, location, seen_at)"
                    " SELECT %s, location, " + _NOW + " FROM unnest(%s::text[]) AS location"
                    " ON CONFLICT (target, location) DO NOTHING"
                ).format(orphans),
                (target, locations),
            )
            rows = conn.execute(
                sql.SQL("SELECT location, seen_at FROM {} WHERE target = %s").format(orphans), (target,)
            ).fetchall()
        return {location: float(seen_at) for location, seen_at in rows}

    def records(self, prefix: str = "") -> list[AttemptRecord]:
        pattern = re.sub(r"([\\%_])", r"\\\1", prefix) + "%"
        return self._records("attempt_id LIKE %s", (pattern,))

    def remove_ended(self, attempt_id: str) -> bool:
        """One DELETE of the record only if it ended: an open record is never removed."""
        with self._connection() as conn:
            return bool(
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE attempt_id = %s AND state = ANY(%s)").format(
                        self._tables["attempts"]
                    ),
                    (check_attempt_id(attempt_id), _ENDED),
                ).rowcount
            )

    def open_attempts(self) -> list[AttemptRecord]:
        return self._records("state <> ALL(%s)", (_ENDED,))

    def for_task(self, task: TaskRef) -> list[AttemptRecord]:
        found = self._records(
            "record->'task'->>'dag_id' = %s AND record->'task'->>'task_id' = %s"
            " AND record->'task'->>'run_id' = %s",
            (task.dag_id, task.task_id, task.run_id),
        )
        return [record for record in found if owned_by(record, task)]
