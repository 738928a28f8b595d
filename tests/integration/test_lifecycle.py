"""Partition TTL, rollback and maintenance on a real metastore with real Spark."""

from __future__ import annotations

import calendar
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore
from typer.testing import CliRunner

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import PARTITION_PROVIDER_KEY
from airflow_provider_staged.cli.main import app
from airflow_provider_staged.engine.spark_job import data_files, run_staged_write
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import commit_written
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.expiry import delete_dropped_files, expire_table, sweep_expiry
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState, TaskRef
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable, staged_hive_table
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable, sweep_versions
from airflow_provider_staged.staging.maintenance import MaintenanceReport, VersionSweep, sweep_all_versions
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from airflow_provider_staged.staging.partition_ttl import NEXT_EXPIRY_KEY
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.rollback import list_table_versions, rollback
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage.files import local_path, normalize_location
from tests.fixtures.airflow_cli import REPO, staged_connection
from tests.integration import lifecycle_workers, race_workers
from tests.integration.staged_helpers import build, expected_snapshot, snapshot, staged_table, table_location

# 100 rows in each of ds = 2024-01-01 .. 2024-01-05.
FIVE_DAYS = "SELECT id, concat('2024-01-0', CAST(id % 5 + 1 AS STRING)) AS ds FROM range(500)"
DAY = 86400.0
SPAWN = multiprocessing.get_context("spawn")


def at(text: str) -> float:
    """Epoch seconds of a UTC 'YYYY-MM-DD HH:MM' (the injected clock)."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M")))


@pytest.fixture
def settings(metastore, tmp_path):
    return StagedSettings(
        metastore_uri=metastore.uri,
        warehouse=metastore.warehouse,
        journal_dir=str(tmp_path / "journal"),
        retention=RetentionPolicy(keep_versions=5, max_age_seconds=None, grace_seconds=3600),
    )


def ttl_build(spark, settings, target, options, spec=None, sql=FIVE_DAYS):
    """A catalog-partitioned staged build of ``target`` with TTL ``options`` (what the operator does)."""
    staged = HivePartitionStagedTable(
        TableIdentifier.parse(target),
        ["ds"],
        spec or {},
        settings.journal,
        settings.metastore_uri,
        settings.retention,
        table_options=options,
    )
    return build(spark, staged, sql)


def locations(settings, target):
    """ds -> the directory the metastore's partition points at."""
    return {day: normalize_location(p.sd.location) for day, p in partitions(settings, target).items()}


def partitions(settings, target):
    database, table = target.split(".")
    with MetastoreClient(settings.metastore_uri) as client:
        return {p.values[0]: p for p in client.partitions(database, table)}


class ThriftCalls:
    """The metastore calls this process sends (by name), while the test runs."""

    DROPS = ("drop_partitions_req", "drop_partition", "drop_partition_by_name")

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        for attribute in dir(ThriftHiveMetastore.Client):
            if attribute.startswith("send_"):
                original = getattr(ThriftHiveMetastore.Client, attribute)

                def counted(client, *args, _name=attribute[5:], _original=original):
                    self.calls.append(_name)
                    return _original(client, *args)

                monkeypatch.setattr(ThriftHiveMetastore.Client, attribute, counted)

    @property
    def drops(self) -> list[str]:
        return [name for name in self.calls if name in self.DROPS]


def read_during(read, action):
    """Run ``action`` while a reader thread calls ``read`` again and again (twice before, twice
    after at least); returns what the reader saw, its errors and what ``action`` returned."""
    seen, errors, stop = [], [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.append(read())
            except Exception as error:  # a reader must never fail either; py4j's repr hides the cause
                errors.append(f"{type(error).__name__}: {str(error)[:3000]}")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        while len(seen) < 2:
            time.sleep(0.05)
        result = action()
        count = len(seen)
        while len(seen) < count + 2:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    return seen, errors, result


def test_values_time_ttl_drops_nothing_inside_then_all_expired_in_one_call(
    spark, settings, target, monkeypatch
):
    ttl_build(spark, settings, target, {"partition.expiration-time": "2 d"})
    identifier = TableIdentifier.parse(target)
    drops = ThriftCalls(monkeypatch)
    # ds=2024-01-01 expires at 2024-01-03 00:00: one minute before, nothing goes.
    inside = sweep_expiry(settings, now=at("2024-01-02 23:59"), databases=[identifier.database])
    assert [p.expired for p in inside.plans if p.target == target] == [{}]
    assert set(partitions(settings, target)) == {f"2024-01-0{d}" for d in range(1, 6)}
    assert drops.drops == []
    # The sweep recorded the next expiry: the next sweep inside the TTL does not read the table.
    assert _param(settings, target, NEXT_EXPIRY_KEY) == str(int(at("2024-01-03 00:00")))
    drops.calls.clear()
    again = sweep_expiry(settings, now=at("2024-01-02 23:59"), databases=[identifier.database])
    # Nothing expires: one listing and one batch read for the database, no per-table call (a
    # reused metastore connection is first checked with one getStatus: not a table read).
    table_calls = [call for call in drops.calls if call != "getStatus"]
    assert table_calls == ["get_all_tables", "get_table_objects_by_name_req"]
    assert drops.calls.count("getStatus") <= 1
    assert again.skipped >= 1 and target not in {p.target for p in again.plans}

    dry = expire_table(settings, identifier, now=at("2024-01-05 12:00"), dry_run=True)
    assert sorted(dry.expired) == ["ds=2024-01-01", "ds=2024-01-02", "ds=2024-01-03"]
    assert len(partitions(settings, target)) == 5 and drops.drops == []

    plan = expire_table(settings, identifier, now=at("2024-01-05 12:00"))
    assert sorted(plan.expired) == ["ds=2024-01-01", "ds=2024-01-02", "ds=2024-01-03"]
    assert drops.drops == ["drop_partitions_req"]  # all of them in one metastore call
    assert set(partitions(settings, target)) == {"2024-01-04", "2024-01-05"}
    assert snapshot(spark, target) == expected_snapshot(
        spark, f"SELECT * FROM ({FIVE_DAYS}) WHERE ds >= '2024-01-04'"
    )
    expiry = [r for r in settings.journal.records() if r.kind == "hive_expire"]
    assert [r.state for r in expiry] == [AttemptState.COMMITTED]

    # Files stay for the grace (a reader that planned the partition still reads it), then go.
    dropped = [Path(urlparse(loc).path) for loc in expiry[0].superseded_location]
    assert len(dropped) == 3 and all(d.exists() for d in dropped)
    staged = HiveStagedTable(
        identifier, expiry_purpose(), settings.journal, settings.metastore_uri, settings.retention
    )
    assert delete_dropped_files(staged, settings.journal.records(), expiry[0].updated_at + 60) == []
    deleted = delete_dropped_files(staged, settings.journal.records(), expiry[0].updated_at + 3601)
    assert sorted(deleted) == sorted(expiry[0].superseded_location)
    assert not any(d.exists() for d in dropped)
    assert snapshot(spark, target) == expected_snapshot(
        spark, f"SELECT * FROM ({FIVE_DAYS}) WHERE ds >= '2024-01-04'"
    )

    # A partition refreshed after its value-time expired: values-time drops it at the next sweep.
    ttl_build(
        spark,
        settings,
        target,
        {"partition.expiration-time": "2 d"},
        {"ds": "2024-01-01"},
        f"SELECT * FROM ({FIVE_DAYS}) WHERE ds = '2024-01-01'",
    )
    assert "2024-01-01" in partitions(settings, target)
    later = sweep_expiry(settings, now=at("2024-01-05 12:00"), databases=[identifier.database])
    assert [sorted(p.expired) for p in later.plans if p.target == target] == [["ds=2024-01-01"]]


def expiry_purpose():
    from airflow_provider_staged.staging.api import StagingPurpose

    return StagingPurpose.CREATE_OR_REPLACE_TABLE_AS


def _param(settings, target, key):
    database, table = target.split(".")
    with MetastoreClient(settings.metastore_uri) as client:
        return (client.get_table(database, table).parameters or {}).get(key)


def test_update_time_ttl_follows_the_last_commit(spark, settings, target, monkeypatch):
    options = {"partition.expiration-time": "1 d", "partition.expiration-strategy": "update-time"}
    # Values far in the past: under update-time only the commit time counts.
    old = "SELECT id, concat('2020-01-0', CAST(id % 3 + 1 AS STRING)) AS ds FROM range(300)"
    ttl_build(spark, settings, target, options, sql=old)
    committed = {
        ds: float(p.parameters["staged.updated_at"]) for ds, p in partitions(settings, target).items()
    }
    first = max(committed.values())
    identifier = TableIdentifier.parse(target)
    drops = ThriftCalls(monkeypatch)
    assert expire_table(settings, identifier, now=first + 0.5 * DAY).expired == {}
    assert len(partitions(settings, target)) == 3 and drops.drops == []

    # ds=2020-01-01 refreshed later: at first + 1.5 d the other two are expired, it is not.
    time.sleep(1.1)
    ttl_build(
        spark,
        settings,
        target,
        options,
        {"ds": "2020-01-01"},
        f"SELECT * FROM ({old}) WHERE ds = '2020-01-01'",
    )
    refreshed = float(partitions(settings, target)["2020-01-01"].parameters["staged.updated_at"])
    assert refreshed > first
    plan = expire_table(settings, identifier, now=first + DAY + 0.5)
    assert sorted(plan.expired) == ["ds=2020-01-02", "ds=2020-01-03"]
    assert drops.drops == ["drop_partitions_req"]
    assert set(partitions(settings, target)) == {"2020-01-01"}
    assert expire_table(settings, identifier, now=refreshed + DAY + 1).expired.keys() == {"ds=2020-01-01"}
    assert partitions(settings, target) == {}


def test_readers_during_expiry_see_a_partition_whole_or_not_at_all(spark, settings, target):
    ttl_build(spark, settings, target, {"partition.expiration-time": "2 d"})
    before = {f"2024-01-0{d}": 100 for d in range(1, 6)}
    after = {"2024-01-04": 100, "2024-01-05": 100}
    def read():
        spark.catalog.refreshTable(target)
        rows = spark.sql(f"SELECT ds, count(*) AS n FROM {target} GROUP BY ds").collect()
        return {r.ds: r.n for r in rows}

    seen, errors, _ = read_during(
        read, lambda: expire_table(settings, TableIdentifier.parse(target), now=at("2024-01-05 12:00"))
    )
    assert errors == []
    assert all(view in (before, after) for view in seen), [v for v in seen if v not in (before, after)]
    assert seen[0] == before and seen[-1] == after


def test_rollback_while_readers_read_and_bad_versions_change_nothing(spark, metastore, settings, target):
    versions = {}
    for n in (1, 2, 3):
        sql = f"SELECT id, 'v{n}' AS label FROM range({n * 100})"
        staged = build(
            spark,
            staged_table(metastore, settings.journal, target, "create_or_replace", settings.retention),
            sql,
        )
        versions[n] = (staged.attempt_id, expected_snapshot(spark, sql))
    identifier = TableIdentifier.parse(target)
    listed = list_table_versions(settings, identifier)
    assert [v.version for v in listed] == [versions[3][0], versions[2][0], versions[1][0]]
    assert [v.rows for v in listed] == [300, 200, 100] and listed[0].current and not listed[1].current

    seen, errors, record = read_during(
        lambda: snapshot(spark, target), lambda: rollback(settings, identifier, versions[1][0])
    )
    assert errors == []
    assert set(seen) <= {versions[3][1], versions[1][1]} and seen[-1] == versions[1][1]
    assert record.kind == "hive_rollback" and record.state is AttemptState.COMMITTED
    assert [v.version for v in list_table_versions(settings, identifier) if v.current] == [versions[1][0]]

    location = table_location(metastore, target)
    with pytest.raises(StagingError, match="unknown version 'nope'"):
        rollback(settings, identifier, "nope")
    with pytest.raises(StagingError, match="already the current version"):
        rollback(settings, identifier, versions[1][0])
    # Retention deletes version 2 (superseded, beyond keep 0 and the grace): a swept version.
    sweeper = staged_table(metastore, settings.journal, target, "replace")
    swept = sweep_versions(sweeper, RetentionPolicy(0, None, 0), location.rpartition("/")[0])
    assert any(versions[2][0] in path for path in swept)
    with pytest.raises(StagingError, match=f"version {versions[2][0]} of {target} was deleted by retention"):
        rollback(settings, identifier, versions[2][0])
    assert table_location(metastore, target) == location and snapshot(spark, target) == versions[1][1]


def test_maintenance_in_another_process_loses_nothing_of_concurrent_refreshes(
    spark, metastore, database, tmp_path
):
    # Aggressive retention (nothing kept, no grace): the sweep deletes whatever it may.
    settings = StagedSettings(
        metastore_uri=metastore.uri,
        warehouse=metastore.warehouse,
        journal_dir=str(tmp_path / "journal"),
        retention=RetentionPolicy(keep_versions=0, max_age_seconds=None, grace_seconds=0),
    )
    partitioned, whole = f"{database}.ttl_{uuid.uuid4().hex[:6]}", f"{database}.whole_{uuid.uuid4().hex[:6]}"
    options = {"partition.expiration-time": "2 d"}
    ttl_build(spark, settings, partitioned, options)  # 01-01 .. 01-03 expire at the injected clock
    stop = tmp_path / "stop"
    raw = {
        "metastore_uri": metastore.uri,
        "warehouse": metastore.warehouse,
        "journal_dir": settings.journal_dir,
        "retention": {"keep_versions": 0, "max_age_seconds": None, "grace_seconds": 0},
    }
    log_path = tmp_path / "maintenance.log"
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.lifecycle_workers",
                json.dumps(raw),
                str(at("2024-01-05 12:00")),
                str(stop),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    expected: dict[str, tuple[int, int]] = {}
    try:
        for round_ in range(4):
            ds = f"2024-01-0{4 + round_ % 2}"
            sql = f"SELECT * FROM ({FIVE_DAYS}) WHERE ds = '{ds}' AND id % 7 != {round_}"
            ttl_build(spark, settings, partitioned, options, {"ds": ds}, sql)
            expected[ds] = expected_snapshot(spark, sql)
            assert _partition_snapshot(spark, partitioned, ds) == expected[ds]
            whole_sql = f"SELECT id, 'r{round_}' AS label FROM range({50 + round_})"
            build(
                spark,
                staged_table(metastore, settings.journal, whole, "create_or_replace", settings.retention),
                whole_sql,
            )
            assert snapshot(spark, whole) == expected_snapshot(spark, whole_sql)
        # Until the expiry caught up and a second pass began: the first one (80 partitions dropped)
        # can outlast the refreshes on a loaded machine.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            len(partitions(settings, partitioned)) > 2 or "pass 1:" not in log_path.read_text()
        ):
            time.sleep(0.2)
    finally:
        stop.touch()
        assert worker.wait(timeout=120) == 0, log_path.read_text()[-3000:]
    passes = log_path.read_text()
    assert "pass 1:" in passes, passes
    assert set(partitions(settings, partitioned)) == {"2024-01-04", "2024-01-05"}
    for ds, want in expected.items():
        assert _partition_snapshot(spark, partitioned, ds) == want
    assert snapshot(spark, whole) == expected_snapshot(spark, "SELECT id, 'r3' AS label FROM range(53)")
    assert [r for r in settings.journal.records() if not r.state.ended] == []


def _partition_snapshot(spark, target, ds):
    spark.catalog.refreshTable(target)
    row = spark.sql(
        f"SELECT count(*) AS n, coalesce(sum(hash(id, ds)), 0) AS h FROM {target} WHERE ds = '{ds}'"
    ).first()
    return int(row.n), int(row.h)


def test_partition_rollback_while_readers_read_neighbours_untouched_bad_input_changes_nothing(
    spark, metastore, settings, target, tmp_path
):
    identifier = TableIdentifier.parse(target)
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]

    def refresh(label, spec, days_sql):
        sql = f"SELECT id, '{label}' AS label, {days_sql} AS ds FROM range(300)"
        staged = HivePartitionStagedTable(
            identifier, ["ds"], spec, settings.journal, settings.metastore_uri, settings.retention
        )
        return build(spark, staged, sql).attempt_id

    v1 = refresh("v1", {}, "concat('2024-01-0', CAST(id % 3 + 1 AS STRING))")  # 100 rows per day
    v1_day = {day: _partition_snapshot(spark, target, day) for day in days}
    assert v1_day[days[2]][0] == 100
    # 300 rows of one day, the same expression as v1's (the schema, nullability included, must match)
    v2 = refresh("v2", {"ds": days[0]}, "concat('2024-01-0', CAST(id % 1 + 1 AS STRING))")
    v3 = refresh("v3", {"ds": days[1]}, "concat('2024-01-0', CAST(id % 1 + 2 AS STRING))")
    listed = list_table_versions(settings, identifier)
    assert [(v.version, v.partition, v.rows, v.current) for v in listed] == [
        (v3, f"ds={days[1]}", 300, True),
        (v2, f"ds={days[0]}", 300, True),
        (v1, f"ds={days[0]}", 100, False),
        (v1, f"ds={days[1]}", 100, False),
        (v1, f"ds={days[2]}", 100, True),
    ]
    assert [v.version for v in list_table_versions(settings, identifier, {"ds": days[2]})] == [v1]
    v2_day0 = _partition_snapshot(spark, target, days[0])
    v3_day1 = _partition_snapshot(spark, target, days[1])
    before = locations(settings, target)

    # One partition of v1, while a reader reads: it sees that partition whole, old or restored.
    seen, errors, record = read_during(
        lambda: _partition_snapshot(spark, target, days[0]),
        lambda: rollback(settings, identifier, v1, partition_spec={"ds": days[0]}),
    )
    assert errors == [] and set(seen) <= {v2_day0, v1_day[days[0]]} and seen[-1] == v1_day[days[0]]
    assert record.kind == "hive_rollback" and record.state is AttemptState.COMMITTED
    assert record.catalog["partitions"] == {f"ds={days[0]}": f"{record.location}/ds={days[0]}"}
    assert record.manifest["rows"] == 100  # what the asset event reports: the restored partition
    assert locations(settings, target) == {**before, days[0]: f"{record.location}/ds={days[0]}"}
    assert _partition_snapshot(spark, target, days[1]) == v3_day1  # the neighbours are untouched
    assert _partition_snapshot(spark, target, days[2]) == v1_day[days[2]]

    # The whole version (the CLI): the partitions of v1 not current yet, here only days[1].
    env = {
        **os.environ,
        "AIRFLOW_CONN_LIFECYCLE": staged_connection(
            metastore.port, metastore.uri, Path(settings.journal.root), metastore.warehouse
        ),
        "COLUMNS": "250",
    }
    result = CliRunner().invoke(app, ["rollback", target, "--to", v1, "--conn", "lifecycle"], env=env)
    assert result.exit_code == 0, result.output
    assert f"{target} partition(s) ds={days[1]} are now version {v1}" in result.output
    assert {day: _partition_snapshot(spark, target, day) for day in days} == v1_day
    result = CliRunner().invoke(app, ["versions", target, "--conn", "lifecycle"], env=env)
    assert result.exit_code == 0 and result.output.count("current") == 3, result.output

    # Bad input: a clear error naming it, nothing changed.
    restored = locations(settings, target)
    with pytest.raises(StagingError, match="already the current version"):
        rollback(settings, identifier, v1)
    with pytest.raises(StagingError, match="unknown version 'nope'"):
        rollback(settings, identifier, "nope")
    with pytest.raises(StagingError, match=r"partition column\(s\) \['region'\] not in table"):
        rollback(settings, identifier, v2, partition_spec={"region": "eu"})
    with pytest.raises(StagingError, match=f"version {v2} of {target} has no partition inside"):
        rollback(settings, identifier, v2, partition_spec={"ds": days[2]})
    result = CliRunner().invoke(
        app, ["rollback", target, "--to", v2, "--partition", "ds", "--conn", "lifecycle"], env=env
    )
    assert result.exit_code != 0 and "--partition 'ds': expected KEY=VALUE" in result.output
    # A partition the table no longer has is not re-added.
    with MetastoreClient(settings.metastore_uri) as client:
        client.drop_partitions(identifier.database, identifier.table, [f"ds={days[0]}"])
    gone = rf"partition\(s\) \['ds={days[0]}'\] of version {v2} are no longer in"
    with pytest.raises(StagingError, match=gone):
        rollback(settings, identifier, v2)
    # Retention deletes v2 and v3 (superseded, keep 0, no grace): swept versions.
    sweeper = HivePartitionStagedTable(identifier, ["ds"], {}, settings.journal, settings.metastore_uri)
    swept = sweep_versions(sweeper, RetentionPolicy(0, None, 0), record.location.rpartition("/")[0])
    assert {path.rpartition("_v=")[2] for path in swept} == {v2, v3}
    with pytest.raises(StagingError, match=f"version {v3} of {target} was deleted by retention"):
        rollback(settings, identifier, v3)
    restored.pop(days[0])
    assert locations(settings, target) == restored
    assert settings.journal.open_attempts() == []


# -- a version sweep SIGKILLed part-way ---------------------------------------------------------------

SWEEP_GRACE = 600.0
SWEEP_KEEP = 2
FILES_PER_VERSION = 8


def _commit_version(settings: StagedSettings, target: str, tag: int, commit: bool = True) -> HiveStagedTable:
    """A replace of ``target`` whose version holds FILES_PER_VERSION Parquet files of rows tagged
    ``v<tag>`` (written with pyarrow: the sweep is under test, not Spark); ``commit=False`` leaves
    the attempt running (WRITTEN)."""
    staged = HiveStagedTable(
        TableIdentifier.parse(target), StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, settings.journal,
        settings.metastore_uri, settings.retention,
    )
    staged.begin()
    directory = local_path(staged.location)
    directory.mkdir(parents=True)
    for k in range(FILES_PER_VERSION):
        rows = pa.table({"id": pa.array([tag * 100 + k], pa.int64()), "label": pa.array([f"v{tag}"])})
        pq.write_table(rows, directory / f"part-{k:05d}.parquet")
    manifest = Manifest(
        location=staged.location, schema_json=race_workers.FLAT_SCHEMA_JSON,
        columns=list(race_workers.FLAT_COLUMNS), files=[DataFile(**item) for item in data_files(directory)],
    )
    if commit:
        commit_written(staged, manifest)
    else:
        staged.written(manifest)
    return staged


def _version_files(root: Path) -> dict[str, list[tuple[str, int]]]:
    """Each version directory under ``root``: its files (relative path, size)."""
    return {
        version.name: sorted((str(p.relative_to(version)), p.stat().st_size) for p in version.rglob("*.*"))
        for version in root.glob("_v=*")
    }


@pytest.mark.parametrize("point", lifecycle_workers.KILL_POINTS)
def test_a_version_sweep_sigkilled_part_way_is_finished_by_the_next_one(
    spark, metastore, database, tmp_path, monkeypatch, point
):
    """A commit's housekeeping (the version sweep and its retention mark) really SIGKILLed at
    ``point``; the next commit's housekeeping finishes the sweep: the orphan and the versions past
    retention are gone, every version a reader may still read (the current one, those within
    ``keep_versions``, a running attempt's) is whole, and the mark lets later sweeps run."""
    policy = {"keep_versions": SWEEP_KEEP, "max_age_seconds": None, "grace_seconds": SWEEP_GRACE}
    raw = {"metastore_uri": metastore.uri, "warehouse": metastore.warehouse,
           "journal_dir": str(tmp_path / "journal"), "retention": policy}
    settings = lifecycle_workers.settings_of(raw)
    target = f"{database}.swept_{uuid.uuid4().hex[:6]}"
    versions = [_commit_version(settings, target, 1)]
    root = local_path(versions[0].location).parent
    (root / "_v=20240101T000000-0badf00d").mkdir()  # an orphan: no attempt journaled it
    (root / "_v=20240101T000000-0badf00d" / "part-00000.parquet").write_bytes(b"lost")
    # A sweep saw it before the later commits: by ``now`` it has been dead for longer than the grace.
    settings.journal.orphans_seen(target, [f"file:{root}/_v=20240101T000000-0badf00d"])
    versions += [_commit_version(settings, target, tag) for tag in range(2, 7)]  # v6 is current
    running = _commit_version(settings, target, 7, commit=False)
    before = _version_files(root)
    names = [local_path(v.location).name for v in versions]
    running_name = local_path(running.location).name
    needed = {*names[-1 - SWEEP_KEEP:], running_name}  # v4, v5 (kept by count), v6 and v7
    records = [settings.journal.require(v.attempt_id) for v in versions]
    # v1..v5 superseded SWEEP_GRACE + 1 s ago: v1..v3 (beyond keep_versions) and the orphan are due.
    now = records[-1].updated_at + SWEEP_GRACE + 1
    mark_before = settings.journal.retention_mark(target)

    worker = SPAWN.Process(
        target=lifecycle_workers.housekeep_killed_at, args=(raw, target, versions[-1].attempt_id, now, point)
    )
    worker.start()
    worker.join(120)
    assert worker.exitcode == -signal.SIGKILL, f"housekeeping not killed at {point}: exit {worker.exitcode}"
    killed = _version_files(root)
    mark = settings.journal.retention_mark(target)
    if point == "mid_delete":  # the orphan deleted, the second doomed version (v3) half-deleted
        assert set(killed) == set(before) - {"_v=20240101T000000-0badf00d"}
        assert 0 < len(killed[names[2]]) < len(before[names[2]])
        assert mark == mark_before
    else:
        assert set(killed) == needed
        # The mark: when the oldest version kept (v4) was superseded, i.e. v5's commit.
        assert mark == (mark_before if point == "before_mark" else pytest.approx(records[4].updated_at))
    assert {name: killed[name] for name in needed} == {name: before[name] for name in needed}
    assert snapshot(spark, target) == (FILES_PER_VERSION, _rows_hash(spark, 6))

    # The next commit's housekeeping (here: v6's again, a moment later) finishes the sweep.
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: now + 1)
        versions[-1].after_commit(records[-1])
    assert _version_files(root) == {name: before[name] for name in needed}
    assert settings.journal.retention_mark(target) == pytest.approx(records[4].updated_at)
    assert snapshot(spark, target) == (FILES_PER_VERSION, _rows_hash(spark, 6))

    # The running attempt commits; once v4 is beyond keep_versions and past the grace, the sweep
    # that the mark lets through deletes it, and nothing else.
    commit_written(running)
    v7 = settings.journal.require(running.attempt_id)
    later = v7.updated_at + SWEEP_GRACE + 1
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: later)
        running.after_commit(v7)
    assert _version_files(root) == {name: before[name] for name in (*names[-2:], running_name)}
    assert snapshot(spark, target) == (FILES_PER_VERSION, _rows_hash(spark, 7))
    assert sweep_all_versions(settings, later).deleted == {}
    assert [r for r in settings.journal.records() if not r.state.ended] == []


def _rows_hash(spark, tag: int) -> int:
    """The checksum ``snapshot`` computes, of version ``v<tag>``'s rows."""
    rows = ", ".join(f"({tag * 100 + k}L, 'v{tag}')" for k in range(FILES_PER_VERSION))
    return expected_snapshot(spark, f"SELECT * FROM VALUES {rows} AS t(id, label)")[1]


def test_a_replace_without_options_keeps_the_partition_ttl_working(spark, settings, target):
    """A REPLACE that sets no options keeps the table's, its partition TTL too: the replace is then
    a partition commit, so the partitions stay in the catalog and the TTL goes on dropping them
    (a whole-table switch would leave a table Spark reads from its directories, never expired)."""
    ttl_build(spark, settings, target, {"partition.expiration-time": "2 d"})
    identifier = TableIdentifier.parse(target)
    later = "SELECT id, concat('2024-01-0', CAST(id % 5 + 3 AS STRING)) AS ds FROM range(500)"  # 03..07
    staged = staged_hive_table(identifier, StagingPurpose.REPLACE_TABLE_AS, settings, None, ["ds"])
    assert isinstance(staged, HivePartitionStagedTable)
    build(spark, staged, later)
    assert snapshot(spark, target) == expected_snapshot(spark, later)
    assert _param(settings, target, "partition.expiration-time") == "2 d"

    plan = expire_table(settings, identifier, now=at("2024-01-07 12:00"))
    assert sorted(plan.expired) == [f"ds=2024-01-0{d}" for d in range(1, 6)]
    kept = f"SELECT * FROM ({later}) WHERE ds >= '2024-01-06'"
    assert snapshot(spark, target) == expected_snapshot(spark, kept)
    # Without partition columns, or with options of its own, a replace switches the whole table.
    replace = StagingPurpose.REPLACE_TABLE_AS
    assert type(staged_hive_table(identifier, replace, settings, None, [])) is HiveStagedTable
    own_options = staged_hive_table(identifier, replace, settings, None, ["ds"], {"tier": "gold"})
    assert type(own_options) is HiveStagedTable


def test_expiry_refuses_a_table_that_reads_its_partitions_from_its_directories(spark, settings, target):
    """A partition TTL on a table whose partitions Spark discovers (written as a whole by another
    writer) can drop nothing Spark reads (its catalog partitions point into superseded versions):
    expiry says so, naming the table, and changes nothing."""
    ttl_build(spark, settings, target, {"partition.expiration-time": "2 d"})
    identifier = TableIdentifier.parse(target)
    replace = HiveStagedTable(
        identifier, StagingPurpose.REPLACE_TABLE_AS, settings.journal, settings.metastore_uri,
        settings.retention, table_options={"partition.expiration-time": "2 d"},
    )
    replace.begin()
    spec = {**replace.write_spec(), "partition_by": ["ds"]}
    commit_written(replace, run_staged_write(spark, FIVE_DAYS, spec))

    def state():  # what a reader, the catalog and the journal show
        journal = [(r.attempt_id, r.state) for r in settings.journal.records()]
        return sorted(partitions(settings, target)), snapshot(spark, target), journal

    before = state()
    with pytest.raises(StagingError, match=f"table {target} reads its partitions from its directories"):
        expire_table(settings, identifier, now=at("2024-01-05 12:00"))
    # The sweep (the maintenance DAG's) names it and goes on: one such table fails no other's expiry.
    report = sweep_expiry(settings, now=at("2024-01-05 12:00"), databases=[identifier.database])
    assert target in report.untracked and target not in report.failures
    lines = "\n".join(MaintenanceReport([], report, VersionSweep()).lines())
    assert f"expiry {target}: NOT EXPIRED: table {target} reads its partitions from its directories" in lines
    assert state() == before


# Two days (2024-01-06, 2024-01-07) with another schema: ``id`` a string, a new column in between.
CHANGED = (
    "SELECT concat('v', id) AS id, id * 2 AS doubled, concat('2024-01-0', CAST(id % 2 + 6 AS STRING)) AS ds "
    "FROM range(200)"
)


def _assert_replaced_and_expiring(spark, settings, target):
    """``target`` reads CHANGED, tracks exactly its two partitions, and its TTL drops the first."""
    assert snapshot(spark, target) == expected_snapshot(spark, CHANGED)
    assert sorted(partitions(settings, target)) == ["2024-01-06", "2024-01-07"]
    assert _param(settings, target, PARTITION_PROVIDER_KEY) == "catalog"
    assert _param(settings, target, "partition.expiration-time") == "2 d"
    plan = expire_table(settings, TableIdentifier.parse(target), now=at("2024-01-08 12:00"))
    assert sorted(plan.expired) == ["ds=2024-01-06"]
    kept = f"SELECT * FROM ({CHANGED}) WHERE ds = '2024-01-07'"
    assert snapshot(spark, target) == expected_snapshot(spark, kept)


def test_a_replace_that_changes_the_schema_of_a_ttl_table_switches_it_whole(spark, settings, target):
    """A partition commit cannot change the schema (the old partitions would be read with the new
    one): a REPLACE that does switches the whole table in one call, then tracks its partitions."""
    ttl_build(spark, settings, target, {"partition.expiration-time": "2 d"})
    identifier = TableIdentifier.parse(target)
    staged = staged_hive_table(identifier, StagingPurpose.REPLACE_TABLE_AS, settings, None, ["ds"])
    build(spark, staged, CHANGED)
    _assert_replaced_and_expiring(spark, settings, target)
    assert settings.journal.require(staged.attempt_id).state is AttemptState.COMMITTED


def test_a_schema_changing_replace_cut_short_after_its_switch_is_finished_by_reconcile(
    spark, settings, target, monkeypatch
):
    """The whole-table switch landed, the process died before the partitions were tracked: readers
    already see the new version (from its directories); reconcile finishes the commit, whatever
    the task's outcome, and the table then tracks its partitions."""
    ttl_build(spark, settings, target, {"partition.expiration-time": "2 d"})
    identifier = TableIdentifier.parse(target)
    task = TaskRef("lifecycle", "replace", f"run-{uuid.uuid4().hex[:8]}", 1)
    staged = staged_hive_table(identifier, StagingPurpose.REPLACE_TABLE_AS, settings, task, ["ds"])
    staged.begin()
    staged.written(run_staged_write(spark, CHANGED, staged.write_spec()))

    def died(*args):
        raise RuntimeError("injected: died before tracking the partitions")

    monkeypatch.setattr(HivePartitionStagedTable, "_register_created", died)
    with pytest.raises(RuntimeError, match="died before tracking"):
        staged.commit()
    monkeypatch.undo()
    assert snapshot(spark, target) == expected_snapshot(spark, CHANGED)  # the switch readers see
    assert _param(settings, target, PARTITION_PROVIDER_KEY) is None
    assert settings.journal.require(staged.attempt_id).state is AttemptState.WRITTEN

    actions = reconcile(settings, lambda ref: "failed" if ref == task else None)
    assert [(a.attempt_id, a.action) for a in actions] == [(staged.attempt_id, "finished")]
    assert settings.journal.require(staged.attempt_id).state is AttemptState.COMMITTED
    _assert_replaced_and_expiring(spark, settings, target)
