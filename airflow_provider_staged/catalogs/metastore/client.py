"""A small, typed wrapper around ``hmsclient``'s Thrift client for the calls we need.

Connections are reused within a process (``idle_connections``): a ``with MetastoreClient(uri)``
block borrows an open connection that still answers, or opens one, and gives it back unless the
block raised (then its state is unknown: a reply may be half read). The metastore builds each
connection's server-side state (object store, transaction handler) on its first calls, so a
warm connection makes a commit's ``lock`` and ``get_table`` several times cheaper.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from airflow_provider_staged.catalogs.idle_connections import IdleConnections
from airflow_provider_staged.catalogs.metastore.locks import AGENT, release_locks, table_lock
from airflow_provider_staged.catalogs.metastore.tables import without_hive_columns
from airflow_provider_staged.staging.errors import CatalogConflictError, StagingError, TableNotFoundError
from airflow_provider_staged.staging.partition_paths import matches
from airflow_provider_staged.storage.files import normalize_location

NoSuchObjectException = ttypes.NoSuchObjectException
# Without it the metastore lists every file of the new location on each commit (O(files));
# the manifest already knows rows and bytes.
_NO_STATS = ttypes.EnvironmentContext(properties={"DO_NOT_UPDATE_STATS": "true"})
AlreadyExistsException = ttypes.AlreadyExistsException
# A fresh value on every write of ours: alter_table sends the value it read as the expected one.
REVISION_KEY = "staged.revision"
_MODIFIED = "The table has been modified"
# HiveAlterHandler's refusal of new column types that the old ones do not convert to implicitly.
_INCOMPATIBLE_COLUMNS = "have types incompatible with the existing columns"
_STABLE_READS = 20
# Per metastore URI, whether its alter_table enforces an expected parameter (probed once).
_ENFORCES_EXPECTED: dict[str, bool] = {}
# The same for a partition switch's expectations (local/java/SnapshotReadsStore.java).
_ENFORCES_PARTITION_EXPECTED: dict[str, bool] = {}
_PARTITIONS_CHANGED = "changed since this writer read them"
_PARTITION_EXPECTATIONS_ENFORCED = "partition switch expectations are enforced"


@dataclasses.dataclass(frozen=True)
class PartitionsAsRead:
    """What a lock-free partition switch expects to find, as its writer read it: the table's
    revision, and every partition inside ``spec`` (column -> value; empty: all) by name
    (``col=value/...``, escaped as in paths) with its location. The embedded metastore's store
    checks all of it, and that no writer holds the table's lock, in the switch's transaction."""

    revision: str
    spec: Mapping[str, str]
    locations: Mapping[str, str]

    def properties(self) -> dict[str, str]:
        return {
            **_NO_STATS.properties,
            "staged.expect": "switch",
            "staged.expect.revision": self.revision,
            **{f"staged.expect.spec.{column.lower()}": value for column, value in self.spec.items()},
            **{f"staged.expect.partition.{name}": location for name, location in self.locations.items()},
        }


def _expecting(revision: str) -> ttypes.EnvironmentContext:
    """HIVE-26882 (Hive 2.3.10, 4.0): the alter lands only while the table's parameter
    ``REVISION_KEY`` still holds ``revision``, checked in the metastore's own transaction."""
    return ttypes.EnvironmentContext(properties={
        **_NO_STATS.properties,
        "expected_parameter_key": REVISION_KEY,
        "expected_parameter_value": revision,
    })


def enforces_compare_and_set(uri: str) -> bool:
    """Whether the metastore at ``uri`` was found (in this process) to check an alter's expected
    revision; False while not known."""
    return _ENFORCES_EXPECTED.get(uri, False)


def parse_metastore_uri(uri: str) -> tuple[str, int]:
    """``(host, port)`` of ``thrift://host:port``; a ValueError naming ``uri`` otherwise (also for a
    port of letters, non-ASCII digits or beyond 65535: urlparse's own error does not name the URI)."""
    bad = ValueError(f"invalid metastore URI {uri!r}: expected thrift://host:port, port 1..65535")
    try:
        parsed = urlparse(uri)
        port = parsed.port
    except ValueError as err:
        raise bad from err
    port_text = parsed.netloc.rpartition(":")[2]
    if parsed.scheme != "thrift" or not parsed.hostname or not port or not port_text.isascii():
        raise bad
    return parsed.hostname, port


def parse_metastore_uris(uris: str) -> list[tuple[str, int]]:
    """``(host, port)`` of each of ``thrift://h1:p1,thrift://h2:p2`` (Hive's
    ``hive.metastore.uris``: several servers of one metastore, tried in order)."""
    return [parse_metastore_uri(uri.strip()) for uri in uris.split(",")]


class ThriftConnections(IdleConnections[hmsclient.HMSClient]):
    """Open metastore connections of this process, keyed by (URI, timeout)."""

    def alive(self, conn: hmsclient.HMSClient) -> bool:
        try:
            conn.getStatus()  # fb303: answered by the server thread itself, no database work
            return True
        except Exception:
            return False

    def reusable(self, conn: hmsclient.HMSClient, failed: bool) -> bool:
        return not failed

    def close(self, conn: hmsclient.HMSClient) -> None:
        with contextlib.suppress(Exception):
            conn.close()


METASTORE_CONNECTIONS = ThriftConnections()
METASTORE_CONNECTIONS.register()


def _connect(uris: str, timeout_ms: int) -> hmsclient.HMSClient:
    """A connection to the first of ``uris`` that answers (Hive's own client fails over so)."""
    failures = []
    for host, port in parse_metastore_uris(uris):
        socket = TSocket.TSocket(host, port)
        socket.setTimeout(timeout_ms)
        # Accelerated: Thrift's C codec (de)serializes tables and partitions ~10x faster.
        protocol = TBinaryProtocol.TBinaryProtocolAccelerated(TTransport.TBufferedTransport(socket))
        client = hmsclient.HMSClient(iprot=protocol, oprot=protocol)
        try:
            client.open()
        except Exception as err:
            failures.append(f"{err}")
            continue
        return client
    raise StagingError(f"cannot reach the Hive Metastore at {uris}: {'; '.join(failures)}")


class MetastoreClient:
    """A metastore connection for one ``with`` block (borrowed from this process's idle ones)."""

    def __init__(self, uri: str, timeout_ms: int = 30_000, lock_owner: str = AGENT) -> None:
        parse_metastore_uris(uri)  # a bad URI fails here, before any block runs
        self.uri = uri
        self.timeout_ms = timeout_ms
        # The agent info of the table locks this client takes (``locks.lock_owner``).
        self.lock_owner = lock_owner
        self._borrowed: contextlib.AbstractContextManager[hmsclient.HMSClient] | None = None
        self._client: hmsclient.HMSClient | None = None
        # (database, table) -> the revision this block last read (None: the table has none).
        self._revisions: dict[tuple[str, str], str | None] = {}
        self._locked: set[tuple[str, str]] = set()

    def fresh(self) -> MetastoreClient:
        """A client of its own for the same metastore (a lock's heartbeat thread, a retried unlock)."""
        return MetastoreClient(self.uri, self.timeout_ms, self.lock_owner)

    def __enter__(self) -> MetastoreClient:
        borrowed = METASTORE_CONNECTIONS.connection(
            (self.uri, self.timeout_ms), lambda: _connect(self.uri, self.timeout_ms)
        )
        self._client = borrowed.__enter__()
        self._borrowed = borrowed
        return self

    def __exit__(self, *exc: Any) -> None:
        borrowed, self._borrowed, self._client = self._borrowed, None, None
        if borrowed is not None:
            borrowed.__exit__(*exc)

    @property
    def thrift(self) -> hmsclient.HMSClient:
        if self._client is None:
            raise RuntimeError("MetastoreClient used outside its with block")
        return self._client

    def database_location(self, database: str) -> str:
        try:
            return self.thrift.get_database(database).locationUri
        except NoSuchObjectException:
            raise TableNotFoundError(f"database {database!r} does not exist") from None

    def ensure_database(self, name: str, warehouse: str) -> bool:
        """Create database ``name`` at ``<warehouse>/<name>.db`` unless it exists."""
        try:
            self.thrift.get_database(name)
            return False
        except NoSuchObjectException:
            location = f"{normalize_location(warehouse)}/{name}.db"
            try:
                self.thrift.create_database(ttypes.Database(name=name, locationUri=location, parameters={}))
            except AlreadyExistsException:
                return False
            return True

    def get_table(self, database: str, table: str) -> ttypes.Table | None:
        # The request forms (Hive 2.3 has them): Hive 4 dropped get_table and
        # get_table_objects_by_name.
        try:
            return self.thrift.get_table_req(ttypes.GetTableRequest(dbName=database, tblName=table)).table
        except NoSuchObjectException:
            return None

    def tables_named(self, database: str, names: list[str]) -> list[ttypes.Table]:
        """The tables of ``database`` among ``names``, in one call (missing ones left out)."""
        request = ttypes.GetTablesRequest(dbName=database, tblNames=names)
        return self.thrift.get_table_objects_by_name_req(request).tables

    def read_for_update(self, database: str, table: str) -> ttypes.Table | None:
        """The table as one writer left it, for a read-modify-write (``alter_table``).

        The metastore reads a table in several statements, each seeing what is committed at
        its moment (and Derby's read-committed scan of the parameters may meet a writer's
        delete-and-insert halfway): one read can join the location of one commit to the
        parameters, revision included, of the next. Two reads in a row that agree are one
        writer's state: every writer of ours leaves a new revision."""
        previous = self.get_table(database, table)
        for _ in range(_STABLE_READS):
            current = self.get_table(database, table)
            if current == previous:
                self._revisions[_key(database, table)] = (
                    None if current is None else (current.parameters or {}).get(REVISION_KEY)
                )
                return current
            previous = current
        raise CatalogConflictError(f"{database}.{table} changed on each of {_STABLE_READS} reads in a row")

    def create_table(self, table: ttypes.Table) -> None:
        table.parameters = {**(table.parameters or {}), REVISION_KEY: uuid.uuid4().hex}
        self.thrift.create_table_with_environment_context(table, _NO_STATS)

    def alter_table(self, table: ttypes.Table) -> None:
        """Write ``table`` over the version of it that this block read (``read_for_update``).

        A compare-and-set on the revision read: when another writer came between (or dropped the
        table), the metastore refuses it and this raises :class:`CatalogConflictError` (nothing
        changed). A table that has no revision yet (made by someone else) gets one, under the
        table's lock. Column types that the metastore refuses to change (a stock Hive) are
        switched with the schema in Spark's parameters only (``tables.without_hive_columns``).
        """
        key = _key(table.dbName, table.tableName)
        if key not in self._revisions:
            raise StagingError(
                f"alter_table of {table.dbName}.{table.tableName} without read_for_update first"
            )
        expected = self._revisions[key]
        if expected is None and key not in self._locked:
            self._add_revision(table.dbName, table.tableName)
        revision = uuid.uuid4().hex
        table.parameters = {**(table.parameters or {}), REVISION_KEY: revision}
        context = _NO_STATS if expected is None else _expecting(expected)
        database, name = table.dbName, table.tableName
        with self._dropped_is_conflict(database, name):
            try:
                try:
                    self.thrift.alter_table_with_environment_context(database, name, table, context)
                except ttypes.InvalidOperationException as err:
                    if _INCOMPATIBLE_COLUMNS not in (err.message or ""):
                        raise
                    # Refused whole, nothing changed: the switch is still this one call, in the
                    # form such a metastore takes.
                    switch = without_hive_columns(table)
                    self.thrift.alter_table_with_environment_context(database, name, switch, context)
            except ttypes.MetaException as err:
                if _MODIFIED in (err.message or ""):
                    message = f"{database}.{name} changed after this writer read it"
                    raise CatalogConflictError(message) from None
                raise
        self._revisions[key] = revision

    def _add_revision(self, database: str, table: str) -> None:
        """Give a table without a revision one, under its lock; then the caller reads it again."""
        with self.locked(database, table):
            current = self.read_for_update(database, table)
            if current is not None and self._revisions[_key(database, table)] is None:
                self.alter_table(current)
        raise CatalogConflictError(f"{database}.{table} had no revision: it has one now")

    def probe_compare_and_set(self, table: ttypes.Table) -> bool:
        """Whether this metastore enforces an alter's expected revision; asked once per process.

        The probe is an alter that no Hive version performs: one that checks the expected
        parameter refuses it first (the new value is missing), an older one for the changed
        partition keys. A view skips that check, so a view is never probed."""
        known = _ENFORCES_EXPECTED.get(self.uri)
        if known is not None or table.tableType == "VIRTUAL_VIEW":
            return bool(known)
        probe = copy.deepcopy(table)
        probe.parameters = {k: v for k, v in (probe.parameters or {}).items() if k != REVISION_KEY}
        probe.partitionKeys = [*(probe.partitionKeys or []), ttypes.FieldSchema(name="_probe", type="string")]
        try:
            self.thrift.alter_table_with_environment_context(
                table.dbName, table.tableName, probe, _expecting("probe")
            )
            known = False  # no version lands it; whatever answered, it is not to be trusted
        except ttypes.MetaException as err:
            known = "New value for expected key" in (err.message or "")
        except ttypes.InvalidOperationException:
            known = False
        _ENFORCES_EXPECTED[self.uri] = known
        return known

    def probe_partition_compare_and_set(self) -> bool:
        """Whether this metastore enforces a partition switch's expectations; asked once per
        process. The probe names no table: a metastore that does not answer it fails the call."""
        known = _ENFORCES_PARTITION_EXPECTED.get(self.uri)
        if known is not None:
            return known
        table = f"staged_probe_{uuid.uuid4().hex}"
        probe = ttypes.Partition(values=["probe"], dbName="default", tableName=table)
        context = ttypes.EnvironmentContext(properties={"staged.expect": "probe"})
        try:
            self.thrift.alter_partitions_with_environment_context("default", table, [probe], context)
            known = False  # nothing lands on a table that does not exist; not to be trusted
        except ttypes.MetaException as err:
            known = _PARTITION_EXPECTATIONS_ENFORCED in (err.message or "")
        except (ttypes.InvalidOperationException, ttypes.InvalidObjectException):
            known = False
        _ENFORCES_PARTITION_EXPECTED[self.uri] = known
        return known

    def switch_partitions(
        self, database: str, table: str, parts: list[ttypes.Partition], expected: PartitionsAsRead
    ) -> None:
        """``alter_partitions`` of ``parts`` in one metastore transaction, landing only while the
        table is as ``expected`` (needs :meth:`probe_partition_compare_and_set`): else
        :class:`CatalogConflictError`, and nothing changed. Takes no lock."""
        context = ttypes.EnvironmentContext(properties=expected.properties())
        try:
            self.thrift.alter_partitions_with_environment_context(database, table, parts, context)
        except ttypes.MetaException as err:
            if _PARTITIONS_CHANGED in (err.message or ""):
                raise CatalogConflictError(err.message) from None
            raise

    def partitions(self, database: str, table: str) -> list[ttypes.Partition]:
        with self._dropped_is_conflict(database, table):
            return self.thrift.get_partitions(database, table, -1)

    def partitions_matching(
        self, database: str, table: str, columns: list[str], spec: dict[str, str]
    ) -> list[ttypes.Partition]:
        """The partitions inside ``spec`` (column -> value for some of ``columns``), read by the
        metastore's own filter: a one-partition refresh reads one partition, not the table's."""
        if not spec:
            return self.partitions(database, table)
        values = [spec.get(column, "") for column in columns]
        while values and values[-1] == "":
            values.pop()
        with self._dropped_is_conflict(database, table):
            found = self.thrift.get_partitions_ps(database, table, values, -1)
        # Hive matches the escaped name as a regular expression: a '.' in a value matches any
        # character ('a.b' also found 'axb', 'a(b' and 'a_b' on Hive 2.3), so keep the spec's own.
        return [part for part in found if matches(part.values, columns, spec)]

    def partitions_named(self, database: str, table: str, names: list[str]) -> list[ttypes.Partition]:
        """The partitions of ``names`` (``col=value/...``, escaped as in their paths) that exist."""
        if not names:
            return []
        with self._dropped_is_conflict(database, table):
            return self.thrift.get_partitions_by_names(database, table, names)

    def add_partitions(self, partitions: list[ttypes.Partition]) -> None:
        if partitions:
            with self._dropped_is_conflict(partitions[0].dbName, partitions[0].tableName):
                self.thrift.add_partitions(partitions)

    def alter_partitions(self, database: str, table: str, parts: list[ttypes.Partition]) -> None:
        """Change all ``parts`` in one metastore transaction (all or none)."""
        if parts:
            with self._dropped_is_conflict(database, table):
                self.thrift.alter_partitions_with_environment_context(database, table, parts, _NO_STATS)

    @contextlib.contextmanager
    def _dropped_is_conflict(self, database: str, table: str) -> Iterator[None]:
        """A call of a writer whose table was dropped after its ``read_for_update``
        (Spark's DROP TABLE takes no metastore lock) is refused, each call with its own exception
        and message: it is a lost compare-and-set, and the writer reads again. Only the
        metastore's answers count; a transport error leaves the outcome unknown and is raised."""
        try:
            yield
        except (NoSuchObjectException, ttypes.InvalidObjectException, ttypes.InvalidOperationException,
                ttypes.MetaException):
            if _key(database, table) in self._revisions and self.get_table(database, table) is None:
                message = f"{database}.{table} was dropped after this writer read it"
                raise CatalogConflictError(message) from None
            raise

    def drop_partitions(self, database: str, table: str, names: list[str]) -> None:
        """Unregister the partitions ``names`` (``col=value/...``) in ONE metastore call (all or
        none); those already gone are skipped, their files stay."""
        if names:
            with self._dropped_is_conflict(database, table):
                self.thrift.drop_partitions_req(ttypes.DropPartitionsRequest(
                    dbName=database, tblName=table, parts=ttypes.RequestPartsSpec(names=names),
                    deleteData=False, ifExists=True, needResult=False,
                ))

    @contextlib.contextmanager
    def locked(self, database: str, table: str) -> Iterator[MetastoreClient]:
        """Hold the table's metastore lock: every read-modify-write of several calls does."""
        key = _key(database, table)
        with table_lock(self, database, table, owner=self.lock_owner):
            self._locked.add(key)
            try:
                yield self
            finally:
                self._locked.discard(key)

    def release_locks(self, database: str, table: str) -> list[int]:
        """Release the locks of the table that this client's owner took (its process is gone or
        out of its locked sections): a stock metastore never expires them."""
        return release_locks(self, database, table, self.lock_owner)


def _key(database: str, table: str) -> tuple[str, str]:
    return database.lower(), table.lower()
