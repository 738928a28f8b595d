"""The recovery matrix: every kind x crash step x task outcome, settled by ``reconcile``.

Each case starts from a table with known OLD content (built through the staging API), crashes
an attempt that replaces (refreshes) it at one exact step — injected in-process, or a real
SIGKILL of a process that runs the build — then reconciles with the task succeeded, failed, or
unknown with the attempt TTL elapsed. Afterwards the table reads exactly OLD or exactly NEW (as
a new reader, and in the catalog), its neighbours are unchanged, nothing of the attempt is left
behind, and the journal has no open attempt.

The built-in sinks' kinds are in it (``hive_append``, ``hive_overwrite``, ``jdbc_append``, and
``sink``, a staged build into a sink): their
"write" is the sink's own writers over two tasks (the second fails for the mid-write step), the
committer and the manifest of the global committer, as the runtime does before the commit.

The lifecycle kinds are in it too: a partition expiry (``hive_expire``), a rollback of a whole
table and one of some partitions (``hive_rollback``). They write no data, so they have no
mid-write step; their "write" is the manifest the commit uses.

Every case runs on the embedded metastore; the Hive cases run on each stock metastore too
(``METASTORE_FIXTURES``: Hive's defaults, none of the project's Java), each kind and step once
with the task outcomes taking turns, and so do the real SIGKILLs.
"""

from __future__ import annotations

import calendar
import copy
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest
from hmsclient.genthrift.hive_metastore import ttypes
from psycopg import sql

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import current_location, tracks_partitions
from airflow_provider_staged.catalogs.postgres_connections import postgres_connection
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.sink.api import Sink, WriterContext, commit_until_done
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.postgres import PostgresSink
from airflow_provider_staged.sink.staged import COMMITTABLES_FILE, SinkStagedTable
from airflow_provider_staged.sink.tasks import new_write_id, save_committables, save_write_context, write_task
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable, abort_attempt
from airflow_provider_staged.staging.errors import CatalogConflictError
from airflow_provider_staged.staging.expiry import (
    HivePartitionExpiry,
    delete_dropped_files,
    plan_expiry,
    table_ttl,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import EMPTY_DIR_NAME, HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_sink import (
    STAGING_DIR,
    HiveAppendStagedTable,
    HiveOverwriteStagedTable,
    HiveSinkCommit,
)
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.kinds.jdbc_sink import JdbcAppendStagedTable, staged_tables
from airflow_provider_staged.staging.kinds.jdbc_table import (
    JdbcStagedTable,
    JdbcTarget,
    password_env_var,
)
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.partition_paths import partition_path
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.rollback import HiveRollback
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage import files
from airflow_provider_staged.storage.files import FileEntry, local_path, normalize_location
from tests.fixtures.metastore import METASTORE_FIXTURES, new_database, spark_table
from tests.fixtures.s3 import listed_entries
from tests.integration import recovery_helpers as rh

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
TTL = 60.0
KINDS = [
    "hive_table", "hive_partitions", "hive_partitions_discovered", "hive_partitions_continuous", "jdbc_table"
]
# The same whole-table and partition kinds with their tables on the S3 server (``<kind>_s3_harness``).
S3_KINDS = ["hive_table_s3", "hive_partitions_s3"]
# The sink kinds on S3: each kill point once, the outcomes taking turns (``_on_stock``'s reason).
S3_SINK_KINDS = ["hive_append_s3", "hive_overwrite_s3"]
# The built-in sinks' commits: a write through the sink's writers (no Spark job), then its kind.
SINK_KINDS = ["hive_append", "hive_overwrite", "jdbc_append", "sink"]
STEPS = ["before_write", "mid_write", "after_written", "after_catalog", "during_abort"]
OUTCOMES = ["success", "failed", "unknown"]
# Kinds whose commit is several catalog calls, and the last of them: the step
# "between_catalog_calls" lets every call before it land and fails that one (the process died).
# A refresh of tracked partitions registers new ones at the placeholder, then switches all; one
# of a table that reads its directories moves the partitions, then makes it read the catalog.
LAST_CATALOG_CALL = {"hive_partitions": "alter_partitions", "hive_partitions_discovered": "alter_table"}
# Expiry, rollback and the rollback of some partitions write no data: no mid-write step.
LIFECYCLE_KINDS = ["hive_expire", "hive_rollback", "hive_rollback_partitions"]
LIFECYCLE_STEPS = ["before_write", "after_written", "after_catalog", "during_abort"]


def expected_result(step: str, outcome: str) -> tuple[bool, str]:
    """(whether the table ends NEW, the reconcile action)."""
    if step == "after_catalog":
        return True, "finished"  # the catalog already serves it, whatever the task did
    if step == "during_abort":
        return False, "aborted"  # an abort cut short is finished, never committed
    if step in ("after_written", "between_catalog_calls") and outcome == "success":
        return True, "committed"
    return False, "expired" if outcome == "unknown" else "aborted"


@dataclass
class Case:
    kind: str
    target: str
    journal: FileJournal
    settings: StagedSettings
    task: TaskRef | None  # None: a client's build (``staged sql``), known by its process only
    old: AttemptRecord  # the committed build of the OLD content


def _task(kind: str, label: str) -> TaskRef:
    return TaskRef("recovery_matrix", f"build_{kind}", f"{label}-{uuid.uuid4().hex[:12]}", 1)


def _parquet(location: str) -> list[FileEntry]:
    """The part files under ``location`` (on a local disk or S3, through the storage layer)."""
    return [
        entry for entry in files.list_files(location)
        if entry.path.rsplit("/", 1)[-1].startswith("part-") and entry.path.endswith(".parquet")
    ]


def copy_tree(directory: Path, location: str) -> None:
    """Copy a local directory's files to ``location`` (a local path or an S3 URI)."""
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        files.write_bytes(files.join(location, *path.relative_to(directory).parts), path.read_bytes())


# -- the Hive kinds -------------------------------------------------------------------------------


class HiveHarness:
    """OLD tables built cheaply through the API: begin, copy a template version, written, commit."""

    kind = "hive_table"
    old_sql = rh.TABLE_OLD_SQL
    partition_by: list[str] = []

    def __init__(self, spark: Any, metastore: Any, database: str, scratch: Path) -> None:
        self.spark = spark
        self.metastore = metastore
        self.metastore_uri = metastore.uri
        self.warehouse = metastore.warehouse
        self.database = database
        self.scratch = scratch
        template = scratch / "template"
        spec = {"format": "parquet", "location": f"file:{template}", "partition_by": self.partition_by}
        self.template_dir = template
        self.template_manifest = run_staged_write(spark, self.old_sql, spec)
        self.expected_old = self.expected(self.old_sql)
        self.expected_new = self.expected(rh.NEW_SQL[self.kind])

    # content as a new reader sees it -----------------------------------------------------------

    def content_query(self, source: str) -> str:
        return f"SELECT count(*) AS n, coalesce(sum(hash(id, label)), 0) AS h FROM {source}"

    def expected(self, query: str) -> Any:
        return tuple(self.spark.sql(self.content_query(f"({query})")).first())

    def read(self, target: str) -> Any:
        reader = self.spark.newSession()  # its own catalog state: what a new reader sees
        return tuple(reader.sql(self.content_query(spark_table(reader, self.metastore, target))).first())

    def catalog_table(self, target: str) -> ttypes.Table:
        database, table = target.split(".")
        with MetastoreClient(self.metastore_uri) as client:
            found = client.get_table(database, table)
        assert found is not None, f"{target} is not in the metastore"
        return found

    # cases ---------------------------------------------------------------------------------------

    def old_attempt(self, target: str, journal: FileJournal) -> JournaledStagedTable:
        return HiveStagedTable(
            TableIdentifier.parse(target),
            StagingPurpose.CREATE_TABLE_AS,
            journal,
            self.metastore_uri,
            rh.RETENTION,
        )

    def build_old(self, target: str, journal: FileJournal) -> AttemptRecord:
        staged = self.old_attempt(target, journal)
        staged.begin()
        copy_tree(self.template_dir, staged.location)
        staged.written({**self.template_manifest, "location": staged.location})
        staged.commit()
        staged.housekeep()
        return journal.require(staged.attempt_id)

    def new_target(self) -> str:
        return f"{self.database}.t_{uuid.uuid4().hex[:10]}"

    def new_case(self, directory: Path, label: str) -> Case:
        journal = FileJournal(directory / "journal")
        target = self.new_target()
        old = self.build_old(target, journal)
        settings = StagedSettings(
            self.metastore_uri,
            self.warehouse,
            str(journal.root),
            retention=rh.RETENTION,
            attempt_ttl_seconds=TTL,
        )
        return Case(self.kind, target, journal, settings, _task(self.kind, label), old)

    def write(self, staged: JournaledStagedTable, query: str, mid_write: bool = False) -> dict[str, Any]:
        return run_staged_write(self.spark, query, rh.write_spec(staged, mid_write))

    # the kill points -------------------------------------------------------------------------------

    def assert_nothing_written(self, case: Case, staged: JournaledStagedTable) -> None:
        assert not files.exists(staged.location), "begin alone must not create the attempt's directory"

    def assert_partly_written(self, case: Case, staged: JournaledStagedTable) -> None:
        written = _parquet(staged.location)
        assert written, (
            f"the failed job left no part files in {staged.location}: the kill point was not reached"
        )

    def assert_serves(self, case: Case, staged: JournaledStagedTable) -> None:
        location = current_location(self.catalog_table(case.target))
        assert normalize_location(location) == normalize_location(staged.location)

    def discard_partly(self, case: Case, staged: JournaledStagedTable) -> None:
        """A crash inside ``discard``'s directory delete: some of the attempt's files are gone."""
        parts = _parquet(staged.location)
        assert len(parts) >= 2, f"need 2+ part files to delete only some, got {parts}"
        for entry in parts[: len(parts) // 2]:
            directory, _, name = entry.location.rpartition("/")
            files.delete_file(entry.location)
            files.delete_file(f"{directory}/.{name}.crc")
        assert _parquet(staged.location), "some files of the attempt must remain"

    # the end state -------------------------------------------------------------------------------------

    def root_of(self, case: Case) -> str:
        return normalize_location(case.old.location).rpartition("/")[0]

    def assert_root(self, case: Case, record: AttemptRecord, new: bool) -> None:
        """Only the version directories the catalog and the journal's commits explain."""
        old_dir, new_dir = normalize_location(case.old.location), normalize_location(record.location)
        old_name, new_name = old_dir.rpartition("/")[2], new_dir.rpartition("/")[2]
        wanted = {old_name, new_name} if new else {old_name}
        root = self.root_of(case)
        entries = listed_entries(root)
        versions = {name for name in entries if name.startswith("_v=")}
        assert versions == wanted, f"version directories {sorted(versions)}, expected {sorted(wanted)}"
        if not new:
            assert files.list_files(new_dir) == [], f"the aborted attempt's directory {new_dir} is left"
        others = entries - versions
        allowed = {EMPTY_DIR_NAME} if isinstance(self, PartitionHarness) else set()
        assert others <= allowed, f"unexpected entries {sorted(others - allowed)} in {root}"
        if EMPTY_DIR_NAME in others:
            placeholder = f"{root}/{EMPTY_DIR_NAME}"
            assert files.list_files(placeholder) == [], "the placeholder is not empty"

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        assert self.read(case.target) == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (rows, checksum)"
        )
        want = normalize_location(record.location if new else case.old.location)
        served = normalize_location(current_location(self.catalog_table(case.target)))
        assert served == want, f"the metastore serves {served}, expected {want}"
        self.assert_root(case, record, new)
        self.assert_neighbour()

    # the untouched neighbour table in the same database -----------------------------------------------

    def setup_neighbour(self) -> None:
        target = f"{self.database}.{self.kind}_neighbour"
        record = self.build_old(target, FileJournal(self.scratch / "neighbour-journal"))
        self.neighbour = target
        self.neighbour_root = normalize_location(record.location).rpartition("/")[0]
        self.neighbour_state = self.observe_neighbour()
        assert self.neighbour_state[0] == self.expected_old

    def observe_neighbour(self) -> tuple[Any, str, list[str]]:
        paths = [entry.path for entry in files.list_files(self.neighbour_root)]
        location = normalize_location(current_location(self.catalog_table(self.neighbour)))
        return self.read(self.neighbour), location, paths

    def assert_neighbour(self) -> None:
        assert self.observe_neighbour() == self.neighbour_state, f"neighbour {self.neighbour} changed"


class PartitionHarness(HiveHarness):
    """A (region, ds) table; the refresh of region=eu rewrites two partitions and adds one."""

    kind = "hive_partitions"
    old_sql = rh.PART_OLD_SQL
    partition_by = rh.PARTITION_COLUMNS
    neighbour_partition = ("us", "2024-01-01")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert set(self.expected_old) == {
            ("eu", "2024-01-01"),
            ("eu", "2024-01-02"),
            self.neighbour_partition,
        }
        refreshed = self.expected_new
        assert set(refreshed) == {("eu", "2024-01-01"), ("eu", "2024-01-02"), ("eu", "2024-01-03")}
        self.expected_new = {
            **refreshed,
            self.neighbour_partition: self.expected_old[self.neighbour_partition],
        }

    def content_query(self, source: str) -> str:
        return (
            "SELECT region, ds, count(*) AS n, sum(hash(id, label, region, ds)) AS h "
            f"FROM {source} GROUP BY region, ds"
        )

    def expected(self, query: str) -> Any:
        return {
            (r.region, r.ds): (r.n, r.h) for r in self.spark.sql(self.content_query(f"({query})")).collect()
        }

    def read(self, target: str) -> Any:
        reader = self.spark.newSession()
        name = spark_table(reader, self.metastore, target)
        return {(r.region, r.ds): (r.n, r.h) for r in reader.sql(self.content_query(name)).collect()}

    def partitions(self, target: str) -> dict[tuple[str, ...], str]:
        database, table = target.split(".")
        with MetastoreClient(self.metastore_uri) as client:
            found = client.partitions(database, table)
        return {tuple(p.values): normalize_location(p.sd.location) for p in found}

    def old_attempt(self, target: str, journal: FileJournal) -> JournaledStagedTable:
        return HivePartitionStagedTable(
            TableIdentifier.parse(target), rh.PARTITION_COLUMNS, {}, journal, self.metastore_uri, rh.RETENTION
        )

    def assert_serves(self, case: Case, staged: JournaledStagedTable) -> None:
        mine = normalize_location(staged.location)
        served = self.partitions(case.target)
        assert {v for v, location in served.items() if location.startswith(mine + "/")} == set(
            self.expected_new
        ) - {self.neighbour_partition}

    def discard_partly(self, case: Case, staged: JournaledStagedTable) -> None:
        """A crash inside ``discard`` after a commit that failed between registering the added
        partition at the placeholder and switching: some files gone, the placeholder registered."""
        super().discard_partly(case, staged)
        database, name = case.target.split(".")
        placeholder = f"{self.root_of(case)}/{EMPTY_DIR_NAME}"
        files.make_dirs(placeholder)
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(database, name)
            if ("eu", "2024-01-03") in self.partitions(case.target):
                return  # registered when the output was recorded (the prepared commit)
            storage = copy.deepcopy(table.sd)
            storage.location = placeholder
            client.add_partitions(
                [
                    ttypes.Partition(
                        values=["eu", "2024-01-03"],
                        dbName=database,
                        tableName=name,
                        sd=storage,
                        parameters={},
                    )
                ]
            )
        assert self.partitions(case.target)[("eu", "2024-01-03")] == placeholder

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        content = self.read(case.target)
        neighbour = self.expected_old[self.neighbour_partition]
        assert content.get(self.neighbour_partition) == neighbour, "the untouched neighbour partition changed"
        assert content == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (per partition: rows, checksum)"
        )
        old_dir, new_dir = normalize_location(case.old.location), normalize_location(record.location)
        # The table itself stays at the version that created it; its partitions move.
        assert normalize_location(current_location(self.catalog_table(case.target))) == old_dir
        expected = {
            values: f"{new_dir if new and values != self.neighbour_partition else old_dir}/"
            f"{partition_path(rh.PARTITION_COLUMNS, values)}"
            for values in (self.expected_new if new else self.expected_old)
        }
        # Exactly these partitions (none extra, none at the placeholder); the neighbour's location kept.
        assert self.partitions(case.target) == expected, "the metastore's partitions are not exactly these"
        self.assert_root(case, record, new)

    def setup_neighbour(self) -> None:
        """The neighbour here is the partition region=us/ds=2024-01-01 (checked in ``check``)."""


class ContinuousPartitionHarness(PartitionHarness):
    """The one-time refresh of a CONTINUOUS table beside its stream: the ``hive_partitions`` case,
    plus a file of the stream's micro-batch after the refresh's snapshot in region=eu/ds=2024-01-01
    (``rh.LATER_SQL``'s rows). OLD and NEW both hold those rows: the switch links them over."""

    kind = "hive_partitions_continuous"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        neighbour = self.expected_old[self.neighbour_partition]
        self.expected_old = self.expected(f"{rh.PART_OLD_SQL} UNION ALL {rh.LATER_SQL}")
        self.expected_new = {
            **self.expected(f"{rh.PART_NEW_SQL} UNION ALL {rh.LATER_SQL}"),
            self.neighbour_partition: neighbour,
        }
        later = self.scratch / "later"
        run_staged_write(
            self.spark,
            f"SELECT /*+ COALESCE(1) */ id, label FROM ({rh.LATER_SQL})",  # one file: one micro-batch
            {"format": "parquet", "location": f"file:{later}", "partition_by": []},
        )
        (later_file,) = _parquet(f"file:{later}")
        self.later_file = local_path(later_file.location)

    def build_old(self, target: str, journal: FileJournal) -> AttemptRecord:
        record = super().build_old(target, journal)
        partition = local_path(record.location) / partition_path(rh.PARTITION_COLUMNS, ("eu", "2024-01-01"))
        shutil.copy(self.later_file, partition / rh.STREAM_LATER_FILE)
        return record


class DiscoveredPartitionHarness(PartitionHarness):
    """The same refresh of a table whose partitions Spark discovers from its directories (OLD is a
    partitioned whole-table CTAS). Its commit registers the us partition at its directory, switches
    the eu ones and, last, makes the table read catalog partitions: NEW reads as the tracked
    ``hive_partitions`` case; OLD is still the untracked table, whatever partitions the catalog
    was left with (Spark reads none of them)."""

    kind = "hive_partitions_discovered"

    def old_attempt(self, target: str, journal: FileJournal) -> JournaledStagedTable:
        identifier, purpose = TableIdentifier.parse(target), StagingPurpose.CREATE_TABLE_AS
        return HiveStagedTable(identifier, purpose, journal, self.metastore_uri, rh.RETENTION)

    def assert_serves(self, case: Case, staged: JournaledStagedTable) -> None:
        super().assert_serves(case, staged)
        assert tracks_partitions(self.catalog_table(case.target)), "no switch to catalog partitions"

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        table = self.catalog_table(case.target)
        assert tracks_partitions(table) == new, f"{case.target} reads catalog partitions: {not new}"
        if new:
            super().check(case, record, new)
            return
        assert self.read(case.target) == self.expected_old, f"{case.target} does not read exactly OLD"
        assert normalize_location(current_location(table)) == normalize_location(case.old.location)
        outside_old = {
            values: location
            for values, location in self.partitions(case.target).items()
            if not location.startswith(normalize_location(case.old.location) + "/")
        }
        assert outside_old == {}, f"catalog partitions left outside OLD's version: {outside_old}"
        self.assert_root(case, record, new)


@pytest.fixture(scope="module")
def s3_hive_database(metastore: Any, s3_bucket: str) -> str:
    """A database whose tables live on the S3 server (``s3a://``)."""
    name = f"rm_s3_{uuid.uuid4().hex[:8]}"
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(name, f"s3a://{s3_bucket}/warehouse")
    return name


def with_neighbour(harness: HiveHarness) -> HiveHarness:
    harness.setup_neighbour()
    return harness


@pytest.fixture(scope="module")
def hive_table_s3_harness(spark, metastore, s3_hive_database, tmp_path_factory) -> HiveHarness:
    scratch = tmp_path_factory.mktemp("rm-hive-s3")
    return with_neighbour(HiveHarness(spark, metastore, s3_hive_database, scratch))


@pytest.fixture(scope="module")
def hive_partitions_s3_harness(spark, metastore, s3_hive_database, tmp_path_factory) -> PartitionHarness:
    return PartitionHarness(spark, metastore, s3_hive_database, tmp_path_factory.mktemp("rm-parts-s3"))


# -- the lifecycle kinds: expiry and rollback (no data written; the "write" is their manifest) ------


class LifecycleHarness(HiveHarness):
    """Shared by the kinds that write nothing: their attempt's "write" only returns its manifest, so
    there is no mid-write step; a crash inside their discard (which deletes nothing) is a failure
    raised there."""

    def copy_build(
        self, staged: JournaledStagedTable, template: Path, manifest: dict[str, Any]
    ) -> AttemptRecord:
        """begin → copy a template version → written → commit: a build without Spark."""
        staged.begin()
        shutil.copytree(template, local_path(staged.location))
        staged.written({**manifest, "location": staged.location})
        staged.commit()
        staged.housekeep()
        return staged.journal.require(staged.attempt_id)

    def template(self, name: str, query: str) -> tuple[Path, dict[str, Any]]:
        directory = self.scratch / name
        spec = {"format": "parquet", "location": f"file:{directory}", "partition_by": self.partition_by}
        return directory, run_staged_write(self.spark, query, spec)

    def write(self, staged: JournaledStagedTable, query: str, mid_write: bool = False) -> dict[str, Any]:
        return self.manifest_of(staged)

    def discard_partly(self, case: Case, staged: JournaledStagedTable) -> None:
        """Nothing to delete: the abort dies before journaling ABORTED."""

    def assert_nothing_written(self, case: Case, staged: JournaledStagedTable) -> None:
        """Begin only journals: the table is exactly OLD."""
        self.check(case, case.journal.require(staged.attempt_id), new=False)

    def versions(self, case: Case) -> set[str]:
        return {p.name for p in local_path(self.root_of(case)).iterdir() if p.name.startswith("_v=")}


class ExpiryHarness(LifecycleHarness):
    """A (region, ds) table with a 1-day TTL on ds; the expiry with the clock at 2024-01-02 12:00
    drops both ds=2024-01-01 partitions in one call; (eu, 2024-01-02) is the untouched neighbour."""

    kind = "hive_expire"
    old_sql = rh.PART_OLD_SQL
    partition_by = rh.PARTITION_COLUMNS
    options = {"partition.expiration-time": "1 d", "partition.timestamp-pattern": "$ds"}
    now = float(calendar.timegm((2024, 1, 2, 12, 0, 0)))
    content_query = PartitionHarness.content_query
    expected = PartitionHarness.expected
    read = PartitionHarness.read
    partitions = PartitionHarness.partitions

    def old_attempt(self, target: str, journal: FileJournal) -> JournaledStagedTable:
        return HivePartitionStagedTable(
            TableIdentifier.parse(target),
            rh.PARTITION_COLUMNS,
            {},
            journal,
            self.metastore_uri,
            rh.RETENTION,
            table_options=self.options,
        )

    def new_attempt(self, case: Case) -> JournaledStagedTable:
        database, name = case.target.split(".")
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(database, name)
            plan = plan_expiry(table, client.partitions(database, name), table_ttl(table), self.now)
        return HivePartitionExpiry(
            TableIdentifier.parse(case.target),
            plan.expired,
            self.now,
            journal=case.journal,
            metastore_uri=self.metastore_uri,
            retention=rh.RETENTION,
            task=case.task,
        )

    def manifest_of(self, staged: JournaledStagedTable) -> dict[str, Any]:
        return {"location": staged.location, "format": "none", "rows": 0}

    def expired_dirs(self, case: Case) -> list[Path]:
        old = local_path(case.old.location)
        return [old / f"region={region}" / f"ds={rh.EXPIRED_DAY}" for region in ("eu", "us")]

    def assert_serves(self, case: Case, staged: JournaledStagedTable) -> None:
        assert set(self.partitions(case.target)) == set(self.expected_new)

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        content = self.read(case.target)
        neighbour = ("eu", "2024-01-02")
        assert content.get(neighbour) == self.expected_old[neighbour], (
            "the untouched neighbour partition changed"
        )
        assert content == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (per partition: rows, checksum)"
        )
        old_dir = normalize_location(case.old.location)
        expected = {
            values: f"{old_dir}/{partition_path(rh.PARTITION_COLUMNS, values)}"
            for values in (self.expected_new if new else self.expected_old)
        }
        assert self.partitions(case.target) == expected, "the metastore's partitions are not exactly these"
        assert self.versions(case) == {local_path(old_dir).name}, "version directories changed"
        # Dropped partitions' files stay for the grace (readers may still read them), then go.
        assert all(path.is_dir() for path in self.expired_dirs(case)), "files deleted inside the grace"
        staged = HivePartitionExpiry.from_record(record, case.settings)
        deleted = delete_dropped_files(
            staged, case.journal.records(), time.time() + 2 * rh.RETENTION.grace_seconds
        )
        assert [p.is_dir() for p in self.expired_dirs(case)] == [not new, not new], (
            f"after the grace the expired partitions' files must be {'gone' if new else 'kept'}: {deleted}"
        )
        assert self.read(case.target) == content, "deleting the dropped partitions' files changed the table"


class RollbackHarness(LifecycleHarness):
    """A whole table at version v2 (OLD) that keeps v1 (NEW, the rollback's target)."""

    kind = "hive_rollback"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.kept = self.template("template-v1", rh.NEW_SQL[self.kind])
        self.restores: dict[str, AttemptRecord] = {}

    def build_old(self, target: str, journal: FileJournal) -> AttemptRecord:
        """v1 (the NEW content), then v2 (OLD) replacing it; v1 stays (retention keeps one)."""
        v1 = self.copy_build(self.old_attempt(target, journal), *self.kept)
        replace = self.old_attempt(target, journal)
        replace.purpose = StagingPurpose.REPLACE_TABLE_AS
        self.restores[target] = v1
        return self.copy_build(replace, self.template_dir, self.template_manifest)

    def rollback_partitions(self, case: Case, v1: AttemptRecord) -> dict[str, str] | None:
        return None

    def new_attempt(self, case: Case) -> JournaledStagedTable:
        v1 = self.restores[case.target]
        return HiveRollback(
            TableIdentifier.parse(case.target),
            v1.attempt_id,
            v1.location,
            self.rollback_partitions(case, v1),
            journal=case.journal,
            metastore_uri=self.metastore_uri,
            retention=rh.RETENTION,
            task=case.task,
        )

    def manifest_of(self, staged: JournaledStagedTable) -> dict[str, Any]:
        return staged.journal.require(staged.version).manifest

    def assert_serves(self, case: Case, staged: JournaledStagedTable) -> None:
        served = current_location(self.catalog_table(case.target))
        assert normalize_location(served) == normalize_location(self.restores[case.target].location)

    def assert_root(self, case: Case, record: AttemptRecord, new: bool) -> None:
        """Both versions stay (v2 superseded inside the grace, or current); nothing else."""
        wanted = {local_path(case.old.location).name, local_path(self.restores[case.target].location).name}
        assert self.versions(case) == wanted, f"version directories {self.versions(case)}, expected {wanted}"
        others = {p.name for p in local_path(self.root_of(case)).iterdir()} - wanted
        assert others <= {EMPTY_DIR_NAME}, f"unexpected entries {sorted(others)} in {self.root_of(case)}"

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        assert self.read(case.target) == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (rows, checksum)"
        )
        want = normalize_location((self.restores[case.target] if new else case.old).location)
        served = normalize_location(current_location(self.catalog_table(case.target)))
        assert served == want, f"the metastore serves {served}, expected {want}"
        self.assert_root(case, record, new)
        self.assert_neighbour()


class PartitionRollbackHarness(RollbackHarness):
    """A (region, ds) table: v1 built whole, v2 refreshed region=eu (rewrote 01-01 and 01-02, added
    01-03). The rollback to v1 switches (eu, 01-01) and (eu, 01-02) back in one call; (us, 01-01)
    (already v1) and (eu, 01-03) (v1 has none) are the untouched neighbours."""

    kind = "hive_rollback_partitions"
    old_sql = rh.PART_OLD_SQL  # v1
    partition_by = rh.PARTITION_COLUMNS
    content_query = PartitionHarness.content_query
    expected = PartitionHarness.expected
    read = PartitionHarness.read
    partitions = PartitionHarness.partitions
    switched = {("eu", "2024-01-01"), ("eu", "2024-01-02")}

    def __init__(self, spark: Any, metastore: Any, database: str, scratch: Path) -> None:
        LifecycleHarness.__init__(self, spark, metastore, database, scratch)  # the OLD_SQL template
        self.kept = (self.template_dir, self.template_manifest)  # v1
        self.refresh = self.template("template-v2", rh.PART_NEW_SQL)
        v1, v2 = self.expected_old, self.expected(rh.PART_NEW_SQL)
        self.expected_old = {**v2, ("us", "2024-01-01"): v1[("us", "2024-01-01")]}
        self.expected_new = {**v1, ("eu", "2024-01-03"): v2[("eu", "2024-01-03")]}
        self.restores = {}

    def old_attempt(self, target: str, journal: FileJournal) -> JournaledStagedTable:
        return HivePartitionStagedTable(
            TableIdentifier.parse(target), rh.PARTITION_COLUMNS, {}, journal, self.metastore_uri, rh.RETENTION
        )

    def build_old(self, target: str, journal: FileJournal) -> AttemptRecord:
        self.restores[target] = self.copy_build(self.old_attempt(target, journal), *self.kept)
        refresh = HivePartitionStagedTable(
            TableIdentifier.parse(target),
            rh.PARTITION_COLUMNS,
            rh.PARTITION_SPEC,
            journal,
            self.metastore_uri,
            rh.RETENTION,
        )
        return self.copy_build(refresh, *self.refresh)

    def rollback_partitions(self, case: Case, v1: AttemptRecord) -> dict[str, str] | None:
        root = normalize_location(v1.location)
        names = [partition_path(rh.PARTITION_COLUMNS, values) for values in sorted(self.switched)]
        return {name: f"{root}/{name}" for name in names}

    def where(self, case: Case, new: bool) -> dict[tuple[str, ...], str]:
        v1 = normalize_location(self.restores[case.target].location)
        v2 = normalize_location(case.old.location)
        at_v1 = {("us", "2024-01-01"), *(self.switched if new else ())}
        return {
            values: f"{v1 if values in at_v1 else v2}/{partition_path(rh.PARTITION_COLUMNS, values)}"
            for values in self.expected_old
        }

    def assert_serves(self, case: Case, staged: JournaledStagedTable) -> None:
        assert self.partitions(case.target) == self.where(case, True)

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        content = self.read(case.target)
        for neighbour in (("us", "2024-01-01"), ("eu", "2024-01-03")):
            assert content.get(neighbour) == self.expected_old[neighbour], (
                f"neighbour partition {neighbour} changed"
            )
        assert content == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (per partition: rows, checksum)"
        )
        assert self.partitions(case.target) == self.where(case, new), (
            "the metastore's partitions are not these"
        )
        # The table itself stays at v1, the version that created it.
        served = normalize_location(current_location(self.catalog_table(case.target)))
        assert served == normalize_location(self.restores[case.target].location)
        self.assert_root(case, record, new)

    def setup_neighbour(self) -> None:
        """The neighbours here are partitions of the table (checked in ``check``)."""


# -- PostgreSQL ---------------------------------------------------------------------------------------


def _digest(rows: int, factor: int) -> tuple[int, int, str]:
    text = ",".join(f"{i}:{factor * i}" for i in range(1, rows + 1))
    return rows, factor * rows * (rows + 1) // 2, hashlib.md5(text.encode()).hexdigest()


class JdbcHarness:
    kind = "jdbc_table"
    expected_old = _digest(rh.JDBC_OLD_ROWS, 2)
    expected_new = _digest(rh.JDBC_NEW_ROWS, 3)

    def __init__(self, spark: Any, metastore: Any, postgres: Any, conn_id: str, schema: str, scratch: Path):
        self.spark = spark
        self.metastore_uri = metastore.uri
        self.warehouse = metastore.warehouse
        self.conninfo = postgres.conninfo()
        self.conn_id = conn_id
        self.schema = schema
        self.scratch = scratch

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.conninfo, autocommit=True)

    def read(self, table: str) -> tuple[int, int, str]:
        """count, sum and an ordered checksum, as a new session reads them."""
        with self.connect() as conn:
            count, total, digest = conn.execute(
                sql.SQL(
                    "SELECT count(*), coalesce(sum(v), 0)::bigint,"
                    " md5(coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '')) FROM {}"
                ).format(sql.Identifier(self.schema, table))
            ).fetchone()
        return int(count), int(total), digest

    def oid(self, table: str) -> int | None:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = %s",
                (self.schema, table),
            ).fetchone()
        return int(row[0]) if row else None

    def relations(self, prefix: str) -> set[str]:
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND left(c.relname, length(%s)) = %s",
                (self.schema, prefix, prefix),
            ).fetchall()
        return {row[0] for row in rows}

    def build_old(self, table: str, journal: FileJournal) -> AttemptRecord:
        """begin → fill the staged table with SQL (the job's part, without Spark) → written → commit."""
        staged = JdbcStagedTable(
            JdbcTarget.parse(f"jdbc://{self.conn_id}/{self.schema}.{table}"),
            StagingPurpose.CREATE_TABLE_AS,
            journal,
        )
        staged.begin()
        name = sql.Identifier(self.schema, staged.staged_name)
        with self.connect() as conn:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN id bigint NOT NULL, ADD COLUMN v bigint NOT NULL").format(
                    name
                )
            )
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT g, 2 * g FROM generate_series(1, %s) g").format(name),
                (rh.JDBC_OLD_ROWS,),
            )
        oid = self.oid(staged.staged_name)
        staged.written(
            {
                "format": "jdbc",
                "location": staged.location,
                "table_oid": oid,
                "columns": [["id", "bigint NOT NULL"], ["v", "bigint NOT NULL"]],
                "rows": rh.JDBC_OLD_ROWS,
                "bytes": 0,
            }
        )
        staged.commit()
        staged.housekeep()
        return journal.require(staged.attempt_id)

    def new_case(self, directory: Path, label: str) -> Case:
        journal = FileJournal(directory / "journal")
        table = f"t_{uuid.uuid4().hex[:10]}"
        old = self.build_old(table, journal)
        settings = StagedSettings(
            self.metastore_uri, self.warehouse, str(journal.root), attempt_ttl_seconds=TTL
        )
        return Case(
            self.kind,
            f"jdbc://{self.conn_id}/{self.schema}.{table}",
            journal,
            settings,
            _task(self.kind, label),
            old,
        )

    def write(self, staged: JournaledStagedTable, query: str, mid_write: bool = False) -> dict[str, Any]:
        return run_staged_write(self.spark, query, rh.write_spec(staged, mid_write))

    @staticmethod
    def table_of(case: Case) -> str:
        return JdbcTarget.parse(case.target).table

    def staged_rows(self, staged: JdbcStagedTable) -> int:
        with self.connect() as conn:
            query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(self.schema, staged.staged_name))
            return int(conn.execute(query).fetchone()[0])

    def assert_nothing_written(self, case: Case, staged: JdbcStagedTable) -> None:
        with self.connect() as conn:
            columns = conn.execute(
                "SELECT count(*) FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
                (self.oid(staged.staged_name),),
            ).fetchone()[0]
        assert columns == 0, "begin's placeholder must have no columns yet"
        assert self.staged_rows(staged) == 0

    def assert_partly_written(self, case: Case, staged: JdbcStagedTable) -> None:
        rows = self.staged_rows(staged)
        assert 0 < rows < rh.JDBC_NEW_ROWS, f"the failed job left {rows} rows: the kill point was not reached"

    def assert_serves(self, case: Case, staged: JdbcStagedTable) -> None:
        manifest = case.journal.require(staged.attempt_id).manifest
        assert self.oid(self.table_of(case)) == manifest["table_oid"]
        assert self.read(self.table_of(case)) == self.expected_new

    def discard_partly(self, case: Case, staged: JdbcStagedTable) -> None:
        """A crash inside ``discard`` after its DROP, before the journal records ABORTED."""
        with self.connect() as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(self.schema, staged.staged_name)))
        assert self.oid(staged.staged_name) is None

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        table = self.table_of(case)
        assert self.read(table) == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (rows, sum, md5)"
        )
        wanted = (record if new else case.old).manifest["table_oid"]
        assert self.oid(table) == wanted, f"{case.target} is not the {'NEW' if new else 'OLD'} table"
        left = self.relations(table)
        assert left == {table}, f"staged or superseded tables left behind: {sorted(left - {table})}"
        self.assert_neighbour()

    def setup_neighbour(self) -> None:
        self.build_old("neighbour", FileJournal(self.scratch / "neighbour-journal"))
        self.neighbour_state = (self.oid("neighbour"), self.read("neighbour"))
        assert self.neighbour_state[1] == self.expected_old

    def assert_neighbour(self) -> None:
        assert (self.oid("neighbour"), self.read("neighbour")) == self.neighbour_state, "neighbour changed"


@pytest.fixture(scope="module")
def jdbc_table_harness(spark, metastore, postgres, postgres_conn_id, tmp_path_factory):
    schema = "rm_" + uuid.uuid4().hex[:8]
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    harness = JdbcHarness(
        spark, metastore, postgres, postgres_conn_id, schema, tmp_path_factory.mktemp("rm-pg")
    )
    harness.setup_neighbour()
    yield harness
    os.environ.pop(password_env_var(postgres_conn_id), None)
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


# -- the sink kinds: a write of a built-in sink, committed by its kind --------------------------------


def sink_writers(
    spark: Any, sink: Sink[Any, Any], context: WriterContext, query: str, mid_write: bool
) -> list[Any]:
    """The sink's writers of two tasks over ``query``: their committables. ``mid_write``: the second
    task fails before its writer runs (a failed task's message never reaches a commit)."""
    rows = spark.sql(query).toArrow()
    committables = []
    for task, part in enumerate((rows.slice(0, rows.num_rows // 2), rows.slice(rows.num_rows // 2))):
        if mid_write and task == 1:
            raise RuntimeError(rh.INJECTED)
        attempt = replace(context, partition_id=task, task_attempt_id=task)
        committables += write_task(sink, attempt, iter(part.to_batches()))
    return committables


def sink_write(
    spark: Any, sink: Sink[Any, Any], staged: Any, query: str, mid_write: bool = False
) -> Manifest:
    """What the sink's runtime does for ``staged``'s write up to WRITTEN: the writers, the
    committer, then the manifest its global committer journals."""
    schema = spark.sql(query).schema.json()
    context = WriterContext(staged.attempt_id, staged.query_id, 0, sink.mode, schema)
    committables = sink_writers(spark, sink, context, query, mid_write)
    committer = sink.create_committer()
    if committer is not None:
        commit_until_done(committer.commit, committables, sink.name)
    global_committer = sink.create_global_committer()
    return global_committer.manifest_of(global_committer.combine(committables))


class HiveSinkHarness(HiveHarness):
    """OLD built as for ``hive_table``; the attempt is a write of the Hive sink (Arrow writers)
    appending to it (``hive_append``: NEW is OLD plus the batch) or replacing it (``hive_overwrite``)."""

    kind = "hive_append"
    mode = "append"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.mode == "append":
            self.expected_new = self.expected(f"{self.old_sql} UNION ALL {rh.NEW_SQL[self.kind]}")

    def new_attempt(self, case: Case) -> HiveSinkCommit:
        kind = HiveAppendStagedTable if self.mode == "append" else HiveOverwriteStagedTable
        write_id = new_write_id()
        return kind(
            TableIdentifier.parse(case.target), case.journal, self.metastore_uri, query_id=write_id,
            batch_id=0, streaming=False, retention=rh.RETENTION, task=case.task, attempt_id=write_id,
        )

    def write(self, staged: Any, query: str, mid_write: bool = False) -> Manifest:
        settings = StagedSettings(self.metastore_uri, self.warehouse, str(staged.journal.root),
                                  retention=rh.RETENTION)
        sink = HiveSink(staged.identifier, settings, self.mode, native=False)
        return sink_write(self.spark, sink, staged, query, mid_write)

    def staged_files(self, case: Case, staged: Any) -> list[FileEntry]:
        """The parquet files in the table's staging area and in the attempt's version directory."""
        root = self.root_of(case)
        found = files.list_files(f"{root}/{STAGING_DIR}") + files.list_files(f"{root}/_v={staged.attempt_id}")
        return [entry for entry in found if entry.path.endswith(".parquet")]

    def assert_nothing_written(self, case: Case, staged: Any) -> None:
        assert self.staged_files(case, staged) == [], "begin alone must not stage files"

    def assert_partly_written(self, case: Case, staged: Any) -> None:
        staged_files = self.staged_files(case, staged)
        assert len(staged_files) == 1, f"the first task's file is staged, the second's not: {staged_files}"

    def assert_serves(self, case: Case, staged: Any) -> None:
        assert self.read(case.target) == self.expected_new

    def discard_partly(self, case: Case, staged: Any) -> None:
        staged_files = self.staged_files(case, staged)
        assert len(staged_files) == 2, f"need the files of 2 tasks, got {staged_files}"
        files.delete_file(staged_files[0].location)

    def write_id(self, record: AttemptRecord) -> str:
        """The id the sink's writers staged under (the kinds' attempt id is their write's)."""
        return record.attempt_id

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        assert self.read(case.target) == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (rows, checksum)"
        )
        root, old = self.root_of(case), normalize_location(case.old.location)
        # A new version: an overwrite's, or an append's on an object store (no directory rename).
        moved = new and (self.mode == "overwrite" or not files.is_local(root))
        current = f"{root}/_v={record.attempt_id}" if moved else old
        served = normalize_location(current_location(self.catalog_table(case.target)))
        assert served == current, f"the metastore serves {served}, expected {current}"
        entries = listed_entries(root)
        versions = {name for name in entries if name.startswith("_v=")}
        wanted = {old.rpartition("/")[2], current.rpartition("/")[2]}
        assert versions == wanted, f"version directories {sorted(versions)}, expected {sorted(wanted)}"
        appended = {f"batch-{self.write_id(record)}"} if new and self.mode == "append" else set()
        for version in {old, current}:
            batches = {e.name for e in files.list_dir(version) if e.name.startswith("batch-")}
            expected = appended if version == current else set()
            assert batches == expected, f"batch directories {sorted(batches)} in {version}: want {expected}"
        others = entries - versions
        assert others <= {STAGING_DIR}, f"unexpected entries {sorted(others)} in {root}"
        left = files.list_files(f"{root}/{STAGING_DIR}")
        assert not left, f"staged files left behind: {[entry.path for entry in left]}"
        self.assert_neighbour()


class HiveSinkOverwriteHarness(HiveSinkHarness):
    kind = "hive_overwrite"
    mode = "overwrite"


@pytest.fixture(scope="module")
def hive_append_s3_harness(spark, metastore, s3_hive_database, tmp_path_factory) -> HiveHarness:
    scratch = tmp_path_factory.mktemp("rm-append-s3")
    return with_neighbour(HiveSinkHarness(spark, metastore, s3_hive_database, scratch))


@pytest.fixture(scope="module")
def hive_overwrite_s3_harness(spark, metastore, s3_hive_database, tmp_path_factory) -> HiveHarness:
    scratch = tmp_path_factory.mktemp("rm-overwrite-s3")
    return with_neighbour(HiveSinkOverwriteHarness(spark, metastore, s3_hive_database, scratch))


class SinkKindHarness(HiveSinkHarness):
    """The generic ``sink`` kind, a staged build into the Hive sink (append): its job runs the
    sink's writers only and saves their committables in the attempt's directory (``stage_batch``);
    its commit runs the sink's committers (journaled as a ``hive_append`` of their own)."""

    kind = "sink"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.writes: dict[str, str] = {}  # attempt id -> its write's id

    def new_attempt(self, case: Case) -> SinkStagedTable:
        sink = HiveSink(case.target, case.settings, native=False)
        return SinkStagedTable(sink, case.journal, str(case.journal.root), task=case.task)

    def write(self, staged: Any, query: str, mid_write: bool = False) -> Manifest:
        """``stage_batch``'s steps with the writers in this process: the write's context, the
        writers, their committables saved where the commit finds them."""
        path = os.path.join(staged.location, COMMITTABLES_FILE)
        write_id = new_write_id()
        self.writes[staged.attempt_id] = write_id
        context = WriterContext(write_id, write_id, 0, "append", self.spark.sql(query).schema.json())
        save_write_context(path, context)
        save_committables(path, sink_writers(self.spark, staged.sink, context, query, mid_write))
        return Manifest(location=staged.location, format="sink")

    def write_id(self, record: AttemptRecord) -> str:
        return self.writes[record.attempt_id]

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        super().check(case, record, new)
        assert not local_path(record.location).exists(), f"the attempt's directory {record.location} is left"


class JdbcSinkHarness(JdbcHarness):
    """OLD built as for ``jdbc_table``; the attempt is a write of the PostgreSQL sink appending to
    it (``jdbc_append``), each task into its own staged table: NEW is OLD plus the batch."""

    kind = "jdbc_append"
    expected_new = _digest(rh.JDBC_OLD_ROWS + rh.JDBC_APPEND_ROWS, 2)

    def new_attempt(self, case: Case) -> JdbcAppendStagedTable:
        write_id = new_write_id()
        return JdbcAppendStagedTable(
            JdbcTarget.parse(case.target), postgres_connection(self.conn_id), case.journal, write_id, 0,
            False, case.task, write_id,
        )

    def write(self, staged: Any, query: str, mid_write: bool = False) -> Manifest:
        settings = StagedSettings(self.metastore_uri, self.warehouse, str(staged.journal.root))
        sink = PostgresSink(staged.jdbc_target, settings, connection=staged.connection)
        return sink_write(self.spark, sink, staged, query, mid_write)

    def staged_tables(self, staged: Any) -> list[str]:
        with self.connect() as conn:
            return staged_tables(conn, self.schema, staged.staging_location())

    def assert_nothing_written(self, case: Case, staged: Any) -> None:
        assert self.staged_tables(staged) == [], "begin alone must not stage tables"

    def assert_partly_written(self, case: Case, staged: Any) -> None:
        tables = self.staged_tables(staged)
        assert len(tables) == 1, f"the first task's staged table only, got {tables}"
        assert self.read(tables[0])[0] > 0, "the first task staged no rows"

    def assert_serves(self, case: Case, staged: Any) -> None:
        assert self.read(self.table_of(case)) == self.expected_new

    def discard_partly(self, case: Case, staged: Any) -> None:
        tables = self.staged_tables(staged)
        assert len(tables) == 2, f"need the staged tables of 2 tasks, got {tables}"
        with self.connect() as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(self.schema, tables[0])))

    def check(self, case: Case, record: AttemptRecord, new: bool) -> None:
        table = self.table_of(case)
        assert self.read(table) == (self.expected_new if new else self.expected_old), (
            f"{case.target} does not read exactly {'NEW' if new else 'OLD'} (rows, sum, md5)"
        )
        assert self.oid(table) == case.old.manifest["table_oid"], "an append must keep the table"
        left = self.relations(table)
        assert left == {table}, f"staged tables left behind: {sorted(left - {table})}"
        self.assert_neighbour()


@pytest.fixture(scope="module")
def jdbc_append_harness(jdbc_table_harness, spark, metastore, postgres, tmp_path_factory) -> JdbcSinkHarness:
    """In the schema (and beside the neighbour) of ``jdbc_table``'s harness."""
    table = jdbc_table_harness
    harness = JdbcSinkHarness(spark, metastore, postgres, table.conn_id, table.schema,
                              tmp_path_factory.mktemp("rm-pg-append"))
    harness.neighbour_state = table.neighbour_state
    return harness


# -- the Hive harnesses, one per (kind, metastore) --------------------------------------------------

# kind -> its harness, and whether it builds the untouched neighbour table
HIVE_HARNESSES: dict[str, tuple[type[HiveHarness], bool]] = {
    "hive_table": (HiveHarness, True),
    "hive_partitions": (PartitionHarness, False),
    "hive_partitions_discovered": (DiscoveredPartitionHarness, False),
    "hive_partitions_continuous": (ContinuousPartitionHarness, False),
    "hive_expire": (ExpiryHarness, False),
    "hive_rollback": (RollbackHarness, True),
    "hive_rollback_partitions": (PartitionRollbackHarness, False),
    "hive_append": (HiveSinkHarness, True),
    "hive_overwrite": (HiveSinkOverwriteHarness, True),
    "sink": (SinkKindHarness, True),
}


@pytest.fixture(scope="module")
def harness_of(spark, tmp_path_factory) -> Callable[[pytest.FixtureRequest, str, str], Any]:
    """(a test's request, kind, metastore kind) -> the kind's harness on that metastore, made once in
    the module (in a database of its own per metastore). The PostgreSQL kinds' need no metastore."""
    made: dict[tuple[str, str], Any] = {}
    databases: dict[str, str] = {}

    def harness(request: pytest.FixtureRequest, kind: str, metastore_kind: str) -> Any:
        if kind not in HIVE_HARNESSES:
            return request.getfixturevalue(f"{kind}_harness")
        if (kind, metastore_kind) not in made:
            metastore = request.getfixturevalue(METASTORE_FIXTURES[metastore_kind])
            if metastore_kind not in databases:
                databases[metastore_kind] = new_database(metastore, "rm")
            cls, neighbour = HIVE_HARNESSES[kind]
            scratch = tmp_path_factory.mktemp(f"rm-{kind}-{metastore_kind}")
            made[kind, metastore_kind] = cls(spark, metastore, databases[metastore_kind], scratch)
            if neighbour:
                made[kind, metastore_kind].setup_neighbour()
        return made[kind, metastore_kind]

    return harness


# -- the matrix -----------------------------------------------------------------------------------------


def crash(harness: Any, case: Case, staged: JournaledStagedTable, step: str) -> None:
    """Drive ``staged`` to ``step`` and stop there, as a process that died at that point."""
    staged.begin()
    if step == "before_write":
        harness.assert_nothing_written(case, staged)
        assert case.journal.require(staged.attempt_id).state is AttemptState.BEGUN
        return
    if step == "mid_write":
        with pytest.raises(Exception, match=rh.INJECTED):
            harness.write(staged, rh.FAIL_SQL[case.kind], mid_write=True)
        if getattr(harness, "spark", None) is not None:
            wait_for_idle_executors(harness.spark)
        harness.assert_partly_written(case, staged)  # and no abort: the process "died"
        assert case.journal.require(staged.attempt_id).state is AttemptState.BEGUN
        return
    staged.written(harness.write(staged, rh.NEW_SQL[case.kind]))
    if step == "after_catalog":
        staged.publish(case.journal.require(staged.attempt_id))
        harness.assert_serves(case, staged)
    elif step == "between_catalog_calls":
        last = LAST_CATALOG_CALL[case.kind]
        failing = mock.patch.object(MetastoreClient, last, side_effect=RuntimeError(rh.INJECTED))
        # A prepared one-call switch refused (the table changed): the commit's locked calls.
        refused = mock.patch.object(
            MetastoreClient, "switch_partitions", side_effect=CatalogConflictError("injected: changed")
        )
        with refused, failing as call, pytest.raises(RuntimeError, match=rh.INJECTED):
            staged.publish(case.journal.require(staged.attempt_id))
        assert call.called, f"the commit never reached its {last}"
    elif step == "during_abort":
        # The real abort, dying inside its discard after deleting part of the data.
        def die_mid_discard(record: Any) -> None:
            harness.discard_partly(case, staged)
            raise RuntimeError("injected: died while discarding")

        staged.discard = die_mid_discard  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="died while discarding"):
            abort_attempt(staged, "task failed")
        assert case.journal.require(staged.attempt_id).state is AttemptState.ABORTING
        return
    assert case.journal.require(staged.attempt_id).state is AttemptState.WRITTEN


def wait_for_idle_executors(spark: Any, timeout: float = 60.0) -> None:
    """Until the tasks Spark is still killing after the injected failure have ended: a process
    that dies mid-write takes its tasks with it, while this one's would otherwise go on cleaning
    up after the reconcile below."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while any(e.numRunningTasks() > 0 for e in tracker.getExecutorInfos()) and time.monotonic() < deadline:
        time.sleep(0.1)


def settle(harness: Any, case: Case, attempt_id: str, outcome: str, new: bool, action: str) -> None:
    """Reconcile with the task's ``outcome``, then check everything; report every broken invariant."""
    if outcome == "unknown":

        def lookup(task: TaskRef) -> str | None:
            return None

        now = time.time() + TTL + 1
    else:

        def lookup(task: TaskRef) -> str | None:
            return outcome if task == case.task else None

        now = None
    try:
        actions = [(a.attempt_id, a.action) for a in reconcile(case.settings, lookup, now=now)]
    except Exception as error:  # reported below, with what it left
        actions = [(attempt_id, f"reconcile raised {error!r}")]
    record = case.journal.require(attempt_id)
    wanted_state = AttemptState.COMMITTED if new else AttemptState.ABORTED

    def journal_ended() -> None:
        assert actions == [(attempt_id, action)], f"reconcile: {actions}, expected {action!r}"
        assert case.journal.open_attempts() == [], f"the attempt is still open ({record.state.value})"
        assert record.state is wanted_state, f"journaled {record.state.value}, expected {wanted_state.value}"

    failures = []
    for check in (lambda: harness.check(case, record, new), journal_ended):
        try:
            check()
        except AssertionError as error:
            failures.append(str(error))
    if failures:
        pytest.fail("\n\n".join(failures))


FULL_MATRIX = [
    *itertools.product(KINDS, STEPS, OUTCOMES),
    *itertools.product(S3_KINDS, STEPS, OUTCOMES),
    *((kind, step, OUTCOMES[i % len(OUTCOMES)])
      for i, (kind, step) in enumerate(itertools.product(S3_SINK_KINDS, STEPS))),
    *itertools.product(SINK_KINDS, STEPS, OUTCOMES),
    *itertools.product(LIFECYCLE_KINDS, LIFECYCLE_STEPS, OUTCOMES),
    *itertools.product(LAST_CATALOG_CALL, ["between_catalog_calls"], OUTCOMES),
]
STOCK_METASTORES = [kind for kind in METASTORE_FIXTURES if kind != "embedded"]


def _on_stock(cases: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The Hive cases, each (kind, step) once with the task outcomes taking turns: the step decides
    what the catalog holds, the outcome only what reconcile does (the full matrix covers it)."""
    hive = [case for case in cases if case[0] in HIVE_HARNESSES]
    seen = {}
    for kind, step, outcome in hive:
        seen.setdefault((kind, step), []).append(outcome)
    return [
        (kind, step, outcomes[i % len(outcomes)]) for i, ((kind, step), outcomes) in enumerate(seen.items())
    ]


# Every case on the embedded metastore; the Hive ones, thinned, on each stock metastore.
MATRIX = [
    *((*case, "embedded") for case in FULL_MATRIX),
    *((*case, kind) for kind in STOCK_METASTORES for case in _on_stock(FULL_MATRIX)),
]


def new_attempt(harness: Any, case: Case) -> JournaledStagedTable:
    """The attempt under test (a lifecycle harness plans it from the case's table and versions)."""
    if isinstance(harness, (LifecycleHarness, HiveSinkHarness, JdbcSinkHarness)):
        return harness.new_attempt(case)
    return rh.new_attempt(case.kind, case.target, case.journal, harness.metastore_uri, case.task)


@pytest.mark.parametrize(
    ("kind", "step", "outcome", "metastore_kind"), MATRIX, ids=["-".join(case) for case in MATRIX]
)
def test_crash_then_reconcile(kind, step, outcome, metastore_kind, harness_of, request, tmp_path):
    harness = harness_of(request, kind, metastore_kind)
    case = harness.new_case(tmp_path, f"{step}-{outcome}")
    staged = new_attempt(harness, case)
    crash(harness, case, staged, step)
    new, action = expected_result(step, outcome)
    settle(harness, case, staged.attempt_id, outcome, new, action)


# -- real SIGKILLs ------------------------------------------------------------------------------------

KILLED = [
    ("hive_table", "after_written", "success"),
    # No Airflow task: the attempt records its process, and reconcile sees it gone at once.
    ("hive_table", "after_written", "no_task"),
    ("hive_partitions", "after_written", "failed"),
    ("hive_partitions", "after_catalog", "unknown"),
    ("hive_partitions_continuous", "after_catalog", "failed"),
    ("hive_partitions_discovered", "after_written", "success"),
    ("hive_partitions_discovered", "after_catalog", "failed"),
    ("jdbc_table", "after_written", "success"),
    ("jdbc_table", "after_written", "unknown"),
    ("hive_expire", "after_catalog", "failed"),
    ("hive_rollback", "after_written", "success"),
    ("hive_rollback_partitions", "after_catalog", "unknown"),
]


@pytest.fixture(scope="module")
def killed_build(harness_of, tmp_path_factory) -> Callable[[pytest.FixtureRequest, str], Any]:
    """Per metastore kind: one process with its own Spark session drives every KILLED attempt to its
    step, writes a marker and blocks; it is SIGKILLed once all of them are there."""
    done: dict[str, Any] = {}

    def build(request: pytest.FixtureRequest, metastore_kind: str) -> Any:
        if metastore_kind not in done:
            done[metastore_kind] = _killed_build(request, metastore_kind)
        return done[metastore_kind]

    def _killed_build(request: pytest.FixtureRequest, metastore_kind: str) -> Any:
        metastore = request.getfixturevalue(METASTORE_FIXTURES[metastore_kind])
        base = tmp_path_factory.mktemp(f"rm-killed-{metastore_kind}")
        cases, items = {}, []
        for kind, step, outcome in KILLED:
            if kind not in HIVE_HARNESSES and metastore_kind != "embedded":
                continue
            name = f"{kind}-{step}-{outcome}"
            harness = harness_of(request, kind, metastore_kind)
            case = harness.new_case(base / name, f"killed-{step}-{outcome}")
            if outcome == "no_task":
                case.task = None
            cases[name] = case
            item = {
                "name": name,
                "kind": kind,
                "step": step,
                "target": case.target,
                "journal": str(case.journal.root),
                "task": vars(case.task) if case.task else None,
            }
            if isinstance(harness, LifecycleHarness):  # planned here, from the case's table and versions
                staged = harness.new_attempt(case)
                staged.begin()
                item.update(attempt_id=staged.attempt_id, manifest=harness.manifest_of(staged))
            items.append(item)
        marker = base / "reached.json"
        plan = base / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "metastore_uri": metastore.uri,
                    "warehouse": metastore.warehouse,
                    "marker": str(marker),
                    "attempts": items,
                }
            )
        )
        log_path = base / "child.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.recovery_helpers", str(plan)],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
            )
        try:
            deadline = time.monotonic() + 300
            while not marker.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"the build process (exit {process.poll()}) did not reach its steps:\n"
                        + log_path.read_text()[-4000:]
                    )
                time.sleep(0.2)
            reached = json.loads(marker.read_text())
            # The journal as the process left it, read before the kill.
            before_kill = {name: cases[name].journal.require(reached[name]).state for name in reached}
            os.kill(process.pid, signal.SIGKILL)
            returncode = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        return cases, reached, before_kill, returncode

    return build


KILLED_ON = [
    *((*case, "embedded") for case in KILLED),
    *((*case, kind) for kind in STOCK_METASTORES for case in KILLED if case[0] in HIVE_HARNESSES),
]


@pytest.mark.parametrize(
    ("kind", "step", "outcome", "metastore_kind"), KILLED_ON, ids=["-".join(case) for case in KILLED_ON]
)
def test_sigkill_then_reconcile(kind, step, outcome, metastore_kind, killed_build, harness_of, request):
    cases, reached, before_kill, returncode = killed_build(request, metastore_kind)
    assert returncode == -signal.SIGKILL, f"the build process ended with {returncode}, not by SIGKILL"
    name = f"{kind}-{step}-{outcome}"
    case, attempt_id = cases[name], reached[name]
    assert before_kill[name] is AttemptState.WRITTEN
    harness = harness_of(request, kind, metastore_kind)
    staged = new_attempt(harness, case)
    assert staged.attempt_id == attempt_id or case.task is None  # the same task try: the same attempt
    if step == "after_catalog":
        harness.assert_serves(case, staged)
    new, action = expected_result(step, outcome)
    settle(harness, case, attempt_id, outcome, new, action)

