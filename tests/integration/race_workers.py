"""Worker processes of the metadata race tests (``test_metadata_races``), started with spawn.

Each worker waits for a start event, does its loop, and writes what it saw as JSON to
``out_path``; the test compares the workers' timelines. Data is written with pyarrow straight
into the attempt's version directory (the catalog operation is what is under test, not Spark).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient, enforces_compare_and_set
from airflow_provider_staged.catalogs.metastore.tables import VERSION_KEY, current_location, tracks_partitions
from airflow_provider_staged.engine.spark_job import data_files
from airflow_provider_staged.materialized.catalog_status import (
    REFRESH_HANDLER_KEY,
    REFRESH_STATUS_KEY,
    CatalogStatusStore,
)
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus
from airflow_provider_staged.sink.api import WriterContext, commit_write
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.recovery import batch_prefix
from airflow_provider_staged.sink.tasks import new_write_id, write_task
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import commit_written
from airflow_provider_staged.staging.errors import CatalogConflictError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import (
    HivePartitionStagedTable,
    discovered_partitions,
)
from airflow_provider_staged.staging.kinds.hive_sink import recorded_batch
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable, sweep_versions
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy, parse_version_dir, version_dir_name
from airflow_provider_staged.storage.files import local_path, normalize_location

# The unpartitioned table of the commit race: (id bigint, label string).
FLAT_SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "label", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
FLAT_COLUMNS = [("id", "bigint"), ("label", "string")]
# The partitioned table of the reader race: (refresh int, row int) PARTITIONED BY (ds string).
PART_SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "refresh", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "row", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "ds", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
PART_COLUMNS = [("refresh", "int"), ("row", "int"), ("ds", "string")]
ROWS_PER_PARTITION = 2
BASE_PARTITIONS = ("b0", "b1")


def write_source_parquet(path: Path) -> None:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "label": pa.array(["a", "b", "c"])})
    pq.write_table(table, path)


def commit_copy(
    uri: str, target: str, journal_dir: str, parquet_file: str, purpose: str = "create_or_replace"
) -> HiveStagedTable:
    """One attempt of the unpartitioned table: begin, copy the Parquet file, written, commit."""
    staged = HiveStagedTable(
        TableIdentifier.parse(target), StagingPurpose.parse(purpose), FileJournal(journal_dir), uri
    )
    staged.begin()
    write_and_commit(staged, parquet_file)
    return staged


def write_flat(staged: HiveStagedTable, parquet_file: str) -> Manifest:
    directory = local_path(staged.location)
    directory.mkdir(parents=True)
    shutil.copy(parquet_file, directory / "part-00000.parquet")
    return Manifest(
        location=staged.location,
        schema_json=FLAT_SCHEMA_JSON,
        columns=list(FLAT_COLUMNS),
        files=[DataFile(**item) for item in data_files(directory)],
    )


def write_and_commit(staged: HiveStagedTable, parquet_file: str) -> None:
    commit_written(staged, write_flat(staged, parquet_file))


def committer(
    uri: str,
    target: str,
    journal_dir: str,
    parquet_file: str,
    commits: int,
    ready: Any,
    go: Any,
    done: Any,
    out_path: str,
) -> None:
    """Commit ``commits`` versions; after each, read the table back (location + status)."""
    database, table = target.split(".")
    seen: list[dict[str, Any]] = []
    error = None
    ready.set()
    go.wait()
    try:
        for index in range(commits):
            t0 = time.monotonic()
            staged = commit_copy(uri, target, journal_dir, parquet_file)
            t1 = time.monotonic()
            own = normalize_location(staged.location)
            # Whether the commit went without the table lock (its switch a compare-and-set).
            lock_free = enforces_compare_and_set(uri)
            seen.append({"index": index, "t0": t0, "t1": t1, "own": own, "lock_free": lock_free,
                         **read_back(uri, database, table)})
    except BaseException as err:  # reported to the test, which fails with it
        error = repr(err)
    finally:
        done.set()
        Path(out_path).write_text(json.dumps({"commits": seen, "error": error}))


def paced_replacer(
    uri: str, target: str, journal_dir: str, parquet_file: str, commits: int, pause: float, go: Any,
    out_path: str,
) -> None:
    """Replace the table ``commits`` times, ``pause`` seconds apart: a slow refresh's cadence,
    where the newest commit in the journal is older than a sweep's grace when the next lands."""
    error = None
    go.wait()
    try:
        for _ in range(commits):
            commit_copy(uri, target, journal_dir, parquet_file)
            time.sleep(pause)
    except BaseException as err:  # reported to the test, which fails with it
        error = repr(err)
    finally:
        Path(out_path).write_text(json.dumps({"error": error}))


def version_sweeper(
    uri: str, target: str, journal_dir: str, root: str, grace: float, go: Any, stop: Any, out_path: str
) -> None:
    """Sweep the table's versions (keep none past ``grace`` seconds) in a loop until ``stop``;
    record each deleted version with the time its sweep started (the sweep's ``now``)."""
    purpose = StagingPurpose.CREATE_OR_REPLACE_TABLE_AS
    staged = HiveStagedTable(TableIdentifier.parse(target), purpose, FileJournal(journal_dir), uri)
    policy = RetentionPolicy(keep_versions=0, max_age_seconds=None, grace_seconds=grace)
    deleted: list[dict[str, Any]] = []
    sweeps, error = 0, None
    go.wait()
    try:
        while not stop.is_set():
            started = time.time()
            deleted += [{"location": location, "at": started}
                        for location in sweep_versions(staged, policy, root, now=started)]
            sweeps += 1
    except BaseException as err:  # reported to the test, which fails with it
        error = repr(err)
    finally:
        Path(out_path).write_text(json.dumps({"deleted": deleted, "sweeps": sweeps, "error": error}))


def read_back(uri: str, database: str, table: str) -> dict[str, Any]:
    """What a writer sees right after its write: the table's version, status and sink batch."""
    with MetastoreClient(uri) as client:
        found = client.get_table(database, table)
    params = found.parameters or {}
    return {
        "observed": normalize_location(current_location(found)),
        "handler": params.get(REFRESH_HANDLER_KEY),
        "status": params.get(REFRESH_STATUS_KEY),
        "batch": recorded_batch(found, SINK_QUERY),
    }


def status_value(index: int) -> tuple[RefreshStatus, str]:
    status = RefreshStatus.ACTIVATED if index % 2 == 0 else RefreshStatus.SUSPENDED
    return status, f"writer-{index}"


def status_writer(
    uri: str,
    target: str,
    definition_path: str,
    ready: Any,
    go: Any,
    done: Any,
    out_path: str,
    max_writes: int = 5000,
) -> None:
    """Alternate distinct status values until the committer is done; read back after each."""
    identifier = TableIdentifier.parse(target)
    store = CatalogStatusStore(uri)
    seen: list[dict[str, Any]] = []
    error = None
    ready.set()
    go.wait()
    try:
        index = 0
        while not done.is_set() and index < max_writes:
            status, handler = status_value(index)
            t0 = time.monotonic()
            where = store.save(identifier, definition_path, status, handler)
            t1 = time.monotonic()
            found = read_back(uri, identifier.database, identifier.table)
            found["status_ok"] = found["status"] == status.value
            found["handler_ok"] = found["handler"] == handler
            seen.append({"index": index, "t0": t0, "t1": t1, "where": where, **found})
            index += 1
    except BaseException as err:
        error = repr(err)
    finally:
        Path(out_path).write_text(json.dumps({"writes": seen, "error": error}))


# -- the Hive sink ---------------------------------------------------------------------------

# The streaming query of the sink race: its micro-batch ids are the write indexes.
SINK_QUERY = "qrace"
SINK_ROWS = 3


def sink_rows(index: int) -> pa.Table:
    """Micro-batch ``index``'s rows: ids no other write has, labelled ``w<index>``."""
    ids = [1000 + SINK_ROWS * index + k for k in range(SINK_ROWS)]
    return pa.table({"id": pa.array(ids, pa.int64()), "label": pa.array([f"w{index}"] * SINK_ROWS)})


def sink_mode(index: int, overwrite_every: int) -> str:
    return "overwrite" if (index + 1) % overwrite_every == 0 else "append"


def sink_committer(
    uri: str,
    warehouse: str,
    target: str,
    journal_dir: str,
    writes: int,
    overwrite_every: int,
    ready: Any,
    go: Any,
    done: Any,
    out_path: str,
) -> None:
    """Micro-batches 0..writes-1 of one streaming query through the Hive sink's writer and
    committers (the runtime's own calls, without Spark); read the table back after each."""
    database, table = target.split(".")
    sink = HiveSink(target, StagedSettings(uri, warehouse, journal_dir), native=False)
    seen: list[dict[str, Any]] = []
    error = None
    ready.set()
    go.wait()
    try:
        for index in range(writes):
            mode = sink_mode(index, overwrite_every)
            context = WriterContext(
                batch_prefix(SINK_QUERY, index) + new_write_id(), SINK_QUERY, index, mode, FLAT_SCHEMA_JSON,
                partition_id=0, task_attempt_id=index, streaming=True,
            )
            t0 = time.monotonic()
            staged = write_task(sink, context, iter(sink_rows(index).to_batches()))
            published = commit_write(sink, context, staged)
            t1 = time.monotonic()
            # An overwrite's version directory is its own (a staged replace); an append has none.
            own = f"{sink.root()}/{version_dir_name(context.write_id)}" if mode == "overwrite" else None
            seen.append(
                {"index": index, "t0": t0, "t1": t1, "mode": mode, "write_id": context.write_id,
                 "published": published, "own": own and normalize_location(own),
                 **read_back(uri, database, table)}
            )
    except BaseException as err:
        error = repr(err)
    finally:
        done.set()
        Path(out_path).write_text(json.dumps({"commits": seen, "error": error}))


# -- the partitioned table ------------------------------------------------------------------


def partitions_of_refresh(refresh: int) -> list[str]:
    """Refresh k rewrites b0, b1, n1..n(k-1) and adds n(k)."""
    return [*BASE_PARTITIONS, *(f"n{j}" for j in range(1, refresh + 1))]


def refresh_partitions(uri: str, target: str, journal_dir: str, refresh: int) -> tuple[float, float]:
    """One partition refresh (spec {}), every row tagged with ``refresh``; returns when its
    commit (the catalog calls) started and ended."""
    staged, manifest = written_refresh(uri, target, journal_dir, refresh)
    started = time.monotonic()
    commit_written(staged, manifest)
    return started, time.monotonic()


def written_refresh(
    uri: str, target: str, journal_dir: str, refresh: int
) -> tuple[HivePartitionStagedTable, Manifest]:
    """A begun partition refresh (spec {}) whose files are written: the staged table and its manifest."""
    staged = HivePartitionStagedTable(
        TableIdentifier.parse(target), ["ds"], {}, FileJournal(journal_dir), uri
    )
    staged.begin()
    return staged, write_partitions(staged, refresh)


def write_partitions(staged: HiveStagedTable, refresh: int, partitions: list[str] | None = None) -> Manifest:
    """Refresh ``refresh``'s partitions (default :func:`partitions_of_refresh`) written into
    ``staged``'s version directory, every row tagged with ``refresh``: their manifest."""
    root = local_path(staged.location)
    rows = pa.table(
        {
            "refresh": pa.array([refresh] * ROWS_PER_PARTITION, pa.int32()),
            "row": pa.array(range(ROWS_PER_PARTITION), pa.int32()),
        }
    )
    for ds in partitions or partitions_of_refresh(refresh):
        (root / f"ds={ds}").mkdir(parents=True)
        pq.write_table(rows, root / f"ds={ds}" / "part-00000.parquet")
    return Manifest(
        location=staged.location,
        schema_json=PART_SCHEMA_JSON,
        columns=list(PART_COLUMNS),
        partition_columns=["ds"],
        files=[DataFile(**item) for item in data_files(root)],
    )


def read_partitions(client: MetastoreClient, database: str, table: str) -> dict[str, list[int]]:
    """What a reader sees: each listed partition's ``refresh`` values (empty: no rows)."""
    return {p.values[0]: _tags(p.sd.location) for p in client.partitions(database, table)}


def _tags(directory: str) -> list[int]:
    """The ``refresh`` values of the rows of the Parquet files in a partition directory."""
    files = sorted(local_path(directory).glob("*.parquet"))
    return [tag for path in files for tag in pq.read_table(path, columns=["refresh"])["refresh"].to_pylist()]


def read_after(refresh: int) -> dict[str, list[int]]:
    """What :func:`read_partitions` sees of a table that refresh ``refresh`` alone wrote."""
    return {ds: [refresh] * ROWS_PER_PARTITION for ds in partitions_of_refresh(refresh)}


def classify(seen: dict[str, list[int]]) -> tuple[str, int | None]:
    """("ok", r) when the read is exactly refresh r (plus, at most, refresh r+1's new partition
    registered empty); ("mixed", None) or ("missing", None) otherwise."""
    tags = {value for values in seen.values() for value in values}
    if len(tags) != 1:
        return ("mixed" if len(tags) > 1 else "missing"), None
    (refresh,) = tags
    for ds in partitions_of_refresh(refresh):
        if seen.get(ds) != [refresh] * ROWS_PER_PARTITION:
            return "missing", None
    extra = set(seen) - set(partitions_of_refresh(refresh))
    if extra - {f"n{refresh + 1}"} or any(seen[ds] for ds in extra):
        return "mixed", None
    return ("placeholder" if extra else "ok"), refresh


def listed_names(client: MetastoreClient, database: str, table: str) -> dict[str, list[int]]:
    """What a reader of the catalog alone sees: each listed partition's values (no files read;
    a half-read partition has none)."""
    return {"/".join(p.values): [] for p in client.partitions(database, table)}


def whole_drop_or_add(seen: dict[str, list[int]]) -> tuple[str, int | None]:
    """("ok", 1) with every partition of refresh DROPPED_AFTER, ("ok", 0) with the base ones
    alone (all of a drop of the others, or none of their add); ("mixed", None) otherwise."""
    for state, partitions in enumerate((BASE_PARTITIONS, partitions_of_refresh(DROPPED_AFTER))):
        if sorted(seen) == sorted(partitions):
            return "ok", state
    return "mixed", None


def table_read(client: MetastoreClient, database: str, table: str) -> dict[str, list[int]]:
    """What a reader of the table object sees: the version its location names and the one its
    parameters name (one commit writes both)."""
    found = client.get_table(database, table)
    location = parse_version_dir(found.sd.location.rsplit("/", 1)[-1])
    return {"location": [location], "parameter": [(found.parameters or {}).get(VERSION_KEY)]}


def one_version(seen: dict[str, list[int]]) -> tuple[str, int | None]:
    """("ok", None) when the location and the parameters are one commit's; ("mixed", None) when
    they name two, or the location is no version directory."""
    one = seen["location"] == seen["parameter"] and seen["location"] != [None]
    return ("ok" if one else "mixed"), None


DROPPED_AFTER = 8  # the drop test's table: b0, b1, n1..n8; one call drops n1..n8, one adds them


def reader(
    uri: str, target: str, ready: Any, go: Any, done: Any, reads: Any, out_path: str,
    read: Callable[[MetastoreClient, str, str], dict[str, list[int]]] = read_partitions,
    judge: Callable[[dict[str, list[int]]], tuple[str, int | None]] = classify,
) -> None:
    """``read`` the partitioned table in a loop until ``done``; ``judge`` every read."""
    database, table = target.split(".")
    seen: list[dict[str, Any]] = []
    error = None
    try:
        with MetastoreClient(uri) as client:
            ready.set()
            go.wait()
            while not done.is_set():
                t0 = time.monotonic()
                try:
                    state = read(client, database, table)
                    verdict, refresh = judge(state)
                except FileNotFoundError as err:  # a listed location without its files
                    state, verdict, refresh = {"error": repr(err)}, "missing", None
                t1 = time.monotonic()
                entry: dict[str, Any] = {"t0": t0, "t1": t1, "verdict": verdict, "refresh": refresh}
                if verdict in ("mixed", "missing"):
                    entry["state"] = state
                seen.append(entry)
                with reads.get_lock():
                    reads.value += 1
    except BaseException as err:
        error = repr(err)
    finally:
        ready.set()
        Path(out_path).write_text(json.dumps({"reads": seen, "error": error}))


def hold_lock(uri: str, database: str, table: str, locked: Any, release: Any) -> None:
    """Take the table's metastore lock and keep it until ``release`` (the test SIGKILLs us first)."""
    with MetastoreClient(uri) as client, client.locked(database, table):
        locked.set()
        release.wait()


def fresh_table_creator(
    uri: str, database: str, journal_dir: str, parquet_file: str, rounds: int, barrier: Any, out_path: str
) -> None:
    """Per round, CREATE OR REPLACE a table that does not exist yet, committing at the same moment
    as the other worker (``barrier``); this process commits lock-free, as a long-lived one does
    after its first replace."""
    from airflow_provider_staged.staging.errors import CatalogConflictError

    seen: list[dict[str, Any]] = []
    conflicts: list[int] = []
    error = None
    real_create = HiveStagedTable.create_new_table

    def counted_create(self: HiveStagedTable, txn: MetastoreClient, manifest: Manifest) -> None:
        try:
            real_create(self, txn, manifest)
        except CatalogConflictError:
            conflicts.append(len(seen))
            raise

    HiveStagedTable.create_new_table = counted_create  # type: ignore[method-assign]
    try:
        probe = f"{database}.probe_{Path(out_path).stem}"
        commit_copy(uri, probe, journal_dir, parquet_file, "create")
        commit_copy(uri, probe, journal_dir, parquet_file, "replace")  # its begin probes the metastore
        for index in range(rounds):
            staged = HiveStagedTable(
                TableIdentifier(database, f"fresh_{index}"), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS,
                FileJournal(journal_dir), uri,
            )
            staged.begin()
            staged.written(write_flat(staged, parquet_file))
            barrier.wait(60)
            staged.commit()
            own = normalize_location(staged.location)
            seen.append({"index": index, "attempt": staged.attempt_id, "own": own,
                         "lock_free": enforces_compare_and_set(uri)})
    except BaseException as err:  # reported to the test, which fails with it
        error = repr(err)
        barrier.abort()
    finally:
        Path(out_path).write_text(json.dumps({"rounds": seen, "conflicts": conflicts, "error": error}))


def table_writer(
    uri: str, target: str, journal_dir: str, kind: str, tags: list[int], ready: Any, go: Any, out_path: str
) -> None:
    """Per tag, one build of partitions b0 and b1 with rows tagged so: a partition refresh (a kind
    ``refresh...``: spec {}, its commit prepared when written) or a whole-table replace (lock-free
    once its first begin probed); right after each commit, the build Spark reads."""
    seen: list[dict[str, Any]] = []
    error = None
    switches = record_switches()
    ready.set()
    go.wait()
    try:
        for tag in tags:
            identifier, journal = TableIdentifier.parse(target), FileJournal(journal_dir)
            staged: HiveStagedTable = (
                HivePartitionStagedTable(identifier, ["ds"], {}, journal, uri) if kind.startswith("refresh")
                else HiveStagedTable(identifier, StagingPurpose.REPLACE_TABLE_AS, journal, uri)
            )
            staged.begin()
            manifest = write_partitions(staged, tag, list(BASE_PARTITIONS))
            t0 = time.monotonic()
            commit_written(staged, manifest)
            t1 = time.monotonic()
            with MetastoreClient(uri) as client:
                _, after = one_build(spark_view(client, *target.split(".")))
            seen.append({"tag": tag, "attempt": staged.attempt_id, "t0": t0, "t1": t1, "after": after,
                         "lock_free": enforces_compare_and_set(uri)})
    except BaseException as err:  # reported to the test, which fails with it
        error = repr(err)
    finally:
        Path(out_path).write_text(json.dumps({"builds": seen, "error": error, "switches": switches}))


def record_switches(patch: Callable[[Any, str, Any], None] = setattr) -> dict[str, list[str]]:
    """Record this process's prepared partition switches: ``landed`` ones, and the messages of
    the ``refused`` ones (a compare-and-set lost); ``patch`` installs the recorder (a test's
    ``monkeypatch.setattr`` undoes it)."""
    switches: dict[str, list[str]] = {"landed": [], "refused": []}
    real = MetastoreClient.switch_partitions

    def switch(self: MetastoreClient, *args: Any) -> None:
        try:
            real(self, *args)
        except CatalogConflictError as conflict:
            switches["refused"].append(str(conflict))
            raise
        switches["landed"].append(self.uri)

    patch(MetastoreClient, "switch_partitions", switch)
    return switches


def spark_view(client: MetastoreClient, database: str, table: str) -> dict[str, list[int]]:
    """What Spark reads, as :func:`read_partitions`: the catalog's partitions of a table that tracks
    them, else the partition directories under the table's location."""
    found = client.get_table(database, table)
    if tracks_partitions(found):
        return read_partitions(client, database, table)
    directories = discovered_partitions(current_location(found), ["ds"])
    return {ds: _tags(directory) for (ds,), directory in directories.items()}


def one_build(seen: dict[str, list[int]]) -> tuple[str, int | None]:
    """("ok", tag) when ``seen`` is exactly the build of b0 and b1 tagged so, else ("mixed", None)."""
    tags = {tag for rows in seen.values() for tag in rows}
    whole = sorted(seen) == sorted(BASE_PARTITIONS) and len(tags) == 1
    if not whole or any(len(rows) != ROWS_PER_PARTITION for rows in seen.values()):
        return "mixed", None
    return "ok", tags.pop()
