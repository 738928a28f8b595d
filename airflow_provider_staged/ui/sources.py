"""What the Materialized tables page reads outside Airflow: the definitions and the catalog.

Pure of Airflow. The catalog is read in one ``get_table_objects_by_name`` call per database
(the metastore answers 1,000 tables in one round trip); ``tables_one_by_one`` is the naive
listing, one ``get_table`` per table, kept for the benchmark's comparison. Both count their
metastore calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
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
    """Table objects of one page request, read over one open metastore connection."""

    def __init__(self, client: MetastoreClient) -> None:
        self.client = client
        self.calls = 0

    def tables(self, identifiers: Iterable[TableIdentifier]) -> dict[TableIdentifier, ttypes.Table]:
        """The existing tables among ``identifiers``: one metastore call per database."""
        by_database: dict[str, list[str]] = defaultdict(list)
        for identifier in identifiers:
            by_database[identifier.database].append(identifier.table)
        found: dict[TableIdentifier, ttypes.Table] = {}
        for database, names in by_database.items():
            self.calls += 1
            try:
                tables = self.client.thrift.get_table_objects_by_name(database, names)
            except ttypes.UnknownDBException:
                continue  # no table of this database was refreshed yet
            found.update({TableIdentifier(t.dbName, t.tableName): t for t in tables})
        return found

    def tables_one_by_one(
        self, identifiers: Iterable[TableIdentifier]
    ) -> dict[TableIdentifier, ttypes.Table]:
        """The naive listing (one ``get_table`` per table), for comparison only."""
        found = {}
        for identifier in identifiers:
            self.calls += 1
            table = self.client.get_table(identifier.database, identifier.table)
            if table is not None:
                found[identifier] = table
        return found
