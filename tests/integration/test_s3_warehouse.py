"""Staged builds on object storage: a real S3 server (S3Proxy), S3A in the metastore and Spark,
the storage layer (pyarrow) for every path operation of the Python side."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from pyarrow import fs as pafs
from pyspark import cloudpickle

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.reader import read_table
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.runtime import write_batch
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import run_attempt
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage import files
from airflow_provider_staged.storage.files import StorageError, list_files
from airflow_provider_staged.storage.s3 import S3Options
from tests.fixtures.s3 import listed_entries
from tests.integration.staged_helpers import build, expected_snapshot, snapshot, staged_table, table_location

pytestmark = pytest.mark.timeout(300)

SQL_V1 = "SELECT id, concat('v1-', id) AS label FROM range(1000)"
SQL_V2 = "SELECT CAST(id AS INT) AS id, concat('v2-', id) AS label FROM range(2500)"


@pytest.fixture(scope="module")
def s3_warehouse(s3_bucket: str) -> str:
    return f"s3a://{s3_bucket}/warehouse"


@pytest.fixture(scope="module")
def database(metastore, s3_warehouse: str) -> str:
    name = "s3_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(name, s3_warehouse)
    return name


def _versions(s3_warehouse: str, target: str) -> list[str]:
    database, table = target.split(".")
    entries = listed_entries(f"{s3_warehouse}/{database}.db/{table}")
    return sorted(name for name in entries if name.startswith("_v="))


def test_ctas_then_replace_on_s3(spark, metastore, journal, target, s3_warehouse):
    first = build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V1)
    assert table_location(metastore, target).startswith(f"{s3_warehouse}/")
    second = build(spark, staged_table(metastore, journal, target, "replace"), SQL_V2)
    # A type-changing replace (bigint -> int) reads as the new version, whole.
    assert snapshot(spark, target) == expected_snapshot(spark, SQL_V2)
    assert spark.table(target).schema["id"].dataType.simpleString() == "int"
    assert table_location(metastore, target).rstrip("/").endswith(f"_v={second.attempt_id}")
    # The superseded version stays for running readers (retention's grace); nothing else is there.
    assert _versions(s3_warehouse, target) == sorted([f"_v={first.attempt_id}", f"_v={second.attempt_id}"])
    manifest = journal.require(second.attempt_id).manifest
    assert sum(item["rows"] for item in manifest["files"]) == 2500
    assert [r.state for r in journal.records()] == [AttemptState.COMMITTED] * 2


def test_partition_refresh_on_s3_touches_only_its_partition(spark, metastore, journal, target, s3_warehouse):
    def refresh(spec: dict[str, str], sql: str) -> None:
        staged = HivePartitionStagedTable(TableIdentifier.parse(target), ["ds"], spec, journal, metastore.uri)
        build(spark, staged, sql)

    refresh({}, "SELECT id, concat('d', CAST(id % 3 AS STRING)) AS ds FROM range(30)")
    before = {r.ds: r.n for r in spark.sql(f"SELECT ds, count(*) AS n FROM {target} GROUP BY ds").collect()}
    refresh({"ds": "d1"}, "SELECT id, concat('d', CAST(id % 1 + 1 AS STRING)) AS ds FROM range(100, 105)")
    spark.catalog.refreshTable(target)
    after = {r.ds: r.n for r in spark.sql(f"SELECT ds, count(*) AS n FROM {target} GROUP BY ds").collect()}
    assert after == {**before, "d1": 5}
    ids = sorted(r.id for r in spark.sql(f"SELECT id FROM {target} WHERE ds = 'd1'").collect())
    assert ids == list(range(100, 105))


def test_sigkilled_writer_is_aborted_by_reconcile(spark, metastore, journal, target, s3_warehouse):
    build(spark, staged_table(metastore, journal, target, "create"), SQL_V1)
    old = snapshot(spark, target)
    script = textwrap.dedent(f"""
        import os, signal, sys
        from airflow_provider_staged.engine.session import build_session
        from airflow_provider_staged.staging.journal_files import FileJournal
        from tests.integration.staged_helpers import begin_and_write, staged_table
        from airflow_provider_staged.discovery.embedded import MetastoreInfo
        info = MetastoreInfo(**{json.dumps(metastore.__dict__)!s})
        spark = build_session(info.uri, info.warehouse, master="local[1]", app_name="killed")
        staged = staged_table(info, FileJournal({str(journal.root)!r}), {target!r}, "replace")
        begin_and_write(spark, staged, {SQL_V2!r})
        print(staged.attempt_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # a worker host gone after the write, before the commit
    """)
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    attempt_id = process.stdout.split()[-1]
    record = journal.require(attempt_id)
    assert record.state is AttemptState.WRITTEN  # the kill point: written, never committed
    assert list_files(record.location), "the killed writer's files must be on S3 before reconcile"
    settings = StagedSettings(metastore.uri, s3_warehouse, str(journal.root))
    reconcile(settings)
    assert journal.require(attempt_id).state is AttemptState.ABORTED
    assert snapshot(spark, target) == old
    assert list_files(record.location) == []
    assert f"_v={attempt_id}" not in _versions(s3_warehouse, target)


def test_unusable_locations_fail_before_any_work(metastore, journal, s3_server, monkeypatch):
    # A bucket that does not exist (any more): the metastore made the database while it did.
    bucket = s3_server.create_bucket("gone")
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database("s3_gone_bucket", f"s3a://{bucket}/warehouse")
    s3_server.options.filesystem().delete_dir_contents(bucket)
    pafs.S3FileSystem(
        access_key=s3_server.options.access_key, secret_key=s3_server.options.secret_key,
        endpoint_override=s3_server.endpoint, region="us-east-1", allow_bucket_deletion=True,
    ).delete_dir(bucket)
    staged = staged_table(metastore, journal, "s3_gone_bucket.t", "create")
    with pytest.raises(StorageError, match=f"bucket '{bucket}' does not exist"):
        staged.begin()
    # No credentials: the environment has none, and nothing was configured.
    for key in s3_server.options.environment():
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(StorageError, match="no S3 credentials") as error:
        staged_table(metastore, journal, "s3_gone_bucket.t", "create").begin()
    assert s3_server.options.secret_key not in str(error.value)
    # A scheme the storage layer does not know.
    with pytest.raises(StorageError, match="unsupported scheme 'gopher'"):
        files.check_location("gopher://host/warehouse/t")
    with pytest.raises(StorageError, match="credentials do not belong") as error:
        files.check_location("s3a://AKIA:topsecret@bucket/w")
    assert "topsecret" not in str(error.value)
    assert journal.records() == []  # nothing journaled, nothing written


def test_s3_options_keep_secrets_out_of_repr_and_spark_conf():
    options = S3Options(endpoint="http://h:1", access_key="AK", secret_key="very-secret", session_token="tok")
    assert "very-secret" not in repr(options) and "tok" not in repr(options)
    assert "very-secret" not in json.dumps(options.hadoop_conf())
    assert options.hadoop_conf("b", secrets=True)["fs.s3a.bucket.b.secret.key"] == "very-secret"
    assert S3Options.from_env({"AWS_ENDPOINT_URL": "http://x:9"}).path_style is True


def test_keys_from_an_airflow_aws_connection(spark, metastore, s3_server, s3_bucket, monkeypatch):
    from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
    from airflow_provider_staged.engine.session import apply_s3_secrets

    options = s3_server.options
    for key in options.environment():
        monkeypatch.delenv(key, raising=False)  # only the connection knows the keys now
    monkeypatch.setattr(files, "_s3_options", {})
    monkeypatch.setenv("AIRFLOW_CONN_S3_KEYS", json.dumps({
        "conn_type": "aws", "login": options.access_key, "password": options.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint, "region_name": "us-east-1"},
    }))
    warehouse = f"s3a://{s3_bucket}/by-connection"
    monkeypatch.setenv("AIRFLOW_CONN_STAGED_S3", json.dumps({
        "conn_type": "staged_hive", "host": metastore.host, "port": metastore.port,
        "extra": {"warehouse": warehouse, "aws_conn_id": "s3_keys"},
    }))
    settings = StagedTableHook("staged_s3").get_settings()
    assert options.secret_key not in repr(settings)
    files.check_location(f"{warehouse}/db.db/t")  # reaches the bucket with the connection's keys
    files.write_text(f"{warehouse}/probe.txt", "ok")
    assert files.read_text(f"{warehouse}/probe.txt") == "ok"
    apply_s3_secrets(spark, warehouse)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    assert hadoop.get(f"fs.s3a.bucket.{s3_bucket}.access.key") == options.access_key
    assert hadoop.get(f"fs.s3a.bucket.{s3_bucket}.endpoint") == s3_server.endpoint


def test_builds_on_s3_through_a_stock_hive4_metastore(spark, hive4_stock_metastore, s3_bucket, tmp_path):
    """Hive 4 checks and makes s3a:// table directories with its own Hadoop's S3A."""
    hive4 = hive4_stock_metastore
    database = f"s3_hive4_{uuid.uuid4().hex[:8]}"
    with MetastoreClient(hive4.uri) as client:
        client.ensure_database(database, f"s3a://{s3_bucket}/hive4")
    target = TableIdentifier(database, "t")
    journal = FileJournal(tmp_path / "journal")
    builds = ((StagingPurpose.CREATE_TABLE_AS, SQL_V1), (StagingPurpose.REPLACE_TABLE_AS, SQL_V2))
    for purpose, query in builds:
        staged = HiveStagedTable(target, purpose, journal, hive4.uri)
        run_attempt(staged, lambda spec, query=query: run_staged_write(spark, query, spec), ttl_seconds=60)
        assert journal.require(staged.attempt_id).state is AttemptState.COMMITTED
        snapshot = read_table(hive4.uri, target, limit=5000)
        assert snapshot.location.startswith(f"s3a://{s3_bucket}/hive4/"), snapshot.location
        assert staged.attempt_id in snapshot.location
        assert sorted(snapshot.rows) == sorted(map(tuple, spark.sql(query).collect()))


def _sink_rows(spark, table: TableIdentifier) -> list[tuple]:
    spark.catalog.refreshTable(table.name)
    return sorted(tuple(row) for row in spark.sql(f"SELECT * FROM {table.quoted}").collect())


# The Arrow writers' appends and overwrites on S3 are the recovery matrix's sink kinds.
@pytest.mark.parametrize(("native", "tracked"), [(True, False), (True, True)],
                         ids=["native", "native-tracked-partitions"])
def test_hive_sink_appends_and_overwrites_on_s3(spark, metastore, database, s3_warehouse, tmp_path,
                                                native, tracked):
    """The Hive sink with no rename: an append to directory partitions copies the version forward,
    one to catalog partitions switches new partition versions, an overwrite moves its files into
    its version; readers see whole writes, and nothing staged is left."""
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
    table = TableIdentifier(database, "sink_" + uuid.uuid4().hex[:8])
    root = f"{s3_warehouse}/{database}.db/{table.table}"
    sink = HiveSink(table, settings, partition_by=["p"], native=native, track_partitions=tracked)
    write_batch(spark.sql("SELECT id, CAST(id % 3 AS INT) AS p FROM range(30)"), sink)
    first = table_location(metastore, table.name)
    write_batch(spark.sql("SELECT id, CAST(id % 3 AS INT) AS p FROM range(30, 40)"), sink)
    assert _sink_rows(spark, table) == [(i, i % 3) for i in range(40)]
    with MetastoreClient(metastore.uri) as client:
        partitions = client.partitions(database, table.table)
    if tracked:  # the table stays; its partitions moved to the second write's partition versions
        assert table_location(metastore, table.name) == first
        assert {p.sd.location.rsplit("/", 2)[-2] for p in partitions} == {_v_of(settings, "hive_append")[-1]}
    else:  # a new version holding the first write's files (copied) and the second's
        assert partitions == []
        assert table_location(metastore, table.name) == f"{root}/{_v_of(settings, 'hive_append')[-1]}"
    overwrite = HiveSink(table, settings, mode="overwrite", partition_by=["p"], native=native)
    write_batch(spark.sql("SELECT id, CAST(1 AS INT) AS p FROM range(5)"), overwrite)
    assert _sink_rows(spark, table) == [(i, 1) for i in range(5)]
    assert table_location(metastore, table.name) == f"{root}/{_v_of(settings, 'hive_overwrite')[-1]}"
    assert {r.state for r in settings.journal.records()} == {AttemptState.COMMITTED}
    assert list_files(f"{root}/_staging") == [], "staged files left behind"


def _v_of(settings: StagedSettings, kind: str) -> list[str]:
    """The version directory names of the journal's ``kind`` commits, oldest first."""
    records = sorted((r for r in settings.journal.records() if r.kind == kind), key=lambda r: r.created_at)
    return [f"_v={r.attempt_id}" for r in records]


def test_hive_sink_without_s3_credentials_fails_before_writing(spark, metastore, database, s3_server,
                                                               tmp_path, monkeypatch):
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
    table = TableIdentifier(database, "sink_" + uuid.uuid4().hex[:8])
    for key in s3_server.options.environment():
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(StorageError, match="no S3 credentials") as error:
        write_batch(spark.sql("SELECT id FROM range(3)"), HiveSink(table, settings))
    assert s3_server.options.secret_key not in str(error.value)
    assert settings.journal.records() == []
    with MetastoreClient(metastore.uri) as client:
        assert client.get_table(database, table.table) is None


_WORKER = (
    "import sys; from pyspark import cloudpickle; from airflow_provider_staged.storage import files; "
    "sink = cloudpickle.loads(sys.stdin.buffer.read()); sink.create_committer(); "
    "files.write_text(sink.root() + '/_staging/probe', 'from a worker')"
)


def test_python_sink_workers_get_the_s3_keys_from_the_driver(metastore, database, s3_server, tmp_path):
    """Spark's Python workers have neither the driver's configured keys nor its environment: the
    shipped sink names a 0600 file with them, and its pickle holds no key."""
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
    sink = HiveSink(TableIdentifier(database, "shipped_" + uuid.uuid4().hex[:6]), settings, native=False)
    keys = s3_server.options
    no_keys = {k: v for k, v in os.environ.items() if k not in keys.environment()}

    def worker(shipped: HiveSink) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _WORKER], input=cloudpickle.dumps(shipped), env=no_keys,
                              capture_output=True, timeout=120, check=False)

    refused = worker(sink)
    assert refused.returncode != 0 and b"no S3 credentials" in refused.stderr, refused.stderr[-2000:]
    with sink.shipping() as shipped:
        pickled = cloudpickle.dumps(shipped)
        assert keys.secret_key.encode() not in pickled and keys.access_key.encode() not in pickled
        done = worker(shipped)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert files.read_text(f"{sink.root()}/_staging/probe") == "from a worker"
    assert not Path(shipped.storage_file).exists(), "the key file outlived the write"
