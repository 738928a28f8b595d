"""The atomic path's own fixed cost, without Spark: where begin / written / commit / housekeep go.

Deterministic counts, not whole-write timings (the machine is shared; a whole write swings
±20%): per phase, the milliseconds, the metastore calls (and the ms spent in them), the
metastore connections opened, the journal's fsyncs and reads, and the directory listings. Run
on a Derby-backed and a PostgreSQL-backed metastore in the same process, so what is Derby's
and what is ours can be told apart. No Spark: the "write" hard-links the same Parquet files
(1M rows, written once by pyarrow) into each attempt's version directory, untimed.

1. ``calls``: one call on a fresh connection (open, call, close: what every ``with
   MetastoreClient`` did before connections were reused) against the same call on a warm one,
   alternating: ``get_table``, and ``lock`` + ``unlock``.
2. ``replace`` and ``create_or_replace`` of one existing table (``HiveStagedTable``), two arms
   alternating per sample: ``fresh`` (no connection reuse: every block opens its own) and
   ``reused`` (this process's idle connections are dropped before each sample, as in a new
   task process: begin opens one, the commit and housekeep reuse it).
3. ``partitions``: the multi-partition refresh commit, 10 partitions replaced + 10 added
   (``HivePartitionStagedTable``, empty spec), same two arms; the 10 added partitions are
   dropped again after each sample (untimed). Target: commit p50 < 100 ms.

Starts a Derby metastore and a PostgreSQL server + metastore (temp homes); stops all of them.
``--metastores derby,stock``: against a stock metastore (Hive's defaults, none of the project's
Java), where a partition commit is the locked path; ``hive4``: Hive 4's, stock. ``--store s3``:
the tables on a local S3 server (S3Proxy over a temp directory, ``s3a://``; the metastores reach
it through S3A), the "write" an upload of the same files, untimed.
Run: ``.venv/bin/python benchmarks/probes/profile_commit_path.py`` (smoke run: ``--smoke``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _benchmarks_path  # noqa: F401 (benchmarks/ on sys.path)
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _common import arm_order, load, percentile_ms
from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore
from thrift.transport import TSocket

from airflow_provider_staged.catalogs.metastore import client as client_module
from airflow_provider_staged.catalogs.metastore.client import METASTORE_CONNECTIONS, MetastoreClient
from airflow_provider_staged.catalogs.metastore.locks import table_lock
from airflow_provider_staged.staging import journal_files as journal_module
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds import hive_table as hive_table_module
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.versions import RetentionPolicy
from airflow_provider_staged.storage import files as files_layer

DATABASE = "profile"
PHASES = ("begin", "written", "commit", "housekeep")
ARMS = ("fresh", "reused")
REPLACED, ADDED = 10, 10
# (name, Spark type, Hive type) of bench_ctas.py's query
COLUMNS = [
    ("id", "long", "bigint"), ("k", "long", "bigint"), ("v", "double", "double"), ("s", "string", "string")
]
SCHEMA_JSON = json.dumps({
    "type": "struct",
    "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t, _ in COLUMNS],
})
RETENTION = RetentionPolicy()  # the connection's defaults


# -- instrumentation ----------------------------------------------------------------------


class Counters:
    """Per phase: wall ms, and the metastore calls, connections, fsyncs, journal reads, listings."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.ms: dict[str, list[float]] = collections.defaultdict(list)
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.call_ms: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.samples: collections.Counter[str] = collections.Counter()
        self._install()

    def clear(self) -> None:
        for table in (self.ms, self.counts, self.call_ms):
            table.clear()
        self.samples.clear()

    def _install(self) -> None:
        rpcs = [n for n in vars(ThriftHiveMetastore.Iface) if not n.startswith("_")] + ["getStatus"]
        for name in rpcs:
            original = getattr(hmsclient.HMSClient, name, None)
            if original is not None:
                setattr(hmsclient.HMSClient, name, self._counted(f"hms.{name}", original))
        TSocket.TSocket.open = self._counted("connections opened", TSocket.TSocket.open)
        journal_module.os.fsync = self._counted("fsync", os.fsync)  # type: ignore[attr-defined]
        FileJournal.get = self._counted("journal reads", FileJournal.get)  # type: ignore[method-assign]
        hive_table_module.list_dir = self._counted("listings", hive_table_module.list_dir)

    def _counted(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.phase is None:
                return original(*args, **kwargs)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.counts[self.phase][name] += 1
                self.call_ms[self.phase][name] += (time.perf_counter() - start) * 1000

        return wrapper

    @contextlib.contextmanager
    def recording(self, phase: str) -> Iterator[None]:
        self.phase = phase
        self.samples[phase] += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ms[phase].append(time.perf_counter() - start)
            self.phase = None

    def time_methods(self, obj: Any, prefix: str, names: tuple[str, ...]) -> None:
        for name in names:
            setattr(obj, name, self._recorded(f"{prefix}.{name}", getattr(obj, name)))

    def _recorded(self, phase: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.recording(phase):
                return method(*args, **kwargs)

        return wrapper

    def report(self, prefix: str, names: tuple[str, ...]) -> None:
        for name in names:
            phase = f"{prefix}.{name}"
            if not self.ms[phase]:
                continue
            n = self.samples[phase]
            per = " ".join(
                f"{key}={count / n:g}({self.call_ms[phase][key] / count:.1f}ms)"
                if key.startswith("hms.") else f"{key}={count / n:g}"
                for key, count in sorted(self.counts[phase].items())
            )
            print(
                f"    {name:<10} p50 {percentile_ms(self.ms[phase], 0.5):7.1f} ms  "
                f"p90 {percentile_ms(self.ms[phase], 0.9):7.1f}  per sample: {per}",
                flush=True,
            )


@contextlib.contextmanager
def reuse(enabled: bool) -> Iterator[None]:
    """Connection reuse on (the product's behaviour) or off (every block opens a connection)."""
    METASTORE_CONNECTIONS.close_all()  # as in a new task process
    if enabled:
        yield
        return
    original = client_module.ThriftConnections.reusable
    client_module.ThriftConnections.reusable = lambda self, conn, failed: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        client_module.ThriftConnections.reusable = original  # type: ignore[method-assign]


# -- services -----------------------------------------------------------------------------


@contextlib.contextmanager
def s3_store(enabled: bool) -> Iterator[str | None]:
    """A local S3 server's bucket URI (its endpoint and keys in this process's environment, where
    the metastores started after it find them), or None."""
    if not enabled:
        yield None
        return
    from airflow_provider_staged.local.s3_server import start_s3_server, stop_s3_server

    home = Path(tempfile.mkdtemp(prefix="profile-s3-"))
    server = start_s3_server(home, in_memory=False, heap="1g")
    os.environ.update(server.options.environment())
    try:
        yield f"s3a://{server.create_bucket('profile')}"
    finally:
        stop_s3_server(server)
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def metastores(names: list[str], bucket: str | None = None) -> Iterator[dict[str, tuple[str, Path]]]:
    """name -> (metastore URI, warehouse): ``derby`` (the embedded default), ``postgres`` (docker/'s
    settings), ``stock`` (Hive's defaults, none of the project's Java) and ``hive4`` (Hive 4's
    standalone metastore, stock, schema by schematool) on PostgreSQL."""
    from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
    from airflow_provider_staged.local.metastore_hive4 import start_hive4_metastore
    from airflow_provider_staged.local.metastore_postgres import (
        MetastoreDatabase,
        start_postgres_metastore,
    )
    from tests.fixtures.postgres_server import start_postgres, stop_postgres

    homes: list[Path] = []
    servers = []
    found: dict[str, tuple[str, Path]] = {}
    try:
        for name in names:
            home = Path(tempfile.mkdtemp(prefix=f"profile-{name}-"))
            homes.append(home)
            if name == "derby":
                info = start_metastore(home)
            else:
                import psycopg

                server = start_postgres(durable=True)  # PostgreSQL's defaults, as a real one
                servers.append(server)
                with psycopg.connect(server.conninfo(), autocommit=True) as admin:
                    admin.execute("CREATE DATABASE hms")
                database = MetastoreDatabase(server.host, server.port, "hms", server.user, server.password)
                if name == "hive4":
                    info = start_hive4_metastore(database, home)
                else:
                    info = start_postgres_metastore(database, home, stock=name == "stock")
            found[name] = (f"thrift://127.0.0.1:{info.port}", Path(info.warehouse))
            with MetastoreClient(found[name][0]) as client:
                client.ensure_database(DATABASE, f"{bucket}/{name}" if bucket else info.warehouse)
        yield found
    finally:
        METASTORE_CONNECTIONS.close_all()
        for home in homes:
            stop_metastore(home)
        for server in servers:
            stop_postgres(server)
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)


# -- data ---------------------------------------------------------------------------------


def parquet_source(root: Path, rows: int, partitions: int) -> list[dict[str, Any]]:
    """Two Parquet files of ``rows`` rows (what local[2] writes), or ``partitions`` partition
    directories ``ds=...`` of one file each; return the manifest's file entries."""
    files = []
    groups = [""] if not partitions else [f"ds=2024-01-{day + 1:02d}/" for day in range(partitions)]
    per_file = rows // (partitions or 2)
    for group in groups:
        for part in range(1 if partitions else 2):
            ids = pa.array(range(per_file), pa.int64())
            table = pa.table({
                "id": ids,
                "k": pc.remainder(ids, 1000),
                "v": pa.array([0.5] * per_file),
                "s": pc.cast(ids, pa.string()),
            })
            relative = f"{group}part-{part:05d}.snappy.parquet"
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, root / relative)
            files.append({"path": relative, "rows": per_file, "bytes": (root / relative).stat().st_size})
    return files


def fake_write(source: Path, files: list[dict[str, Any]], location: str, partitioned: bool) -> dict[str, Any]:
    """What the Spark job would leave: the same files (hard links; uploads on S3), and its manifest."""
    if files_layer.is_local(location):
        shutil.copytree(source, location.removeprefix("file:"), copy_function=os.link)
    else:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            target = files_layer.join(location, *path.relative_to(source).parts)
            files_layer.write_bytes(target, path.read_bytes())
    columns = [[n, h] for n, _, h in COLUMNS] + ([["ds", "string"]] if partitioned else [])
    schema = json.loads(SCHEMA_JSON)
    if partitioned:
        schema["fields"].append({"name": "ds", "type": "string", "nullable": True, "metadata": {}})
    return {
        "location": location,
        "schema_json": json.dumps(schema),
        "hive_columns": columns,
        "partition_columns": ["ds"] if partitioned else [],
        "files": files,
    }


# -- the measurements ---------------------------------------------------------------------


def call_costs(uri: str, samples: int) -> None:
    """get_table and lock+unlock on a fresh connection each, against one warm connection."""
    times: dict[str, list[float]] = collections.defaultdict(list)

    def fresh(call: Callable[[MetastoreClient], Any]) -> float:
        with reuse(False):
            start = time.perf_counter()
            with MetastoreClient(uri) as client:
                call(client)
            return time.perf_counter() - start

    with reuse(True), MetastoreClient(uri) as warm:
        calls = {
            "get_table": lambda c: c.get_table(DATABASE, "t_replace"),
            "lock+unlock": lock_and_unlock,
        }
        for rep in range(samples):
            for arm in arm_order(ARMS, rep):
                for name, call in calls.items():
                    if arm == "fresh":
                        times[f"{name} fresh"].append(fresh(call))
                    else:
                        start = time.perf_counter()
                        call(warm)
                        times[f"{name} warm"].append(time.perf_counter() - start)
    for key in sorted(times):
        p50, p90 = percentile_ms(times[key], 0.5), percentile_ms(times[key], 0.9)
        print(f"    {key:<22} p50 {p50:6.1f} ms  p90 {p90:6.1f}")


def lock_and_unlock(client: MetastoreClient) -> None:
    with table_lock(client, DATABASE, "t_replace"):
        pass


Files = list[dict[str, Any]]


def table_block(
    uri: str, home: Path, purpose: StagingPurpose, samples: int, counters: Counters, files: Files
) -> None:
    journal = FileJournal(home / f"journal-{purpose.value}")
    identifier = TableIdentifier(DATABASE, f"t_{purpose.value}")
    source = home / "source_table"

    def attempt(prefix: str, attempt_purpose: StagingPurpose) -> None:
        staged = HiveStagedTable(identifier, attempt_purpose, journal, uri, RETENTION)
        counters.time_methods(staged, prefix, PHASES)
        staged.begin()
        manifest = fake_write(source, files, staged.location, partitioned=False)
        staged.written(manifest)
        staged.commit()
        staged.housekeep()

    attempt("setup", StagingPurpose.CREATE_TABLE_AS)
    for rep in range(samples + 1):  # the first round is a warm-up
        for arm in arm_order(ARMS, rep):
            with reuse(arm == "reused"):
                attempt(f"{purpose.value}.{arm}" if rep else "warmup", purpose)
    for arm in ARMS:
        print(f"  {purpose.value}, connections {arm}:")
        counters.report(f"{purpose.value}.{arm}", PHASES)


def partition_block(uri: str, home: Path, samples: int, counters: Counters) -> None:
    journal = FileJournal(home / "journal-partitions")
    identifier = TableIdentifier(DATABASE, "t_partitions")
    initial, refresh = home / "source_initial", home / "source_refresh"
    initial_files = parquet_source(initial, 500_000, REPLACED)
    refresh_files = parquet_source(refresh, 1_000_000, REPLACED + ADDED)

    def attempt(prefix: str, source: Path, files: list[dict[str, Any]]) -> None:
        staged = HivePartitionStagedTable(identifier, ["ds"], {}, journal, uri, RETENTION)
        counters.time_methods(staged, prefix, PHASES)
        staged.begin()
        staged.written(fake_write(source, files, staged.location, partitioned=True))
        staged.commit()
        staged.housekeep()
        with MetastoreClient(uri) as client:  # untimed: back to the 10 partitions
            count = len(client.partitions(DATABASE, identifier.table))
            added = [f"ds=2024-01-{day + 1:02d}" for day in range(REPLACED, REPLACED + ADDED)]
            client.drop_partitions(DATABASE, identifier.table, added)
        if prefix != "setup" and count != REPLACED + ADDED:
            raise RuntimeError(f"{count} partitions after the refresh, not {REPLACED + ADDED}")

    attempt("setup", initial, initial_files)
    for rep in range(samples + 1):
        for arm in arm_order(ARMS, rep):
            with reuse(arm == "reused"):
                attempt(f"partitions.{arm}" if rep else "warmup", refresh, refresh_files)
    for arm in ARMS:
        print(f"  partitions {REPLACED} replaced + {ADDED} added, connections {arm}:")
        counters.report(f"partitions.{arm}", PHASES)


def attempted(block: Callable[..., None], *args: Any) -> None:
    """Run one block; a failure is printed and the other blocks still run (one run, many answers)."""
    try:
        block(*args)
    except Exception:
        traceback.print_exc()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--metastores", default="derby,postgres", help="comma-separated: derby, postgres, stock, hive4"
    )
    parser.add_argument("--samples", type=int, default=20, help="measured samples per arm")
    parser.add_argument("--store", choices=("local", "s3"), default="local", help="where the tables are")
    parser.add_argument("--smoke", action="store_true", help="2 samples: proves the script runs")
    args = parser.parse_args()
    samples = 2 if args.smoke else args.samples
    counters = Counters()
    started = time.perf_counter()
    with s3_store(args.store == "s3") as bucket, metastores(args.metastores.split(","), bucket) as found:
        for name, (uri, warehouse) in found.items():
            home = warehouse.parent / "profile"
            home.mkdir(exist_ok=True)
            print(f"\n=== {name}-backed metastore, tables on {args.store}; {samples} samples per arm; "
                  f"load average {load()}")
            counters.clear()
            files = parquet_source(home / "source_table", 1_000_000, 0)
            for purpose in (StagingPurpose.REPLACE_TABLE_AS, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS):
                attempted(table_block, uri, home, purpose, samples, counters, files)
            print("  one call, fresh connection vs warm:")
            attempted(call_costs, uri, samples)
            attempted(partition_block, uri, home, samples, counters)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {load()}")


if __name__ == "__main__":
    main()
