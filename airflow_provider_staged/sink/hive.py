"""The built-in Hive sink: appends or overwrites a Hive Metastore Parquet table, exactly once.

Writers stage Parquet files per task attempt under ``<table root>/_staging/<write id>/tasks/``;
the committer moves the committed attempts' files to ``…/ready/``; the global committer
publishes ``ready/`` through the journaled commit path (``staging.kinds.hive_sink``: one
metastore call records the data and the streaming query's batch), then sweeps the write's
staging area (failed and speculative attempts' files). ``write_native`` is the same write with
Spark's own Parquet writer into ``ready/`` (Spark's commit protocol keeps only committed task
attempts): the runtime uses it for batch writes and ``foreachBatch`` streams. An appending
stream to a table on a local or shared filesystem is written by Spark's file sink instead
(``sink.file_stream``): its logged micro-batches' files move into ``ready/`` inside their
journaled commit (``logged`` committables). On an object store every path operation goes
through the storage layer and no step needs a rename (``staging.kinds.hive_sink``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_staged.sink.api import (
    Committer,
    GlobalCommitter,
    Sink,
    SinkWriter,
    WriterContext,
    WriteRef,
    check_mode,
)
from airflow_provider_staged.sink.file_stream import hadoop_checksum, remove_if_present
from airflow_provider_staged.sink.recovery import abort_once, batch_prefix, commit_once, filter_recovered
from airflow_provider_staged.sink.secret_files import read_secret, secret_file
from airflow_provider_staged.staging.attempts import is_quarantined
from airflow_provider_staged.staging.audits import JUDGED_AT_COMMIT, Expectation, coerce_audits
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier, validate_name
from airflow_provider_staged.staging.kinds.hive_sink import (
    READY_DIR,
    STAGING_DIR,
    STREAM_SUFFIX,
    HiveAppendStagedTable,
    HiveOverwriteStagedTable,
    HiveSinkCommit,
    move_file_once,
    staging_dir,
)
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from airflow_provider_staged.staging.partition_paths import partition_path
from airflow_provider_staged.storage.files import (
    check_location,
    configure_s3,
    delete_dir,
    exists,
    is_local,
    join,
    list_dir,
    normalize_location,
    open_input_file,
    resolve,
    s3_options,
)
from airflow_provider_staged.storage.s3 import S3Options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_staged.staging.settings import StagedSettings

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Rows a Python task writer buffers before writing them as one row group. Spark hands the writer
# Arrow batches of ~10k rows; one row group per batch wrote 2M rows in 0.32 s and 24 MB against
# 0.17 s and 17 MB as 1M-row groups (pyarrow, measured here). The bound is per task writer, over
# all its files, so a task writing many partitions buffers no more.
ROW_GROUP_ROWS = 1_000_000
# pyarrow dictionary-encodes every column until a row group's dictionary overflows; for a mostly
# unique column that attempt is wasted (16% of writing 5M rows of (id, k, s) here, and larger
# files). A file's columns are dictionary-encoded only when their first rows repeat values.
DICTIONARY_SAMPLE_ROWS = 10_000


@dataclass(frozen=True)
class HiveFilesCommittable(WriteRef):
    """Parquet files one task attempt (or Spark's native writer) staged for one write.

    ``files`` are relative to ``source`` (a task attempt's directory) — or to ``ready/`` when
    ``source`` is None (already there). ``logged``: ``source`` is the stream staging directory of
    Spark's file sink, whose files move only inside the journaled commit (``file_stream``).
    ``audits``: the write's audit results (Spark's writer), ``dropped_rows`` kept out by them.
    """

    mode: str
    schema_json: str
    staging: str
    source: str | None
    files: tuple[DataFile, ...]
    logged: bool = False
    audits: tuple[dict, ...] = ()
    dropped_rows: int = 0


@dataclass(frozen=True)
class HiveWriteCommittable(WriteRef):
    """One whole write: its files in ``ready/`` (or still in ``stream_source``, a logged
    micro-batch's) and the batch it is."""

    mode: str
    schema_json: str
    staging: str
    files: tuple[DataFile, ...]
    stream_source: str | None = None
    audits: tuple[dict, ...] = ()
    dropped_rows: int = 0


class HiveSink(Sink[HiveFilesCommittable, HiveWriteCommittable]):
    """Appends to (``mode="append"``) or replaces (``"overwrite"``) ``table``, partitioned by
    ``partition_by`` (the table's partition columns, when it exists); ``track_partitions``: a
    partitioned table it creates tracks its partitions in the catalog.

    ``audits`` (the operator's vocabulary: ``staging.audits.coerce_audits``): row, table and
    reference expectations judged on each write (each micro-batch) after it is staged and before
    its commit, as a staged build's; a blocking failure keeps the batch quarantined, unpublished
    (``staged audits show`` / ``staged publish``), and fails the write (a stream stops). Counted by
    Spark's writer (``native``) during the write; change and schema audits compare a version with
    the one it replaces, which an append does not.
    """

    def __init__(
        self,
        table: TableIdentifier | str,
        settings: StagedSettings,
        mode: str = "append",
        partition_by: Sequence[str] = (),
        native: bool = True,
        track_partitions: bool = False,
        audits: Iterable[Expectation | Mapping[str, Any]] | None = None,
    ) -> None:
        self.table = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
        self.settings = settings
        self.mode = check_mode(mode)
        if isinstance(partition_by, str):
            raise ValueError(f"invalid partition_by {partition_by!r}: expected a list of column names")
        self.partition_by = [validate_name(column, "partition column") for column in partition_by]
        # Spark's own Parquet writer (batch writes, foreachBatch streams); False: the Arrow writers.
        self.native = native
        self.track_partitions = track_partitions
        self.audits = coerce_audits(audits)
        if self.audits and not native:
            raise ValueError(f"audits of sink {self.table.name} need its native writer (native=True): "
                             "Spark counts them while it writes")
        compared = [e.name for e in self.audits.expectations if e.kind in JUDGED_AT_COMMIT]
        if compared:
            raise ValueError(f"audit(s) {compared} of sink {self.table.name}: change and schema audits "
                             "compare a version with the one it replaces; a sink takes row, table and "
                             "reference audits")
        self._root: str | None = None
        # Shipped to Spark's workers for a write to an object store: a 0600 file holding the
        # bucket's S3 options (``shipping``); workers get neither the driver's keys nor its env.
        self.storage_file: str | None = None

    @property
    def name(self) -> str:
        return self.table.name

    def _mode(self, context_mode: str) -> str:
        return "overwrite" if "overwrite" in (self.mode, context_mode) else "append"

    def root(self) -> str:
        """The table's root directory (its version directories and ``_staging``)."""
        if self._root is None:
            root = self.commit_table("root", "root", 0, False, "append").table_root_resolved
            check_location(root)  # before any write: no credentials, no bucket, unknown scheme
            self._root = root
        return self._root

    def commit_table(
        self, write_id: str, query_id: str, batch_id: int, streaming: bool, mode: str,
        stream_source: str | None = None,
    ) -> HiveSinkCommit:
        """The journaled commit of one write (the staged kind of its mode)."""
        kind = HiveOverwriteStagedTable if mode == "overwrite" else HiveAppendStagedTable
        staged = kind(
            self.table, self.settings.journal, self.settings.metastore_uri, query_id=query_id,
            batch_id=batch_id, streaming=streaming, retention=self.settings.retention, attempt_id=write_id,
            root=self._root, track_partitions=self.track_partitions, stream_source=stream_source,
        )
        staged.audits = self.audits
        return staged

    def _committable(
        self, context: WriterContext, source: str | None, files: list[DataFile]
    ) -> HiveFilesCommittable:
        return HiveFilesCommittable(
            context.write_id, context.query_id, context.batch_id, context.streaming,
            self._mode(context.mode), _ordered_schema(context.schema_json, self.partition_by),
            staging_dir(self.root(), context.write_id), source, tuple(files),
        )

    def logs_streams(self) -> bool:
        """Spark's file sink writes this sink's streams only on a filesystem that renames (its
        logged batches' files move out of the stream's staging directory) and unaudited (Spark's
        writer counts the audits)."""
        return not self.audits and is_local(self.root())

    def stream_staging(self, query_id: str) -> str:
        """Where Spark's file sink writes the micro-batches of streaming query ``query_id``."""
        return normalize_location(staging_dir(self.root(), query_id + STREAM_SUFFIX)).removeprefix("file:")

    def logged_committables(
        self, context: WriterContext, staging: str, files: list[DataFile]
    ) -> list[HiveFilesCommittable]:
        return [dataclasses.replace(self._committable(context, staging, files), logged=True)]

    @contextlib.contextmanager
    def shipping(self) -> Iterator[HiveSink]:
        """On an object store, a copy whose workers read the bucket's S3 options (its keys, from
        an Airflow connection or the driver's environment) from a file living only while the
        write runs: in no pickle, plan or journal."""
        root = self.root()
        if is_local(root):
            yield self
            return
        options = s3_options(urlparse(root).netloc)
        with secret_file(self.settings.journal_dir, json.dumps(options.environment())) as path:
            shipped = copy.copy(self)
            shipped.storage_file = path
            yield shipped

    def _use_shipped_storage(self) -> None:
        """In a Spark worker: the S3 options the driver shipped, for this write's bucket."""
        text = read_secret(self.storage_file) if self.storage_file else None
        if text is not None and self._root is not None:
            bucket = urlparse(self._root).netloc
            options = S3Options.from_env(json.loads(text))
            if s3_options(bucket) != options:
                configure_s3(options, bucket)

    def create_writer(self, context: WriterContext) -> SinkWriter[HiveFilesCommittable]:
        self._use_shipped_storage()
        staging = staging_dir(self.root(), context.write_id)
        return _ParquetTaskWriter(self, context, f"{staging}/tasks/{context.task_key}")

    def write_native(self, df: DataFrame, context: WriterContext) -> list[HiveFilesCommittable]:
        """Spark's Parquet writer into ``ready/`` (its commit protocol drops failed attempts)."""
        from airflow_provider_staged.engine.spark_job import data_files

        missing = [column for column in self.partition_by if column not in df.columns]
        if missing:
            raise ValueError(f"the rows have no partition column(s) {missing} (columns: {df.columns})")
        ready = f"{staging_dir(self.root(), context.write_id)}/{READY_DIR}"
        observed = None
        if self.audits:
            from airflow_provider_staged.engine.audit_job import observed_frame

            df, observed = observed_frame(df, self.audits)
        writer = df.write.format("parquet").mode("error")  # "errorifexists" is not accepted by Spark Connect
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        try:
            writer.save(ready)
            files = [DataFile(**item) for item in data_files(ready)]
            committable = self._committable(context, None, files)
            if observed is not None:
                from airflow_provider_staged.engine.audit_job import audit_staged

                read_staged = functools.partial(df.sparkSession.read.parquet, ready)
                results, dropped = audit_staged(df, read_staged, self.audits, observed)
                committable = dataclasses.replace(committable, audits=tuple(results), dropped_rows=dropped)
        except BaseException:  # nothing journaled yet: no commit or abort would find these files
            delete_dir(staging_dir(self.root(), context.write_id))
            raise
        return [committable]

    def create_committer(self) -> Committer[HiveFilesCommittable]:
        self._use_shipped_storage()
        return _ReadyCommitter()

    def create_global_committer(self) -> GlobalCommitter[HiveFilesCommittable, HiveWriteCommittable]:
        self._use_shipped_storage()
        return _HiveGlobalCommitter(self)


def _ordered_schema(schema_json: str, partition_by: Sequence[str]) -> str:
    """The rows' schema with the partition columns last (the table's column order)."""
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(schema_json))
    missing = [column for column in partition_by if column not in schema.fieldNames()]
    if missing:
        raise ValueError(f"the rows have no partition column(s) {missing} (columns: {schema.fieldNames()})")
    data = [f for f in schema.fields if f.name not in partition_by]
    parts = [schema[column] for column in partition_by]
    return StructType(data + parts).json()


def dictionary_columns(table: pyarrow.Table) -> list[str]:
    """The columns of ``table`` worth a dictionary: at most half of their first rows distinct
    (columns whose type ``count_distinct`` does not take keep pyarrow's dictionary)."""
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for name in sample.column_names:
        try:
            distinct = pc.count_distinct(sample[name]).as_py()
        except pyarrow.ArrowNotImplementedError:
            distinct = 0
        if distinct * 2 <= sample.num_rows:
            chosen.append(name)
    return chosen


class _ParquetTaskWriter(SinkWriter[HiveFilesCommittable]):
    """One task attempt's Parquet files, one per partition, in Hive's directory layout."""

    def __init__(self, sink: HiveSink, context: WriterContext, task_dir: str) -> None:
        self.sink = sink
        self.context = context
        self.task_dir = normalize_location(task_dir)
        self.filesystem, self.task_path = resolve(self.task_dir)
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.rows: dict[str, int] = {}
        self.pending: dict[str, list[pyarrow.Table]] = {}
        self.pending_rows: dict[str, int] = {}
        self.pending_total = 0

    def _write(self, relative: str, table: pyarrow.Table) -> None:
        """Buffer ``table`` for file ``relative``; write the largest buffer as a row group once
        the writer holds ``ROW_GROUP_ROWS``."""
        self.pending.setdefault(relative, []).append(table)
        self.pending_rows[relative] = self.pending_rows.get(relative, 0) + table.num_rows
        self.rows[relative] = self.rows.get(relative, 0) + table.num_rows
        self.pending_total += table.num_rows
        if self.pending_total >= ROW_GROUP_ROWS:
            self._flush(max(self.pending_rows, key=self.pending_rows.__getitem__))

    def _flush(self, relative: str) -> None:
        table = pyarrow.concat_tables(self.pending.pop(relative))
        self.pending_total -= self.pending_rows.pop(relative)
        writer = self.writers.get(relative)
        if writer is None:
            path = f"{self.task_path}/{relative}"
            self.filesystem.create_dir(path.rpartition("/")[0], recursive=True)
            writer = self.writers[relative] = pq.ParquetWriter(
                path, table.schema, filesystem=self.filesystem, use_dictionary=dictionary_columns(table)
            )
        writer.write_table(table)

    def write(self, batch: pyarrow.RecordBatch) -> None:
        columns = self.sink.partition_by
        table = pyarrow.Table.from_batches([batch])
        if not columns:
            self._write("part-00000.parquet", table)
            return
        keys = table.select(columns).group_by(columns).aggregate([]).to_pylist()
        for key in keys:
            mask = None
            for column in columns:
                value = key[column]
                test = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
                mask = test if mask is None else pc.and_(mask, test)
            values = [HIVE_DEFAULT_PARTITION if key[c] is None else str(key[c]) for c in columns]
            relative = f"{partition_path(columns, values)}/part-00000.parquet"
            self._write(relative, table.filter(mask).drop(columns))

    def prepare_commit(self, flush: bool) -> list[HiveFilesCommittable]:
        self.close()
        paths = [f"{self.task_path}/{relative}" for relative in sorted(self.rows)]
        sizes = self.filesystem.get_file_info(paths)
        files = [
            DataFile(relative, rows, info.size or 0)
            for (relative, rows), info in zip(sorted(self.rows.items()), sizes, strict=True)
        ]
        return [self.sink._committable(self.context, self.task_dir, files)]

    def close(self) -> None:
        for relative in list(self.pending):
            self._flush(relative)
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()


class _ReadyCommitter(Committer[HiveFilesCommittable]):
    """Moves committed task attempts' files into ``ready/`` (a file already there is skipped)."""

    def commit(self, committables: list[HiveFilesCommittable]) -> list[HiveFilesCommittable]:
        for committable in committables:
            if committable.source is None or committable.logged:
                continue
            ready = join(committable.staging, READY_DIR)
            for item in committable.files:
                target = join(ready, _task_relative(committable, item.path))
                move_file_once(join(committable.source, item.path), target)
        return []


def _task_relative(committable: HiveFilesCommittable, relative: str) -> str:
    """The file's name in ``ready/``: unique across the write's task attempts."""
    directory, _, name = relative.rpartition("/")
    source = (committable.source or "").rstrip("/").rpartition("/")[2]
    return "/".join(part for part in (directory, f"{source}-{name}") if part)


class _HiveGlobalCommitter(GlobalCommitter[HiveFilesCommittable, HiveWriteCommittable]):
    def __init__(self, sink: HiveSink) -> None:
        self.sink = sink

    def combine(self, committables: list[HiveFilesCommittable]) -> HiveWriteCommittable:
        if not committables:
            raise ValueError(f"sink {self.sink.name}: a write needs at least one committable")
        first = committables[0]
        files = tuple(
            DataFile(item.path if c.source is None else _task_relative(c, item.path), item.rows, item.bytes)
            for c in committables
            for item in c.files
        )
        return HiveWriteCommittable(
            first.write_id, first.query_id, first.batch_id, first.streaming, first.mode, first.schema_json,
            first.staging, files, first.source if first.logged else None,
            # Audited writes are Spark's writer's: one committable holds the results.
            tuple(result for c in committables for result in c.audits),
            sum(c.dropped_rows for c in committables),
        )

    def _staged(self, write: HiveWriteCommittable) -> HiveSinkCommit:
        self.sink._root = normalize_location(write.staging).rsplit(f"/{STAGING_DIR}/", 1)[0]
        return self.sink.commit_table(
            write.write_id, write.query_id, write.batch_id, write.streaming, write.mode, write.stream_source
        )

    def filter_recovered_committables(
        self, global_committables: list[HiveWriteCommittable]
    ) -> list[HiveWriteCommittable]:
        return filter_recovered(self.sink.settings, global_committables, self._records, self._sweep_runs)

    def _records(self, write: HiveWriteCommittable) -> bool:
        """Whether the table records this micro-batch (the batch parameter of its query)."""
        staged = self._staged(write)
        with staged._client() as client:
            return staged.recorded(client.get_table(self.sink.table.database, self.sink.table.table))

    def _sweep_runs(self, write: HiveWriteCommittable) -> None:
        """Delete earlier runs' staging of this micro-batch that no open journal record owns (a
        crash before their commit began). Here, not in the commit's ``after_commit`` as the
        PostgreSQL sink's table drop: finding them lists the table's whole ``_staging`` directory,
        which only a replay needs (``filter_recovered`` calls this only for a possible replay)."""
        journal = self.sink.settings.journal
        parent = normalize_location(write.staging).rsplit("/", 1)[0]
        prefix = batch_prefix(write.query_id, write.batch_id)
        for entry in list_dir(parent):
            if entry.name.startswith(prefix) and entry.name != write.write_id:
                record = journal.get(entry.name)
                if record is None or record.state.ended:
                    delete_dir(entry.location)

    def commit(self, global_committables: list[HiveWriteCommittable]) -> list[HiveWriteCommittable]:
        for write in global_committables:
            staged = self._staged(write)
            commit_once(self.sink.settings, write, staged, lambda write=write: self.manifest_of(write))
        return []

    def manifest_of(self, write: HiveWriteCommittable) -> Manifest:
        """The write's manifest, once its attempt began (an overwrite's files become its version)."""
        staged = self._staged(write)
        if write.stream_source is not None:
            write = _take_logged(write, write.stream_source)
        if isinstance(staged, HiveOverwriteStagedTable):
            staged.promote()
        return _manifest(write, staged.location, self.sink.partition_by)

    def abort(self, global_committables: list[HiveWriteCommittable]) -> None:
        for write in global_committables:
            staged = self._staged(write)
            record = staged.journal.get(staged.attempt_id)
            if record is not None and is_quarantined(record):
                continue  # failed its audits: kept for inspection, ended by `staged publish` or the sweep
            abort_once(staged, "the write failed or was already committed")
            delete_dir(write.staging)


def _take_logged(write: HiveWriteCommittable, stream_source: str) -> HiveWriteCommittable:
    """Move a logged micro-batch's files from ``stream_source`` into ``ready/`` (its attempt has
    begun: an abort moves them back) and count their rows there."""
    ready = join(write.staging, READY_DIR)
    prefix = stream_source.rstrip("/").rpartition("/")[2] + "-"
    counted, missing = [], []
    for item in write.files:
        directory, _, name = item.path.rpartition("/")
        target = join(ready, item.path)
        source = "/".join(part for part in (stream_source, directory, name.removeprefix(prefix)) if part)
        move_file_once(source, target)
        remove_if_present(hadoop_checksum(source))  # of the file's old name: nothing reads it
        if not exists(target):
            missing.append(source)
            continue
        with open_input_file(target) as handle:
            counted.append(dataclasses.replace(item, rows=pq.ParquetFile(handle).metadata.num_rows))
    if missing:
        raise StagingError(f"micro-batch {write.batch_id} of {write.write_id} lists file(s) that are gone: "
                           f"{', '.join(missing[:3])}")
    return dataclasses.replace(write, files=tuple(counted))


def _manifest(write: HiveWriteCommittable, location: str, partition_by: list[str]) -> Manifest:
    from pyspark.sql.types import StructType

    from airflow_provider_staged.engine.spark_job import hive_columns

    return Manifest(
        location=location,
        schema_json=write.schema_json,
        columns=hive_columns(StructType.fromJson(json.loads(write.schema_json))),
        partition_columns=partition_by,
        files=list(write.files),
        audits=list(write.audits),
        dropped_rows=write.dropped_rows,
    )
