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


def read_entries(definitions_dir: Path) -> tuple[list[TableEntry], list[dict[str, str]]]:
    """Every definition of the folder, parsed; broken files as ``{definition, error}``."""
    entries, broken = [], []
    for path in sorted(definitions_dir.glob(DEFINITION_GLOB)):
        try:
            definition = load_definition(path)
        except DefinitionError as err:
            broken.append({"definition": path.name, "error": str(err)})
            continue
        entries.append(TableEntry(definition.identifier, path, definition))
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
