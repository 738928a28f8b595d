"""What the Materialized tables page reads outside Airflow: the definitions and the catalog.

Pure of Airflow. The catalog is read in one ``get_table_objects_by_name`` call per database
in a few chunks read in parallel, not per table; ``tables_one_by_one`` is the naive listing,
one ``get_table`` per table, kept for the benchmark's comparison. Both count their metastore
calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.materialized.definition import DefinitionError, load_definition
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB
from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.ui.rows import TableEntry

# path -> ((inode, mtime_ns, size), parsed entry or error): parsing 1,000 definitions takes ~1.5 s,
# stat-ing them ~10 ms, and a definition changes far less often than the page is read.
_parsed: dict[Path, tuple[tuple[int, int, int], TableEntry | str]] = {}


def read_entries(definitions_dir: Path) -> tuple[list[TableEntry], list[dict[str, str]]]:
    """Every definition of the folder, parsed (unchanged files from a cache); broken files as
    ``{definition, error}``."""
    entries, broken = [], []
    seen = set()
    for path in sorted(definitions_dir.glob(DEFINITION_GLOB)):
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed since the listing
            continue
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # rewrites are os.replace: new inode
        seen.add(path)
        cached = _parsed.get(path)
        if cached is None or cached[0] != key:
            try:
                definition = load_definition(path)
                cached = (key, TableEntry(definition.identifier, path, definition))
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


class CatalogReads:
    """Table objects of one page request, with the metastore calls counted."""

    def __init__(self, uri: str, connections: int = 4, chunk: int = 250) -> None:
        self.uri = uri
        self.connections = connections
        self.chunk = chunk
        self.calls = 0

    def tables(self, identifiers: Iterable[TableIdentifier]) -> dict[TableIdentifier, ttypes.Table]:
        """The existing tables among ``identifiers``: ``get_table_objects_by_name`` per database,
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
                return client.thrift.get_table_objects_by_name(database, names)
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
