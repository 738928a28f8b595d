"""Commit cost of one Hive sink micro-batch into a partitioned table: catalog vs directory partitions.

A CONTINUOUS materialized table's sink tracks its partitions in the catalog (so a one-time
refresh can switch one), and Spark reads only the files directly in a catalog partition's
directory: every micro-batch publishes a new version of each partition it touches, holding hard
links to the partition's current files plus its own, and switches them in one
``alter_partitions``. A table whose partitions Spark discovers from directories gets a
``batch-<id>/`` directory per partition instead (one rename each). This measures what that
costs per micro-batch (begin → written → commit → housekeep of ``hive_append``, no Spark), two
arms alternating in one process, each micro-batch touching 2 partitions:

- ``directories``: the table Spark discovers partitions of (the cost does not grow);
- ``catalog``: the catalog-tracked table, whose partitions already hold ``--files`` files each
  (hard links made untimed before the first rep; each micro-batch adds one per partition).

Prints p50/p90 per arm and the paired ratio catalog/directories. Starts a Derby metastore (temp
home) and stops it. Run: ``.venv/bin/python benchmarks/bench_partition_append.py --files 0 100 1000``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from _common import alternating_rounds, load, paired_ratios, percentile_ms, stopwatch

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_sink import HiveAppendStagedTable, staging_dir
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from airflow_provider_staged.storage.files import normalize_location

DATABASE = "bench_append"
PARTITIONS = ("0", "1")
SCHEMA = ('{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},'
          '{"name":"p","type":"string","nullable":true,"metadata":{}}]}')


class Table:
    """One partitioned table the arm appends micro-batches to (query ``q``, batches 0, 1, ...)."""

    def __init__(self, name: str, uri: str, journal: FileJournal, tracked: bool, sample: Path) -> None:
        self.identifier = TableIdentifier(DATABASE, name)
        self.uri, self.journal, self.tracked, self.sample = uri, journal, tracked, sample
        self.query = "q" + uuid.uuid4().hex[:6]
        self.batch = 0

    def append(self) -> float:
        """Stage one micro-batch (untimed), then time its journaled commit and housekeeping."""
        write_id = f"{self.query}-b{self.batch}-{uuid.uuid4().hex[:6]}"
        staged = HiveAppendStagedTable(
            self.identifier, self.journal, self.uri, query_id=self.query, batch_id=self.batch, streaming=True,
            attempt_id=write_id, track_partitions=self.tracked,
        )
        root = staging_dir(staged.table_root_resolved, write_id).removeprefix("file:")
        files = []
        for value in PARTITIONS:
            os.makedirs(f"{root}/ready/p={value}")
            shutil.copyfile(self.sample, f"{root}/ready/p={value}/part-0.parquet")
            files.append(DataFile(f"p={value}/part-0.parquet", 10, self.sample.stat().st_size))
        manifest = Manifest(location=staged.staging, schema_json=SCHEMA,
                            columns=[("id", "bigint"), ("p", "string")], partition_columns=["p"], files=files)
        self.batch += 1

        def commit() -> None:
            staged.begin()
            staged.written(manifest)
            staged.commit()
            staged.housekeep()

        return stopwatch(commit)

    def fill(self, count: int) -> None:
        """Hard-link ``count`` more data files into each catalog partition's current directory."""
        with MetastoreClient(self.uri) as client:
            for partition in client.partitions(DATABASE, self.identifier.table):
                directory = normalize_location(partition.sd.location).removeprefix("file:")
                for index in range(count):
                    os.link(self.sample, f"{directory}/{self.query}-b0-fill-{index}.parquet")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, nargs="+", default=[0, 100, 1000],
                        help="data files already in each catalog partition (one run per value)")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-append-"))
    try:
        metastore = start_metastore(home)
        with MetastoreClient(metastore.uri) as client:
            client.ensure_database(DATABASE, metastore.warehouse)
        sample = home / "sample.parquet"
        pq.write_table(pa.table({"id": list(range(10))}), sample)
        print(f"load average {load()}; {args.reps} reps per arm, 2 partitions per micro-batch", flush=True)
        for count in args.files:
            journal = FileJournal(home / f"journal-{count}")
            arms = {"directories": Table(f"dirs_{count}", metastore.uri, journal, False, sample),
                    "catalog": Table(f"catalog_{count}", metastore.uri, journal, True, sample)}
            for table in arms.values():
                table.append()  # creates the table
            arms["catalog"].fill(count)
            times = alternating_rounds({name: table.append for name, table in arms.items()}, args.reps)
            ratio = paired_ratios(times["catalog"], times["directories"])
            summary = "  ".join(f"{name} p50 {percentile_ms(values, 0.5):.0f} ms p90 "
                                f"{percentile_ms(values, 0.9):.0f} ms" for name, values in times.items())
            print(f"files per partition {count:>5}: {summary}  catalog/directories {ratio.describe()}",
                  flush=True)
        print(f"load average {load()}", flush=True)
    finally:
        stop_metastore(home)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
