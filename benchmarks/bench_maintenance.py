"""Partition-expiry sweep over many TTL tables: wall time and metastore calls, next to Spark SQL.

Set-up (untimed, metadata only: no data files): ``--tables`` partitioned tables (default 1,000)
spread over ``--databases`` databases, each with ``--partitions`` partitions (default 100:
ds = today-100 .. today-1) and ``'partition.expiration-time' = '365 d'``, created directly in
the metastore (one ``create_table`` and one ``add_partitions`` per table) over
``--setup-connections`` Thrift connections in parallel. The partition directories are made
beforehand with ``os.makedirs``: otherwise the metastore makes each one through Hadoop's
FileSystem, which was ~2/3 of the set-up's time (100,000 partitions took ~45 min). Every database but
the first records each table's next expiry, as a table does once a sweep or commit has seen it;
the first database's tables do not (a "cold" database).

Measured in one run, on one metastore:

- ``cold sweep``: the first database only: each table's partitions are read and its next
  expiry recorded under the table lock;
- ``warm sweep``: every database, nothing expires (the steady state): one ``get_all_tables``
  and one ``get_table_objects_by_name_req`` per database, no per-table call (target: <= 1 call per
  table);
- ``expiring sweep``: the first database, the clock moved so that every table's oldest
  partition expired: each table's expiry is a journaled attempt that drops it in one
  ``drop_partitions_req``;
- ``spark show partitions``: ``SHOW PARTITIONS db.t`` through Spark SQL for every table (what a
  sweep built on Spark's catalog would at least do). Spark's own metastore calls are made by its
  JVM client and are not counted here (at least one per table).

Metastore calls of the sweeps are counted at the Thrift client (every ``send_*``, including
lock calls). Starts its own metastore (Derby, temp home) and a ``local[2]`` SparkSession.
Run: ``.venv/bin/python benchmarks/bench_maintenance.py`` (small: ``--tables 20 --partitions 10``).
"""

from __future__ import annotations

import argparse
import calendar
import collections
import copy
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from _common import hive_services, load
from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore, ttypes

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.staging.expiry import sweep_expiry
from airflow_provider_staged.staging.partition_ttl import NEXT_EXPIRY_KEY
from airflow_provider_staged.staging.settings import StagedSettings

DAY = 86400.0


class CallCounter:
    """Counts every Thrift call this process sends to a metastore, by name."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        for name in dir(ThriftHiveMetastore.Client):
            if name.startswith("send_"):
                setattr(
                    ThriftHiveMetastore.Client,
                    name,
                    self._wrap(name[5:], getattr(ThriftHiveMetastore.Client, name)),
                )

    def _wrap(self, name: str, original: Any) -> Any:
        def counted(client: Any, *args: Any) -> Any:
            self.calls[name] += 1
            return original(client, *args)

        return counted

    def take(self) -> collections.Counter[str]:
        taken, self.calls = self.calls, collections.Counter()
        return taken


def _table(database: str, name: str, root: str) -> ttypes.Table:
    sd = ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema(name="id", type="bigint")],
        location=f"{root}/{name}",
        inputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
        serdeInfo=ttypes.SerDeInfo(
            serializationLib="org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe", parameters={}
        ),
        bucketCols=[],
        sortCols=[],
        parameters={},
        numBuckets=-1,
        compressed=False,
    )
    return ttypes.Table(
        tableName=name,
        dbName=database,
        owner="bench",
        sd=sd,
        tableType="EXTERNAL_TABLE",
        partitionKeys=[ttypes.FieldSchema(name="ds", type="string")],
        parameters={"EXTERNAL": "TRUE", "partition.expiration-time": "365 d"},
    )


def create_tables(
    uri: str, warehouse: Path, databases: list[str], tables: int, partitions: int, connections: int
) -> float:
    """Tables with partitions ds = today-N .. today-1, two metastore calls per table, over
    ``connections`` connections in parallel; returns the epoch seconds of the oldest partition's day."""
    days = [date.today() - timedelta(days=n) for n in range(partitions, 0, -1)]
    oldest = float(calendar.timegm(days[0].timetuple()))

    def create(indexes: range) -> None:
        with MetastoreClient(uri) as client:
            for index in indexes:
                database = databases[index % len(databases)]
                table = _table(database, f"t_{index:05d}", f"file:{warehouse}/{database}.db")
                if database != databases[0]:
                    table.parameters[NEXT_EXPIRY_KEY] = str(int(oldest + 365 * DAY))
                locations = [f"{table.sd.location}/_v=b/ds={day}" for day in days]
                for location in locations:
                    os.makedirs(location.removeprefix("file:"), exist_ok=True)
                client.create_table(table)
                client.add_partitions(
                    [
                        ttypes.Partition(
                            values=[day.isoformat()],
                            dbName=database,
                            tableName=table.tableName,
                            sd=_at(table.sd, location),
                            parameters={"numFiles": "1", "totalSize": "512"},
                        )
                        for day, location in zip(days, locations, strict=True)
                    ]
                )

    with ThreadPoolExecutor(connections) as pool:
        # Each connection creates every connections-th table; list() re-raises a failure.
        list(pool.map(create, [range(n, tables, connections) for n in range(connections)]))
    return oldest


def _at(storage: ttypes.StorageDescriptor, location: str) -> ttypes.StorageDescriptor:
    moved = copy.copy(storage)
    moved.location = location
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--databases", type=int, default=10)
    parser.add_argument("--setup-connections", type=int, default=6)
    args = parser.parse_args()
    databases = [f"bm_{n}" for n in range(args.databases)]
    counter = CallCounter()
    with hive_services("bench-maintenance", databases[0]) as services:
        for database in databases[1:]:
            services.spark.sql(f"CREATE DATABASE {database}")
        started = time.perf_counter()
        oldest = create_tables(
            services.metastore_uri,
            services.warehouse,
            databases,
            args.tables,
            args.partitions,
            args.setup_connections,
        )
        setup_seconds = time.perf_counter() - started
        print(
            f"set-up: {args.tables} tables x {args.partitions} partitions in {args.databases} databases "
            f"over {args.setup_connections} connections, {setup_seconds:.0f}s "
            f"({args.tables * args.partitions / setup_seconds:.0f} partitions/s)",
            flush=True,
        )
        settings = StagedSettings(
            services.metastore_uri, str(services.warehouse), str(services.home / "journal")
        )
        rows = []
        cold = [databases[0]]
        per_database = -(-args.tables // args.databases)
        for label, now, swept, count in (
            ("cold sweep", time.time(), cold, per_database),
            ("warm sweep", time.time(), databases, args.tables),
            ("expiring sweep", oldest + 365 * DAY + 3600, cold, per_database),
        ):
            counter.take()
            started = time.perf_counter()
            report = sweep_expiry(settings, now=now, databases=swept)
            seconds = time.perf_counter() - started
            calls = counter.take()
            total = sum(calls.values())
            dropped = sum(len(plan.expired) for plan in report.plans)
            assert not report.failures, report.failures
            rows.append((f"{label} ({count} tables)", count, seconds, total, dropped, report.skipped, calls))
        spark = services.spark
        started = time.perf_counter()
        listed = sum(
            len(spark.sql(f"SHOW PARTITIONS {databases[i % len(databases)]}.t_{i:05d}").collect())
            for i in range(args.tables)
        )
        spark_seconds = time.perf_counter() - started
        print(f"\n{args.tables} tables x {args.partitions} partitions; load average {load()}")
        print(f"{'':30}{'wall s':>9}{'calls':>9}{'calls/table':>13}{'dropped':>9}{'not read':>10}")
        for label, count, seconds, total, dropped, skipped, _calls in rows:
            print(f"{label:30}{seconds:9.2f}{total:9d}{total / count:13.3f}{dropped:9d}{skipped:10d}")
        print(f"{'spark show partitions':30}{spark_seconds:9.2f}{'>= 1/table':>22}   ({listed} listed)")
        for label, *_rest, calls in rows:
            print(f"  {label} calls: {dict(calls.most_common())}")
        warm_calls = rows[1][3] / args.tables
        print(
            f"\ntarget <= 1 metastore call per table when nothing expires: "
            f"{'met' if warm_calls <= 1 else 'NOT met'} ({warm_calls:.3f})"
        )


if __name__ == "__main__":
    main()
