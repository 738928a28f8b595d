"""Two metastore set-ups (alter handler + store) side by side on a partition commit's catalog calls.

Arms (``--arms FIRST,SECOND``):

- ``hive``: Hive's ``HiveAlterHandler`` and ``ObjectStore``;
- ``batched``: ``BatchedAlterHandler`` (old partitions read in one batch) on Hive's ``ObjectStore``;
- ``embedded``: ``BatchedAlterHandler`` on ``SnapshotReadsStore``, whose ``alterPartitions``
  writes a switch that only moves partitions directly (the embedded default).

Two Derby metastores, one per arm, each with one table of 10 partitions. Per round, on each
metastore in alternating order (what a multi-partition refresh commit does to the catalog):
``add_partitions`` of 10 partitions at a placeholder, ``alter_partitions`` switching all 20 to a
new version directory, then (untimed) the 10 added ones dropped again. Every round checks that
all 20 partitions point at the new version. Metadata only: no Spark, no files.

Prints each arm's p50 per call and the paired ratio of ``alter_partitions`` (second/first).
Run: ``.venv/bin/python benchmarks/probes/probe_alter_handler.py --rounds 60`` (default arms
``batched,embedded``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.local.metastore import JAVA_PACKAGE, derby_conf, start_metastore
from airflow_provider_staged.local.processes import stop_pid

PARQUET = "org.apache.hadoop.hive.ql.io.parquet"
ARMS = {  # arm -> (hive.metastore.alter.impl, hive.metastore.rawstore.impl), classes of JAVA_PACKAGE
    "hive": ("HiveAlterHandler", "ObjectStore"),
    "batched": ("BatchedAlterHandler", "ObjectStore"),
    "embedded": ("BatchedAlterHandler", "SnapshotReadsStore"),
}
WARM_UP_ROUNDS = 3


def _storage(location: str) -> ttypes.StorageDescriptor:
    return ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema("id", "bigint", None), ttypes.FieldSchema("v", "string", None)],
        location=location,
        inputFormat=f"{PARQUET}.MapredParquetInputFormat",
        outputFormat=f"{PARQUET}.MapredParquetOutputFormat",
        serdeInfo=ttypes.SerDeInfo(serializationLib=f"{PARQUET}.serde.ParquetHiveSerDe", parameters={}),
        parameters={},
    )


def _partition(value: str, location: str, files: int) -> ttypes.Partition:
    return ttypes.Partition(values=[value], dbName="b", tableName="t", sd=_storage(location),
                            parameters={"numFiles": str(files), "totalSize": "0"})


def _round(client: MetastoreClient, root: str, version: int) -> tuple[float, float]:
    """One commit's catalog work; returns (add ms, alter ms)."""
    started = time.perf_counter()
    client.add_partitions([_partition(f"b{i}", f"{root}/_empty", 0) for i in range(10)])
    added = time.perf_counter()
    parts = client.partitions("b", "t")
    for part in parts:
        part.sd.location = f"{root}/v{version}/ds={part.values[0]}"
        part.parameters = {**part.parameters, "numFiles": "2"}
    switching = time.perf_counter()
    client.alter_partitions("b", "t", parts)
    switched = time.perf_counter()
    after = client.partitions("b", "t")
    wrong = [p.values for p in after
             if p.sd.location != f"{root}/v{version}/ds={p.values[0]}" or p.parameters["numFiles"] != "2"]
    if len(after) != 20 or wrong:
        raise AssertionError(f"round {version}: {len(after)} partitions, not switched: {wrong}")
    client.drop_partitions("b", "t", [f"ds=b{i}" for i in range(10)])
    return (added - started) * 1000, (switched - switching) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="measured rounds per arm")
    parser.add_argument("--arms", default="batched,embedded", help=f"two of {', '.join(ARMS)}")
    args = parser.parse_args()
    arms = args.arms.split(",")
    if len(arms) != 2 or len(set(arms)) != 2 or not set(arms) <= set(ARMS):
        parser.error(f"--arms: two different arms of {', '.join(ARMS)}")
    homes = {arm: Path(tempfile.mkdtemp(prefix=f"alter-{arm}-")) for arm in arms}
    servers = {}
    try:
        for arm in arms:
            handler, store = ARMS[arm]
            conf = {
                **derby_conf(homes[arm]),
                "hive.metastore.alter.impl": f"{JAVA_PACKAGE}.{handler}",
                "hive.metastore.rawstore.impl": f"{JAVA_PACKAGE}.{store}",
            }
            servers[arm] = start_metastore(homes[arm], database=conf)
        clients = {arm: MetastoreClient(info.uri).__enter__() for arm, info in servers.items()}
        for arm, client in clients.items():
            client.ensure_database("b", servers[arm].warehouse)
            root = f"file:{homes[arm]}/t"
            client.create_table(ttypes.Table(
                tableName="t", dbName="b", owner="bench", sd=_storage(root), parameters={},
                partitionKeys=[ttypes.FieldSchema("ds", "string", None)], tableType="EXTERNAL_TABLE",
            ))
            client.add_partitions([_partition(f"a{i}", f"{root}/v0/ds=a{i}", 1) for i in range(10)])
        times: dict[str, dict[str, list[float]]] = {arm: {"add": [], "alter": []} for arm in arms}
        for number in range(WARM_UP_ROUNDS + args.rounds):
            order = arms if number % 2 else list(reversed(arms))
            for arm in order:
                add, alter = _round(clients[arm], f"file:{homes[arm]}/t", number + 1)
                if number >= WARM_UP_ROUNDS:
                    times[arm]["add"].append(add)
                    times[arm]["alter"].append(alter)
        for arm, calls in times.items():
            medians = ", ".join(f"{call} p50 {statistics.median(ms):.1f} ms" for call, ms in calls.items())
            print(f"{arm:8} {medians}")
        first, second = arms
        ratios = sorted(b / a for a, b in zip(times[first]["alter"], times[second]["alter"], strict=True))
        tenth = len(ratios) // 10
        print(f"alter_partitions(20) {second}/{first} paired median {statistics.median(ratios):.3f} "
              f"(p10 {ratios[tenth]:.3f}, p90 {ratios[-tenth - 1]:.3f}, {len(ratios)} pairs)")
    finally:
        for info in servers.values():
            stop_pid(info.pid)


if __name__ == "__main__":
    main()
