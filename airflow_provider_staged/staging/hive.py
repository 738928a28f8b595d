"""Staged tables on a Hive Metastore: each attempt is a version directory; commit is one call.

Layout: ``<table root>/_v=<attempt id>/`` holds an attempt's Parquet files and manifest.
The metastore points the (EXTERNAL) table at exactly one version; commit creates the table
there or alters it to the new version; abort deletes the attempt's directory; superseded
versions are deleted by the retention policy after later commits.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.metastore.client import (
    AlreadyExistsException,
    MetastoreClient,
)
from airflow_provider_staged.metastore.tables import current_location, new_table, repointed_table
from airflow_provider_staged.staging import storage_paths
from airflow_provider_staged.staging.api import StagingContext, StagingPurpose, SupportsStaging
from airflow_provider_staged.staging.attempts import JournaledStagedTable
from airflow_provider_staged.staging.errors import TableAlreadyExistsError, TableNotFoundError
from airflow_provider_staged.staging.journal import (
    AttemptJournal,
    AttemptRecord,
    AttemptState,
    TaskRef,
)
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.versions import (
    RetentionPolicy,
    parse_version_dir,
    version_dir_name,
)
from airflow_provider_staged.storage import delete_dir, list_dir, normalize_location

log = logging.getLogger(__name__)


class HiveStagedTable(JournaledStagedTable):
    """An atomic CTAS/RTAS target in a Hive Metastore (Spark Parquet data-source table)."""

    kind = "hive"

    def __init__(
        self,
        identifier: TableIdentifier,
        purpose: StagingPurpose,
        journal: AttemptJournal,
        metastore_uri: str,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
        attempt_id: str | None = None,
    ) -> None:
        super().__init__(identifier.name, purpose, journal, task, attempt_id)
        self.identifier = identifier
        self.metastore_uri = metastore_uri
        self.retention = retention or RetentionPolicy()

    def _client(self) -> MetastoreClient:
        return MetastoreClient(self.metastore_uri)

    def target_exists(self) -> bool:
        with self._client() as client:
            client.database_location(self.identifier.database)
            return client.get_table(self.identifier.database, self.identifier.table) is not None

    def catalog_ref(self) -> dict[str, Any]:
        return {"metastore_uri": self.metastore_uri}

    def write_spec(self) -> dict[str, Any]:
        return {"format": "parquet", "location": self.location}

    def table_root(self, client: MetastoreClient) -> str:
        """The directory that holds this table's version directories."""
        database_dir = normalize_location(client.database_location(self.identifier.database))
        table = client.get_table(self.identifier.database, self.identifier.table)
        if table is not None:
            location = normalize_location(current_location(table))
            parent, _, leaf = location.rpartition("/")
            if parse_version_dir(leaf) is not None:
                return parent
            if location == storage_paths.default_root(database_dir, self.identifier.table):
                # A table we did not make: never write inside the directory it reads.
                return storage_paths.side_root(database_dir, self.identifier.table)
        return storage_paths.default_root(database_dir, self.identifier.table)

    def staging_location(self) -> str:
        with self._client() as client:
            return f"{self.table_root(client)}/{version_dir_name(self.attempt_id)}"

    def publish(self, record: AttemptRecord) -> str | None:
        manifest = Manifest.from_dict(record.manifest or {})
        with self._client() as client:
            current = client.get_table(self.identifier.database, self.identifier.table)
            if current is None:
                if not self.purpose.creates:
                    raise TableNotFoundError(f"table {self.target} was dropped before the commit")
                try:
                    client.create_table(new_table(self.identifier, manifest, self.attempt_id))
                except AlreadyExistsException:
                    raise TableAlreadyExistsError(
                        f"table {self.target} was created by someone else before this commit"
                    ) from None
                return None
            if not self.purpose.replaces:
                raise TableAlreadyExistsError(
                    f"table {self.target} was created by someone else before this commit"
                )
            client.alter_table(repointed_table(current, manifest, self.attempt_id))
            return normalize_location(current_location(current))

    def is_published(self, record: AttemptRecord) -> bool:
        with self._client() as client:
            table = client.get_table(self.identifier.database, self.identifier.table)
        if table is None:
            return False
        return normalize_location(current_location(table)) == normalize_location(record.location)

    def discard(self, record: AttemptRecord) -> None:
        delete_dir(record.location)

    def after_commit(self, record: AttemptRecord) -> None:
        sweep_versions(self, self.retention)


def sweep_versions(
    staged: HiveStagedTable, retention: RetentionPolicy, now: float | None = None
) -> list[str]:
    """Delete superseded and orphaned version directories of ``staged``'s table."""
    now = time.time() if now is None else now
    with staged._client() as client:
        table = client.get_table(staged.identifier.database, staged.identifier.table)
        if table is None:
            return []
        live = {normalize_location(current_location(table))}
        if table.partitionKeys:
            live |= {_version_dir(p.sd.location) for p in client.partitions(table.dbName, table.tableName)}
        root = staged.table_root(client)
    records = [r for r in staged.journal.records() if r.kind == "hive" and r.target == staged.target]
    in_flight = {normalize_location(r.location) for r in records if not r.state.ended}
    committed = {normalize_location(r.location) for r in records if r.state is AttemptState.COMMITTED}
    superseded_at = {
        normalize_location(r.superseded_location): r.updated_at
        for r in records
        if r.state is AttemptState.COMMITTED and r.superseded_location
    }
    candidates, orphans = {}, []
    for entry in list_dir(root):
        if not entry.is_dir or parse_version_dir(entry.name) is None:
            continue
        if entry.location in live or entry.location in in_flight:
            continue
        if entry.location in committed:
            candidates[entry.location] = superseded_at.get(entry.location, entry.mtime)
        else:
            orphans.append(entry.location)  # aborted, or never journaled: never readable
    doomed = orphans + retention.expired(candidates, now)
    for location in doomed:
        log.info("retention: deleting superseded version %s of %s", location, staged.target)
        delete_dir(location)
    return doomed


def _version_dir(location: str) -> str:
    """The version directory that holds a (partition) location."""
    parts = normalize_location(location).split("/")
    for index, part in enumerate(parts):
        if parse_version_dir(part) is not None:
            return "/".join(parts[: index + 1])
    return normalize_location(location)


class HiveStagingSink(SupportsStaging):
    """``SupportsStaging`` for a Hive Metastore table (FLIP-305's HiveTableSink)."""

    def __init__(
        self,
        identifier: TableIdentifier,
        journal: AttemptJournal,
        metastore_uri: str,
        retention: RetentionPolicy | None = None,
        task: TaskRef | None = None,
    ) -> None:
        self.identifier = identifier
        self.journal = journal
        self.metastore_uri = metastore_uri
        self.retention = retention
        self.task = task

    def apply_staging(self, context: StagingContext) -> HiveStagedTable:
        return HiveStagedTable(
            self.identifier,
            context.purpose,
            self.journal,
            self.metastore_uri,
            self.retention,
            self.task,
        )
