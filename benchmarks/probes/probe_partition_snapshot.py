"""Do reads of the embedded Derby metastore ever see half of a write (partitions or a table)?

Hive's own ``ObjectStore`` against ``SnapshotReadsStore`` (the embedded default), in
alternating rounds, each on a fresh metastore: one table with ``--partitions`` partitions; a
writer makes ``--alters`` multi-partition writes, each one metastore call; ``--readers``
processes list the partitions (``get_partitions``) in a loop meanwhile and count mixed listings
and failed ones. Metadata only: no Spark, no files. ``--write``:

- ``alter``: one ``alter_partitions`` switches every partition's location to a new version
  directory (a refresh); a listing is mixed when its locations name more than one version;
- ``drop``: one ``drop_partitions_req`` drops the first half of the partitions (an expiry), and
  one ``add_partitions`` adds them back; a listing is mixed when it holds neither all partitions
  nor exactly the second half;
- ``table``: one ``alter_table`` switches the table's location to a new version directory and
  records the version in a table parameter (a whole-table replace); readers read the table
  (``get_table``) instead, and a read is mixed when its location and parameter disagree.

Prints, per store: listings, mixed and failed listings, and the write's p50 latency; the
stores' p50 ratio shows what the lock costs the writer. A mixed or failed listing on Hive's
store is the anomaly (Derby's read-committed scan); on ours the count must be 0.
Run: ``.venv/bin/python benchmarks/probes/probe_partition_snapshot.py`` (about 6 minutes).
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import _benchmarks_path  # noqa: F401 (benchmarks/ on sys.path)
from _common import load
from hmsclient.genthrift.hive_metastore import ttypes
from thrift.transport.TTransport import TTransportException

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.local.metastore import derby_conf, start_metastore, stop_metastore

DATABASE, TABLE = "probe", "switched"
PARQUET = "org.apache.hadoop.hive.ql.io.parquet"
STORES = ("hive", "snapshot")
VERSION_KEY = "probe.version"


def create_table(client: MetastoreClient, warehouse: str, partitions: int) -> None:
    client.ensure_database(DATABASE, warehouse)
    sd = ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema("x", "int", None)],
        location=f"{warehouse}/{DATABASE}.db/{TABLE}",
        inputFormat=f"{PARQUET}.MapredParquetInputFormat",
        outputFormat=f"{PARQUET}.MapredParquetOutputFormat",
        serdeInfo=ttypes.SerDeInfo(serializationLib=f"{PARQUET}.serde.ParquetHiveSerDe", parameters={}),
        parameters={},
    )
    client.create_table(ttypes.Table(
        tableName=TABLE, dbName=DATABASE, sd=sd, partitionKeys=[ttypes.FieldSchema("p", "string", None)],
        tableType="EXTERNAL_TABLE", parameters={"EXTERNAL": "TRUE"},
    ))
    parts = []
    for index in range(partitions):
        part_sd = copy.deepcopy(sd)
        part_sd.location = version_location(sd.location, 0, f"p={index:04d}")
        parts.append(ttypes.Partition(
            values=[f"{index:04d}"], dbName=DATABASE, tableName=TABLE, sd=part_sd, parameters={}
        ))
    client.add_partitions(parts)


def version_location(root: str, version: int, partition: str) -> str:
    return f"{root}/v{version}/{partition}"


def version_of(location: str) -> str:
    return location.rsplit("/", 2)[1]


def is_mixed(write: str, partitions: int, listed: list[ttypes.Partition]) -> bool:
    """Whether ``listed`` is a state that no single write of ``write`` produced."""
    if write == "alter":
        return len({version_of(part.sd.location) for part in listed}) > 1
    values = sorted(part.values for part in listed)  # a half-read partition has no values
    everything = [[f"{index:04d}"] for index in range(partitions)]
    return values not in (everything, everything[partitions // 2:])


def is_mixed_table(table: ttypes.Table) -> bool:
    """Whether the location of ``table`` and its version parameter name different switches."""
    # Before the first switch: the table root, no parameter.
    return table.sd.location.rsplit("/", 1)[1] != (table.parameters or {}).get(VERSION_KEY, TABLE)


def reader(
    uri: str, write: str, partitions: int, stop: multiprocessing.synchronize.Event,
    results: multiprocessing.Queue,
) -> None:
    listings = mixed = failed = 0
    with MetastoreClient(uri) as client:
        while not stop.is_set():
            try:
                if write == "table":
                    table = client.get_table(DATABASE, TABLE)
                else:
                    listed = client.partitions(DATABASE, TABLE)
            except Exception as error:  # a listing must never fail: count it, say what it was
                failed += 1
                if failed == 1:
                    print(f"listing failed: {error!r}", flush=True)
                continue
            listings += 1
            mixed += is_mixed_table(table) if write == "table" else is_mixed(write, partitions, listed)
    results.put((listings, mixed, failed))


def switch_all(uri: str, alters: int, seconds: list[float]) -> None:
    with MetastoreClient(uri) as client:
        root = client.get_table(DATABASE, TABLE).sd.location
        for version in range(1, alters + 1):
            parts = client.partitions(DATABASE, TABLE)
            for part in parts:
                part.sd.location = version_location(root, version, part.sd.location.rsplit("/", 1)[1])
            started = time.perf_counter()
            client.alter_partitions(DATABASE, TABLE, parts)
            seconds.append(time.perf_counter() - started)


def drop_and_add(uri: str, alters: int, seconds: list[float]) -> None:
    """Drop the first half of the partitions in one call, add them back in one."""
    with MetastoreClient(uri) as client:
        parts = client.partitions(DATABASE, TABLE)
        first_half = sorted(parts, key=lambda part: part.values[0])[: len(parts) // 2]
        names = [f"p={part.values[0]}" for part in first_half]
        for _ in range(alters):
            started = time.perf_counter()
            client.drop_partitions(DATABASE, TABLE, names)
            seconds.append(time.perf_counter() - started)
            started = time.perf_counter()
            client.add_partitions(copy.deepcopy(first_half))
            seconds.append(time.perf_counter() - started)


def switch_table(uri: str, alters: int, seconds: list[float]) -> None:
    """Switch the table's location and its version parameter in one ``alter_table``."""
    with MetastoreClient(uri) as client:
        root = client.get_table(DATABASE, TABLE).sd.location
        for version in range(1, alters + 1):
            table = client.read_for_update(DATABASE, TABLE)
            table.sd.location = f"{root}/v{version}"
            table.parameters = {**table.parameters, VERSION_KEY: f"v{version}"}
            started = time.perf_counter()
            client.alter_table(table)
            seconds.append(time.perf_counter() - started)


WRITES = {"alter": switch_all, "drop": drop_and_add, "table": switch_table}


def one_round(store: str, args: argparse.Namespace) -> tuple[int, int, int, list[float]]:
    """(listings, mixed listings, failed listings, write seconds) on a fresh metastore with
    ``store``."""
    with tempfile.TemporaryDirectory(prefix=f"probe-{store}-") as tmp:
        home = Path(tmp)
        database = derby_conf(home)
        if store == "hive":
            del database["hive.metastore.rawstore.impl"]
        info = start_metastore(home, database=database)
        try:
            with MetastoreClient(info.uri) as client:
                create_table(client, info.warehouse, args.partitions)
            spawn = multiprocessing.get_context("spawn")
            stop, results = spawn.Event(), spawn.Queue()
            readers = [
                spawn.Process(target=reader, args=(info.uri, args.write, args.partitions, stop, results))
                for _ in range(args.readers)
            ]
            for process in readers:
                process.start()
            time.sleep(2)  # the readers' interpreters start
            seconds: list[float] = []  # of every write call, filled as they return
            try:
                WRITES[args.write](info.uri, args.alters, seconds)
            except TTransportException as error:  # Hive's store can wedge: the round ends there
                print(f"{store}: the writer failed after {len(seconds)} calls: {error!r}", flush=True)
            stop.set()
            counts = [results.get(timeout=60) for _ in readers]
            for process in readers:
                process.join(timeout=60)
        finally:
            stop_metastore(home)
    return sum(c[0] for c in counts), sum(c[1] for c in counts), sum(c[2] for c in counts), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--alters", type=int, default=200, help="writes per round")
    parser.add_argument("--write", choices=sorted(WRITES), default="alter")
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per store, alternating")
    args = parser.parse_args()
    print(f"load before: {load()}", flush=True)
    totals = {store: [0, 0, 0, []] for store in STORES}
    for round_index in range(args.rounds):
        for store in STORES if round_index % 2 == 0 else reversed(STORES):
            listings, mixed, failed, seconds = one_round(store, args)
            for index, value in enumerate((listings, mixed, failed, seconds)):
                totals[store][index] += value
            print(f"round {round_index + 1} {store:8s}: {listings} listings, {mixed} mixed, "
                  f"{failed} failed, {args.write} p50 {statistics.median(seconds) * 1000:.1f} ms", flush=True)
    for store, (listings, mixed, failed, seconds) in totals.items():
        print(f"{store:8s}: {listings} listings during {len(seconds)} {args.write} calls, {mixed} mixed, "
              f"{failed} failed, {args.write} p50 {statistics.median(seconds) * 1000:.1f} ms")
    ratio = statistics.median(totals["snapshot"][3]) / statistics.median(totals["hive"][3])
    print(f"{args.write} p50 snapshot/hive: {ratio:.2f}; load after: {load()}")


if __name__ == "__main__":
    main()
