"""What the Materialized tables page reads outside Airflow: the definitions and the catalog.

Pure of Airflow. The catalog is read in one ``get_table_objects_by_name_req`` call per database
in a few chunks read in parallel, not per table, and only for the tables whose change token
moved since the api-server last read them (``catalog_cache``); ``tables_one_by_one`` is the
naive listing, one ``get_table`` per table, kept for the benchmark's comparison. Both count
their metastore calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.airflow.ui.catalog_cache import ChangeTokenCache, FileKey, change_token, settled
from airflow_provider_staged.airflow.ui.rows import DagFacts, RunFacts, TableEntry
from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.materialized.catalog_status import REFRESH_STATUS_KEY, read_state, state_path
from airflow_provider_staged.materialized.definition import DefinitionError, load_definition
from airflow_provider_staged.materialized.graph import Node, TableGraph
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB, dag_id_for
from airflow_provider_staged.materialized.workflow.scheduler import WorkflowException
from airflow_provider_staged.staging.identifiers import TableIdentifier

# path -> ((inode, mtime_ns, size), parsed entry or error): parsing 1,000 definitions takes ~1.5 s,
# stat-ing them ~10 ms, and a definition changes far less often than the page is read.
_parsed: dict[Path, tuple[FileKey, TableEntry | str]] = {}


def file_key(path: Path) -> FileKey | None:
    """The file's identity, None if it does not exist; rewrites are ``os.replace``: a new inode."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def read_entries(definitions_dir: Path) -> tuple[list[TableEntry], list[dict[str, str]]]:
    """Every definition of the folder, parsed (unchanged files from a cache); broken files as
    ``{definition, error}``."""
    entries, broken = [], []
    seen = set()
    for path in sorted(definitions_dir.glob(DEFINITION_GLOB)):
        key = file_key(path)
        if key is None:  # removed since the listing
            continue
        seen.add(path)
        cached = _parsed.get(path)
        if cached is None or cached[0] != key:
            try:
                definition = load_definition(path)
                cached = (key, TableEntry(definition.identifier, path, definition, key))
            except DefinitionError as err:
                cached = (key, str(err))
            _parsed[path] = cached
        if isinstance(cached[1], str):
            broken.append({"definition": path.name, "error": cached[1]})
        else:
            entries.append(cached[1])
    for gone in set(_parsed) - seen:
        del _parsed[gone]
    return entries, broken


@dataclass(frozen=True)
class StateFile:
    """A table's workflow state file (``catalog_status``) as one request read it."""

    state: dict[str, Any]
    key: FileKey | None  # its identity, part of the catalog cache's token; None: no file
    error: str | None = None  # why it is unreadable


# path -> (its file key, the graph node of its definition): the tables a query reads, parsed
# once per version of the file (~0.3 ms a query; a folder of 1,000 costs ~0.3 s once).
_nodes: dict[Path, tuple[FileKey, Node]] = {}


def table_graph(entries: Iterable[TableEntry]) -> TableGraph:
    """The dependency graph of ``entries`` (nodes cached per definition file version)."""
    nodes = []
    for entry in entries:
        cached = _nodes.get(entry.path)
        if cached is None or cached[0] != entry.file_key:
            cached = _nodes[entry.path] = (entry.file_key, Node.of(entry.definition))
        nodes.append(cached[1])
    for gone in set(_nodes) - {entry.path for entry in entries}:
        del _nodes[gone]
    return TableGraph(nodes)


def read_state_file(definition_path: Path) -> StateFile:
    # The key first: a rewrite between the two reads then changes the next request's token.
    key = file_key(state_path(definition_path))
    if key is None:  # most tables: their status is in the table, the file holds nothing
        return StateFile({}, None)
    try:
        return StateFile(read_state(definition_path), key)
    except WorkflowException as err:
        return StateFile({}, key, str(err))


# The api-server's table objects of every page request, whoever asks (rows are filtered after).
_catalog_cache: ChangeTokenCache[TableIdentifier, ttypes.Table] = ChangeTokenCache()


class CatalogReads:
    """Table objects of one page request, with the metastore calls and cache use counted."""

    def __init__(
        self,
        uri: str,
        connections: int = 4,
        chunk: int = 250,
        cache: ChangeTokenCache[TableIdentifier, ttypes.Table] = _catalog_cache,
    ) -> None:
        self.uri = uri
        self.cache = cache
        self.connections = connections
        self.chunk = chunk
        self.calls = 0
        self.reread = 0  # tables read from the metastore
        self.cached = 0  # tables served from the cache
        self.revalidating = 0  # of those, older than the cache's max age: re-read in the background

    def cached_tables(
        self,
        entries: Iterable[TableEntry],
        states: Mapping[TableIdentifier, StateFile],
        dags: Mapping[str, DagFacts],
        runs: Mapping[str, RunFacts],
    ) -> dict[TableIdentifier, ttypes.Table]:
        """The existing tables of ``entries``, re-reading (in :meth:`tables`' batched calls) only
        those whose change token moved or whose cached read is not settled (``catalog_cache``)."""
        tokens = {}
        for entry in entries:
            dag_id = dag_id_for(entry.identifier)
            tokens[entry.identifier] = change_token(
                self.uri, entry.file_key, states[entry.identifier].key, dags.get(dag_id), runs.get(dag_id)
            )

        def trusted(identifier: TableIdentifier, table: ttypes.Table | None) -> bool:
            dag_id = dag_id_for(identifier)
            stored = (table.parameters or {}).get(REFRESH_STATUS_KEY) if table is not None else None
            return settled(dags.get(dag_id), runs.get(dag_id), stored)

        # The background re-read goes through its own reader: it is no call of this request.
        later = CatalogReads(self.uri, self.connections, self.chunk, self.cache).tables
        result = self.cache.read(tokens, self.tables, trusted, later)
        self.reread += result.reread
        self.cached += result.cached
        self.revalidating += result.revalidating
        return result.values

    def tables(self, identifiers: Iterable[TableIdentifier]) -> dict[TableIdentifier, ttypes.Table]:
        """The existing tables among ``identifiers``: ``get_table_objects_by_name_req`` per database,
        in chunks of ``chunk`` names, up to ``connections`` chunks at once.

        The metastore builds one call's tables one after another in one worker thread; chunks
        in parallel use several (1,000 tables on the embedded Derby metastore: about half the
        time of one call).
        """
        by_database: dict[str, list[str]] = defaultdict(list)
        for identifier in identifiers:
            by_database[identifier.database].append(identifier.table)
        jobs = [(database, names[i : i + self.chunk])
                for database, names in by_database.items() for i in range(0, len(names), self.chunk)]
        self.calls += len(jobs)
        found: dict[TableIdentifier, ttypes.Table] = {}
        if not jobs:
            return found
        with ThreadPoolExecutor(min(self.connections, len(jobs))) as pool:
            for tables in pool.map(self._fetch, jobs):
                found.update({TableIdentifier(t.dbName, t.tableName): t for t in tables})
        return found

    def _fetch(self, job: tuple[str, list[str]]) -> list[ttypes.Table]:
        database, names = job
        with MetastoreClient(self.uri) as client:  # a Thrift client serves one thread
            try:
                return client.tables_named(database, names)
            except ttypes.UnknownDBException:
                return []  # no table of this database was refreshed yet

    def tables_one_by_one(
        self, identifiers: Iterable[TableIdentifier]
    ) -> dict[TableIdentifier, ttypes.Table]:
        """The naive listing (one ``get_table`` per table), for comparison only."""
        found = {}
        with MetastoreClient(self.uri) as client:
            for identifier in identifiers:
                self.calls += 1
                table = client.get_table(identifier.database, identifier.table)
                if table is not None:
                    found[identifier] = table
        return found
