"""The compare-and-set of ``alter_table`` on the real metastore (Hive 2.3.10, HIVE-26882).

Every ``alter_table`` of ours sends the revision it read; a whole-table commit relies on that
alone and takes no table lock. These tests interleave the writers step by step in one process
(the multi-process races are in ``test_metadata_races``).
"""

from __future__ import annotations

import copy
import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import (
    REVISION_KEY,
    MetastoreClient,
    enforces_compare_and_set,
)
from airflow_provider_staged.catalogs.metastore.tables import (
    PARTITION_PROVIDER_KEY,
    current_location,
    new_table,
)
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.sink.api import WriterContext, commit_write
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.recovery import batch_prefix
from airflow_provider_staged.sink.tasks import new_write_id, write_task
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import commit_written
from airflow_provider_staged.staging.conflicts import retry_on_conflict
from airflow_provider_staged.staging.errors import (
    CatalogConflictError,
    StagingError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_sink import HiveAppendStagedTable, recorded_batch
from airflow_provider_staged.staging.kinds.hive_table import SINK_ROWS_KEY, HiveStagedTable
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import local_path, normalize_location
from tests.fixtures.metastore import new_database
from tests.integration import race_workers


@pytest.fixture(scope="module")
def database(metastore: MetastoreInfo) -> str:
    return new_database(metastore, "cas")


@pytest.fixture
def parquet(tmp_path: Path) -> str:
    path = tmp_path / "source.parquet"
    race_workers.write_source_parquet(path)
    return str(path)


@pytest.fixture
def lock_free(metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str) -> None:
    """Whole-table commits of this process go without the lock (its first replace probed)."""
    journal = str(tmp_path / "probe-journal")
    race_workers.commit_copy(metastore.uri, f"{database}.probed", journal, parquet, "create_or_replace")
    _replace(metastore.uri, f"{database}.probed", Path(journal), parquet)
    assert enforces_compare_and_set(metastore.uri)


def _manifest(tmp_path: Path) -> Manifest:
    """An empty version directory of the flat table's schema."""
    (tmp_path / "v0").mkdir(exist_ok=True)
    return Manifest(
        location=f"file:{tmp_path / 'v0'}",
        schema_json=race_workers.FLAT_SCHEMA_JSON,
        columns=list(race_workers.FLAT_COLUMNS),
        rows=0,
        bytes=0,
    )


def _replace(uri: str, target: str, journal: Path, parquet: str) -> HiveStagedTable:
    return race_workers.commit_copy(uri, target, str(journal), parquet, "replace")


def test_a_stale_write_is_refused_and_changes_nothing(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str
) -> None:
    target = f"{database}.stale"
    race_workers.commit_copy(metastore.uri, target, str(tmp_path / "journal"), parquet, "create")
    with MetastoreClient(metastore.uri) as first, MetastoreClient(metastore.uri) as second:
        mine, theirs = first.read_for_update(database, "stale"), second.read_for_update(database, "stale")
        assert mine.parameters[REVISION_KEY] == theirs.parameters[REVISION_KEY]
        mine.parameters["who"] = "first"
        first.alter_table(mine)
        theirs.parameters["who"] = "second"
        with pytest.raises(CatalogConflictError, match=f"{database}.stale changed after this writer read it"):
            second.alter_table(theirs)
        # A write needs a read of its own: a table this block never read is refused before any call.
        with pytest.raises(StagingError, match="without read_for_update first"):
            second.alter_table(new_table(TableIdentifier(database, "never_read"), _manifest(tmp_path), "v"))
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, "stale")
    assert stored.parameters["who"] == "first"
    assert stored.parameters[REVISION_KEY] == mine.parameters[REVISION_KEY] != theirs.parameters[REVISION_KEY]


def _append(uri: str, target: str, journal: Path, warehouse: str) -> HiveAppendStagedTable:
    """One unpartitioned sink append (batch 0 of ``race_workers.SINK_QUERY``) committed to ``target``."""
    sink = HiveSink(target, StagedSettings(uri, warehouse, str(journal)), native=False)
    query = race_workers.SINK_QUERY
    context = WriterContext(batch_prefix(query, 0) + new_write_id(), query, 0, "append",
                            race_workers.FLAT_SCHEMA_JSON, streaming=True)
    commit_write(sink, context, write_task(sink, context, iter(race_workers.sink_rows(0).to_batches())))
    return sink.commit_table(context.write_id, context.query_id, 0, True, "append")


@pytest.mark.parametrize("commit", ["whole_table", "unpartitioned_append"])
def test_a_commit_between_a_locked_writers_read_and_write_is_kept(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str, commit: str
) -> None:
    """The status writer's interleaving that lost commits before any guard: it reads (holding the
    lock), a commit lands meanwhile (not waiting for the lock: a whole-table switch, or a sink's
    unpartitioned append once the metastore's compare-and-set is known), the writer writes."""
    name = f"interleaved_{commit}"
    target = f"{database}.{name}"
    journal = tmp_path / "journal"
    race_workers.commit_copy(metastore.uri, target, str(journal), parquet, "create")
    with MetastoreClient(metastore.uri) as client:  # what the first locked commit of a process does
        client.probe_compare_and_set(client.get_table(database, name))
    reads = []
    committed: list[HiveStagedTable] = []

    def commit_meanwhile() -> HiveStagedTable:
        if commit == "whole_table":
            return _replace(metastore.uri, target, journal, parquet)
        return _append(metastore.uri, target, journal, metastore.warehouse)

    def write_status() -> None:
        with MetastoreClient(metastore.uri) as client, client.locked(database, name):
            table = client.read_for_update(database, name)
            reads.append(normalize_location(current_location(table)))
            if len(reads) == 1:  # the first time only: a commit lands between read and write
                worker = threading.Thread(target=lambda: committed.append(commit_meanwhile()))
                worker.start()
                worker.join(60)
                assert committed, f"the {commit} commit waited for the table lock"
            table.parameters["materialized.refresh-status"] = "ACTIVATED"
            client.alter_table(table)

    retry_on_conflict(write_status, "status")
    assert enforces_compare_and_set(metastore.uri)
    (landed,) = committed
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, name)
    assert stored.parameters["materialized.refresh-status"] == "ACTIVATED"
    assert len(reads) == 2
    if commit == "whole_table":
        assert reads[1] == normalize_location(landed.location) != reads[0]
        assert normalize_location(current_location(stored)) == normalize_location(landed.location)
    else:  # the append's batch and rows are kept beside the status, in the version it read
        assert reads[1] == reads[0] == normalize_location(current_location(stored))
        assert recorded_batch(stored, race_workers.SINK_QUERY) == 0
        assert stored.parameters[SINK_ROWS_KEY] == str(race_workers.sink_rows(0).num_rows)


def test_a_table_made_elsewhere_gets_a_revision_on_its_first_commit(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str
) -> None:
    table = new_table(TableIdentifier(database, "foreign"), _manifest(tmp_path), "v0")
    with MetastoreClient(metastore.uri) as client:
        client.thrift.create_table(table)  # as Spark or Hive would: no revision of ours
        assert REVISION_KEY not in client.get_table(database, "foreign").parameters
    staged = _replace(metastore.uri, f"{database}.foreign", tmp_path / "journal", parquet)
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, "foreign")
    assert normalize_location(current_location(stored)) == normalize_location(staged.location)
    assert stored.parameters.get(REVISION_KEY)
    assert staged.journal.require(staged.attempt_id).state is AttemptState.COMMITTED
    assert [r.state for r in FileJournal(tmp_path / "journal").records()] == [AttemptState.COMMITTED]


def test_the_commit_gives_up_with_a_clear_error_when_every_write_loses(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = f"{database}.contended"
    journal = tmp_path / "journal"
    first = race_workers.commit_copy(metastore.uri, target, str(journal), parquet, "create")
    staged = HiveStagedTable(
        TableIdentifier.parse(target), StagingPurpose.REPLACE_TABLE_AS, FileJournal(journal), metastore.uri
    )
    staged.begin()
    staged.written(race_workers.write_flat(staged, parquet))
    real_read = MetastoreClient.read_for_update

    def read_then_someone_writes(self: MetastoreClient, database_name: str, name: str):  # type: ignore[no-untyped-def]
        found = real_read(self, database_name, name)
        with MetastoreClient(metastore.uri) as other:  # another writer, right after every read
            table = real_read(other, database_name, name)
            table.parameters["other"] = uuid.uuid4().hex
            other.alter_table(table)
        return found

    monkeypatch.setattr(MetastoreClient, "read_for_update", read_then_someone_writes)
    monkeypatch.setattr("airflow_provider_staged.staging.conflicts.CONFLICT_ATTEMPTS", 3)
    with pytest.raises(CatalogConflictError, match=f"commit of {target}: 3 writes in a row lost"):
        staged.commit()
    monkeypatch.undo()
    assert staged.journal.require(staged.attempt_id).state is AttemptState.WRITTEN
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, "contended")
    assert normalize_location(current_location(stored)) == normalize_location(first.location)
    staged.commit()  # nothing landed: the same attempt commits once the writers stop
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, "contended")
    assert normalize_location(current_location(stored)) == normalize_location(staged.location)


def test_an_append_overtaken_by_a_replace_is_ordered_before_it(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sink append (under the table lock, or unlocked when unpartitioned) does not exclude a
    whole-table replace, which takes no lock: a replace landing after the append moved its files
    (into the version it read) makes the append's write read again. The outcome is the order
    append → replace: the replace's rows only, the batch recorded, and none of its rows counted."""
    target = f"{database}.append_vs_replace"
    journal = str(tmp_path / "journal")
    race_workers.commit_copy(metastore.uri, target, journal, parquet, "create")
    sink = HiveSink(target, StagedSettings(metastore.uri, metastore.warehouse, journal), native=False)
    replaces: list[HiveStagedTable] = []

    def replace_once(name: str) -> None:  # at the append's "files moved" step
        if name == "global_commit" and not replaces:
            replaces.append(race_workers.commit_copy(metastore.uri, target, journal, parquet, "replace"))

    monkeypatch.setattr("airflow_provider_staged.staging.kinds.hive_sink.fault_point", replace_once)
    context = WriterContext(
        batch_prefix(race_workers.SINK_QUERY, 0) + new_write_id(),
        race_workers.SINK_QUERY,
        0,
        "append",
        race_workers.FLAT_SCHEMA_JSON,
        partition_id=0,
        task_attempt_id=0,
        streaming=True,
    )
    staged = write_task(sink, context, iter(race_workers.sink_rows(0).to_batches()))
    commit_write(sink, context, staged)

    (replace,) = replaces
    with MetastoreClient(metastore.uri) as client:
        table = client.get_table(database, "append_vs_replace")
    location = normalize_location(current_location(table))
    assert location == normalize_location(replace.location)
    assert pq.read_table(local_path(location)).num_rows == pq.read_table(parquet).num_rows
    assert recorded_batch(table, race_workers.SINK_QUERY) == 0
    assert table.parameters[SINK_ROWS_KEY] == "0"
    assert {r.state for r in FileJournal(journal).records()} == {AttemptState.COMMITTED}


def test_a_create_or_replace_overtaken_by_a_create_replaces_it(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str, monkeypatch: pytest.MonkeyPatch,
    lock_free: None,
) -> None:
    """Two lock-free CREATE OR REPLACE of a new table: the second reads no table, the first
    creates it before the second's create. The second then replaces it, as it would have
    after waiting for the lock; it does not fail with "created by someone else"."""
    target = f"{database}.created_meanwhile"
    journal = str(tmp_path / "journal")
    second = HiveStagedTable(
        TableIdentifier.parse(target), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, FileJournal(journal),
        metastore.uri,
    )
    second.begin()
    second.written(race_workers.write_flat(second, parquet))
    firsts: list[HiveStagedTable] = []
    real_create = HiveStagedTable.create_target

    def first_creates_meanwhile(self: HiveStagedTable, txn, record, manifest) -> None:  # type: ignore[no-untyped-def]
        if self is second and not firsts:
            firsts.append(race_workers.commit_copy(metastore.uri, target, journal, parquet))
        real_create(self, txn, record, manifest)

    monkeypatch.setattr(HiveStagedTable, "create_target", first_creates_meanwhile)
    second.commit()
    monkeypatch.undo()

    (first,) = firsts
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, "created_meanwhile")
    assert normalize_location(current_location(stored)) == normalize_location(second.location)
    assert pq.read_table(local_path(second.location)).num_rows == pq.read_table(parquet).num_rows
    records = {r.attempt_id: r for r in FileJournal(journal).records()}
    assert records[second.attempt_id].state is AttemptState.COMMITTED
    assert records[first.attempt_id].state is AttemptState.COMMITTED
    # The first version is superseded (retention deletes it later), not lost from the record.
    superseded = records[second.attempt_id].superseded_location
    assert normalize_location(superseded) == normalize_location(first.location)


def _replace_before(
    monkeypatch: pytest.MonkeyPatch, kind: type, method: str, uri: str, target: str, journal: str,
    purpose: StagingPurpose = StagingPurpose.REPLACE_TABLE_AS,
) -> list[HiveStagedTable]:
    """Make ``kind.method`` first commit a lock-free whole-table ``purpose`` (a replace) of
    ``target`` (partitioned by ds, refresh 2's rows), once; that commit lands in the list returned."""
    replaces: list[HiveStagedTable] = []
    real = getattr(kind, method)

    def replaced_first(self, *args):  # type: ignore[no-untyped-def]
        if not replaces:
            replace = HiveStagedTable(TableIdentifier.parse(target), purpose, FileJournal(journal), uri)
            replace.begin()
            commit_written(replace, race_workers.write_partitions(replace, 2))
            replaces.append(replace)
        return real(self, *args)

    monkeypatch.setattr(kind, method, replaced_first)
    return replaces


def _assert_the_replace_stands(uri: str, target: str, replace: HiveStagedTable) -> None:
    """``target`` reads ``replace``'s version from its directories, with no catalog partitions."""
    with MetastoreClient(uri) as client:
        table = client.get_table(*target.split("."))
        partitions = client.partitions(*target.split("."))
    assert normalize_location(current_location(table)) == normalize_location(replace.location)
    assert table.parameters.get(PARTITION_PROVIDER_KEY) != "catalog"
    assert [normalize_location(p.sd.location) for p in partitions] == []


def test_a_replace_between_a_partitioned_create_and_its_partitions_stands(
    metastore: MetastoreInfo, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock_free: None
) -> None:
    """A first refresh creates its table, then (same lock) registers its partitions; a lock-free
    replace can land in between. The outcome is the order create → replace: the refresh does not
    register its partitions over the replaced table (which Spark would then read from the
    refresh's version, a directory the replace superseded and retention deletes)."""
    target = f"{database}.created_then_replaced"
    journal = str(tmp_path / "journal")
    refresh, manifest = race_workers.written_refresh(metastore.uri, target, journal, 1)
    replaces = _replace_before(
        monkeypatch, HivePartitionStagedTable, "_register_created", metastore.uri, target, journal
    )
    commit_written(refresh, manifest)
    monkeypatch.undo()

    (replace,) = replaces
    _assert_the_replace_stands(metastore.uri, target, replace)
    records = {r.attempt_id: r for r in FileJournal(journal).records()}
    assert normalize_location(records[replace.attempt_id].superseded_location) == normalize_location(
        refresh.location
    )
    assert records[refresh.attempt_id].state is AttemptState.COMMITTED
    assert not refresh.is_published(records[refresh.attempt_id])  # superseded, nothing points at it


def test_a_replace_between_a_sink_create_and_its_partitions_stands(
    metastore: MetastoreInfo, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock_free: None
) -> None:
    """The same order for the first micro-batch of a sink whose table tracks its partitions (a
    CONTINUOUS materialized table's): create → replace, the sink registers nothing over it."""
    target = f"{database}.sink_created_then_replaced"
    journal = str(tmp_path / "journal")
    settings = StagedSettings(metastore.uri, metastore.warehouse, journal)
    sink = HiveSink(target, settings, native=False, partition_by=["ds"], track_partitions=True)
    replaces = _replace_before(
        monkeypatch, HiveAppendStagedTable, "_track_partitions", metastore.uri, target, journal
    )
    context = WriterContext(
        batch_prefix(race_workers.SINK_QUERY, 0) + new_write_id(), race_workers.SINK_QUERY, 0, "append",
        race_workers.PART_SCHEMA_JSON, partition_id=0, task_attempt_id=0, streaming=True,
    )
    rows = pa.table({"refresh": pa.array([1, 1], pa.int32()), "row": pa.array([0, 1], pa.int32()),
                     "ds": pa.array(["b0", "b1"])})
    commit_write(sink, context, write_task(sink, context, iter(rows.to_batches())))
    monkeypatch.undo()

    (replace,) = replaces
    _assert_the_replace_stands(metastore.uri, target, replace)
    assert {r.state for r in FileJournal(journal).records()} == {AttemptState.COMMITTED}


def _written(
    kind: str, uri: str, target: str, journal: str, purpose: str, parquet: str
) -> HiveStagedTable:
    """An existing ``target`` and a WRITTEN attempt of ``kind`` that replaces it: a whole-table
    one (the flat table), or a partition refresh (refresh 1's table, refresh 2's rows)."""
    identifier, attempts = TableIdentifier.parse(target), FileJournal(journal)
    if kind == "table":
        race_workers.commit_copy(uri, target, journal, parquet, "create")
        staged = HiveStagedTable(identifier, StagingPurpose.parse(purpose), attempts, uri)
        staged.begin()
        staged.written(race_workers.write_flat(staged, parquet))
        return staged
    commit_written(*race_workers.written_refresh(uri, target, journal, 1))
    refresh = HivePartitionStagedTable(
        identifier, ["ds"], {}, attempts, uri, purpose=StagingPurpose.parse(purpose)
    )
    refresh.begin()
    refresh.written(race_workers.write_partitions(refresh, 2))
    return refresh


@pytest.mark.parametrize("purpose", ["create_or_replace", "replace"])
@pytest.mark.parametrize("kind", ["table", "partitions"])
def test_a_table_dropped_between_a_commits_read_and_write(
    metastore: MetastoreInfo, database: str, tmp_path: Path, parquet: str, monkeypatch: pytest.MonkeyPatch,
    lock_free: None, purpose: str, kind: str,
) -> None:
    """DROP TABLE lands after the commit read the table: nothing waits for a whole-table commit
    (lock-free), and Spark's DROP takes no lock, so it also comes between a locked partition
    commit's read and its partition calls. A CREATE OR REPLACE reads again and creates the table
    (a refresh with its partitions, tracked); a REPLACE fails, naming the table, and creates nothing."""
    name = f"dropped_{kind}_{purpose}"
    target = f"{database}.{name}"
    staged = _written(kind, metastore.uri, target, str(tmp_path / "journal"), purpose, parquet)
    def dropped_first(real):  # type: ignore[no-untyped-def]
        def call(self, *args):  # type: ignore[no-untyped-def]
            with MetastoreClient(metastore.uri) as other:
                if other.get_table(database, name) is not None:
                    other.thrift.drop_table(database, name, False)
            return real(self, *args)
        return call

    monkeypatch.setattr(type(staged), "swap", dropped_first(type(staged).swap))
    # A refresh's commit prepared when its output was recorded is one call, read before it.
    switch = dropped_first(MetastoreClient.switch_partitions)
    monkeypatch.setattr(MetastoreClient, "switch_partitions", switch)
    if purpose == "replace":
        with pytest.raises(TableNotFoundError, match=f"table {target} was dropped before the commit"):
            staged.commit()
        monkeypatch.undo()
        with MetastoreClient(metastore.uri) as client:
            assert client.get_table(database, name) is None
        assert staged.journal.require(staged.attempt_id).state is AttemptState.WRITTEN
        return
    staged.commit()
    monkeypatch.undo()
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, name)
        if kind == "partitions":
            assert stored.parameters.get(PARTITION_PROVIDER_KEY) == "catalog"
            assert race_workers.read_partitions(client, database, name) == race_workers.read_after(2)
    assert normalize_location(current_location(stored)) == normalize_location(staged.location)
    assert staged.journal.require(staged.attempt_id).state is AttemptState.COMMITTED


def test_a_partitioned_create_overtaken_by_a_create_refreshes_it(
    metastore: MetastoreInfo, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock_free: None
) -> None:
    """A first refresh (CREATE OR REPLACE, under the table's lock) reads no table; a lock-free CTAS
    (or Spark, neither takes the lock) creates it before the refresh's create. The refresh then
    reads again and refreshes the table it finds, as it would have after waiting: it does not fail
    with "created by someone else", and the table ends with the refresh's partitions, tracked."""
    target = f"{database}.partitions_created_meanwhile"
    journal = str(tmp_path / "journal")
    refresh = HivePartitionStagedTable(
        TableIdentifier.parse(target), ["ds"], {}, FileJournal(journal), metastore.uri
    )
    refresh.begin()
    manifest = race_workers.write_partitions(refresh, 3)
    creates = _replace_before(
        monkeypatch, HivePartitionStagedTable, "create_target", metastore.uri, target, journal,
        StagingPurpose.CREATE_TABLE_AS,
    )
    commit_written(refresh, manifest)
    monkeypatch.undo()

    (create,) = creates
    with MetastoreClient(metastore.uri) as client:
        stored = client.get_table(database, "partitions_created_meanwhile")
        partitions = race_workers.read_partitions(client, database, "partitions_created_meanwhile")
    assert stored.parameters.get(PARTITION_PROVIDER_KEY) == "catalog"
    assert normalize_location(current_location(stored)) == normalize_location(create.location)
    assert partitions == race_workers.read_after(3)
    records = {r.attempt_id: r for r in FileJournal(journal).records()}
    assert {records[a].state for a in (create.attempt_id, refresh.attempt_id)} == {AttemptState.COMMITTED}


def test_a_partitioned_create_finding_the_table_made_before_its_output_was_recorded_fails(
    metastore: MetastoreInfo, database: str, tmp_path: Path
) -> None:
    """A create-only partitioned build began on a missing table; another writer created it before
    the build's output was recorded. Nothing is prepared to switch into that table: the commit
    fails saying so, and the other writer's table and partitions stay as they were."""
    target = f"{database}.partitions_create_only"
    journal = str(tmp_path / "journal")
    create = HivePartitionStagedTable(
        TableIdentifier.parse(target), ["ds"], {}, FileJournal(journal), metastore.uri,
        purpose=StagingPurpose.CREATE_TABLE_AS,
    )
    create.begin()
    manifest = race_workers.write_partitions(create, 2)
    commit_written(*race_workers.written_refresh(metastore.uri, target, journal, 1))  # the other writer
    create.written(manifest)
    with pytest.raises(TableAlreadyExistsError, match="created by someone else"):
        create.commit()
    with MetastoreClient(metastore.uri) as client:
        kept = race_workers.read_partitions(client, database, "partitions_create_only")
    assert kept == race_workers.read_after(1)


def _prepared_refresh(uri: str, target: str, journal: str) -> HivePartitionStagedTable:
    """Refresh 1 committed; refresh 2 written, its commit prepared (one switch, no lock)."""
    commit_written(*race_workers.written_refresh(uri, target, journal, 1))
    staged, manifest = race_workers.written_refresh(uri, target, journal, 2)
    staged.written(manifest)
    return staged


@pytest.mark.parametrize("change", ["moved", "added", "dropped", "table"])
def test_a_prepared_refresh_whose_table_changed_commits_under_the_lock(
    metastore: MetastoreInfo, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Between the prepared commit's reads (when the output was recorded) and its one switch,
    another writer changes the table: the switch is refused, changing nothing, and the commit
    does it all again under the table's lock, over what the other writer left."""
    name = f"prepared_{change}"
    journal = str(tmp_path / "journal")
    staged = _prepared_refresh(metastore.uri, f"{database}.{name}", journal)
    refused = race_workers.record_switches(monkeypatch.setattr)["refused"]
    with MetastoreClient(metastore.uri) as other:
        if change == "moved":  # another refresh of the same partitions committed first
            commit_written(*race_workers.written_refresh(metastore.uri, f"{database}.{name}", journal, 3))
        elif change == "added":  # a partition inside the spec that the refresh does not write
            table = other.get_table(database, name)
            storage = copy.deepcopy(table.sd)
            storage.location = f"{normalize_location(staged.location)}-other"
            added = ttypes.Partition(values=["x"], dbName=database, tableName=name, sd=storage)
            other.add_partitions([added])
        elif change == "dropped":
            other.drop_partitions(database, name, ["ds=b0"])
        else:  # a status write: the table's own object
            table = other.read_for_update(database, name)
            table.parameters["materialized.refresh-status"] = "ACTIVATED"
            other.alter_table(table)
    staged.commit()
    assert len(refused) == 1 and "changed since this writer read them" in refused[0], refused
    with MetastoreClient(metastore.uri) as client:
        seen = race_workers.read_partitions(client, database, name)
    emptied = {"n3": [], "x": []}  # inside the spec, not written by refresh 2: replaced by nothing
    assert seen == {**race_workers.read_after(2), **{k: v for k, v in emptied.items() if k in seen}}
    assert set(seen) - set(race_workers.read_after(2)) == {"moved": {"n3"}, "added": {"x"}}.get(change, set())
    record = staged.journal.require(staged.attempt_id)
    assert record.state is AttemptState.COMMITTED
    if change == "moved":  # what refresh 3 published is superseded by this commit, not orphaned
        assert any("_v=" in location for location in record.superseded_location)


def test_a_prepared_switch_waits_for_a_locked_writer(
    metastore: MetastoreInfo, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another writer holds the table's lock (its calls are not all made), the prepared
    switch is refused; after it lets go, the same switch lands."""
    staged = _prepared_refresh(metastore.uri, f"{database}.prepared_locked", str(tmp_path / "journal"))
    refused = race_workers.record_switches(monkeypatch.setattr)["refused"]
    held, release = threading.Event(), threading.Event()

    def locked_writer() -> None:
        with MetastoreClient(metastore.uri) as other, other.locked(database, "prepared_locked"):
            held.set()
            release.wait(60)

    writer = threading.Thread(target=locked_writer)
    writer.start()
    try:
        assert held.wait(30)
        prepared = staged._prepared
        refusal = pytest.raises(CatalogConflictError, match="holds the table's lock")
        with MetastoreClient(metastore.uri) as client, refusal:
            client.switch_partitions(database, "prepared_locked", prepared.switched, prepared.expected)
    finally:
        release.set()
        writer.join()
    staged.commit()
    assert len(refused) == 1  # the one above: the commit's own switch landed
    with MetastoreClient(metastore.uri) as client:
        assert race_workers.read_partitions(client, database, "prepared_locked") == race_workers.read_after(2)
