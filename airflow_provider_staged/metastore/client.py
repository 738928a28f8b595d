"""A small, typed wrapper around ``hmsclient``'s Thrift client for the calls we need."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlparse

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from airflow_provider_staged.metastore.locks import table_lock
from airflow_provider_staged.staging.errors import StagingError, TableNotFoundError
from airflow_provider_staged.storage import normalize_location

NoSuchObjectException = ttypes.NoSuchObjectException
# Without it the metastore lists every file of the new location on each commit (O(files));
# the manifest already knows rows and bytes.
_NO_STATS = ttypes.EnvironmentContext(properties={"DO_NOT_UPDATE_STATS": "true"})
AlreadyExistsException = ttypes.AlreadyExistsException


def parse_metastore_uri(uri: str) -> tuple[str, int]:
    parsed = urlparse(uri)
    if parsed.scheme != "thrift" or not parsed.hostname or not parsed.port:
        raise ValueError(f"invalid metastore URI {uri!r}: expected thrift://host:port")
    return parsed.hostname, parsed.port


class MetastoreClient:
    """One Thrift connection to a metastore; use as a context manager or ``connect()``."""

    def __init__(self, uri: str, timeout_ms: int = 30_000) -> None:
        self.uri = uri
        host, port = parse_metastore_uri(uri)
        socket = TSocket.TSocket(host, port)
        socket.setTimeout(timeout_ms)
        protocol = TBinaryProtocol.TBinaryProtocol(TTransport.TBufferedTransport(socket))
        self._client = hmsclient.HMSClient(iprot=protocol, oprot=protocol)

    def __enter__(self) -> MetastoreClient:
        try:
            self._client.open()
        except Exception as err:
            raise StagingError(f"cannot reach the Hive Metastore at {self.uri}: {err}") from err
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._client.close()

    @property
    def thrift(self) -> hmsclient.HMSClient:
        return self._client

    def database_location(self, database: str) -> str:
        try:
            return self._client.get_database(database).locationUri
        except NoSuchObjectException:
            raise TableNotFoundError(f"database {database!r} does not exist") from None

    def ensure_database(self, name: str, warehouse: str) -> bool:
        """Create database ``name`` at ``<warehouse>/<name>.db`` unless it exists."""
        try:
            self._client.get_database(name)
            return False
        except NoSuchObjectException:
            location = f"{normalize_location(warehouse)}/{name}.db"
            try:
                self._client.create_database(ttypes.Database(name=name, locationUri=location, parameters={}))
            except AlreadyExistsException:
                return False
            return True

    def get_table(self, database: str, table: str) -> ttypes.Table | None:
        try:
            return self._client.get_table(database, table)
        except NoSuchObjectException:
            return None

    def create_table(self, table: ttypes.Table) -> None:
        self._client.create_table_with_environment_context(table, _NO_STATS)

    def alter_table(self, table: ttypes.Table) -> None:
        self._client.alter_table_with_environment_context(table.dbName, table.tableName, table, _NO_STATS)

    def partitions(self, database: str, table: str) -> list[ttypes.Partition]:
        return self._client.get_partitions(database, table, -1)

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
        return self._client.get_partitions_ps(database, table, values, -1)

    def add_partitions(self, partitions: list[ttypes.Partition]) -> None:
        if partitions:
            self._client.add_partitions(partitions)

    def alter_partitions(self, database: str, table: str, parts: list[ttypes.Partition]) -> None:
        """Change all ``parts`` in one metastore transaction (all or none)."""
        if parts:
            self._client.alter_partitions_with_environment_context(database, table, parts, _NO_STATS)

    def drop_partition(self, database: str, table: str, values: list[str]) -> None:
        """Unregister a partition; its files stay (they are deleted by whoever owns them)."""
        with contextlib.suppress(NoSuchObjectException):
            self._client.drop_partition(database, table, values, False)

    @contextlib.contextmanager
    def locked(self, database: str, table: str) -> Iterator[MetastoreClient]:
        """Hold the table's metastore lock: every read-modify-write of its metadata does."""
        with table_lock(self, database, table):
            yield self
