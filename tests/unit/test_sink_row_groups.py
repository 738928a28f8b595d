"""The Python task writer of the Hive sink buffers Spark's small Arrow batches into row groups."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_staged.sink import hive
from airflow_provider_staged.sink.hive import HiveSink, _ParquetTaskWriter
from airflow_provider_staged.staging.settings import StagedSettings


def _writer(tmp_path: Path, partition_by: list[str]) -> _ParquetTaskWriter:
    settings = StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "wh"), str(tmp_path / "journal"))
    sink = HiveSink("db.t", settings, partition_by=partition_by, native=False)
    return _ParquetTaskWriter(sink, None, str(tmp_path / "task"))  # type: ignore[arg-type]


def test_batches_become_row_groups_of_the_bound_across_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hive, "ROW_GROUP_ROWS", 10)
    writer = _writer(tmp_path, ["k"])
    for start in range(0, 40, 4):  # ten batches of 4 rows, half in each partition
        ids = list(range(start, start + 4))
        writer.write(pa.record_batch({"id": ids, "k": [i % 2 for i in ids]}))
    writer.close()

    for k in (0, 1):
        path = tmp_path / "task" / f"k={k}" / "part-00000.parquet"
        file = pq.ParquetFile(path)
        assert file.read().column("id").to_pylist() == [i for i in range(40) if i % 2 == k]
        # 20 rows per partition: never more than the bound (10) buffered over both partitions.
        sizes = [file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)]
        assert sum(sizes) == 20 and max(sizes) <= 10 and len(sizes) < 10, sizes
    assert writer.rows == {"k=0/part-00000.parquet": 20, "k=1/part-00000.parquet": 20}


def test_only_columns_whose_first_rows_repeat_are_dictionary_encoded(tmp_path: Path) -> None:
    ids = list(range(2000))
    table = pa.table({
        "id": ids,  # unique
        "k": [i % 7 for i in ids],  # repeats
        "s": [f"v{i}" for i in ids],  # unique strings
        "nothing": pa.nulls(2000),  # a type count_distinct does not take: pyarrow's default
    })
    assert hive.dictionary_columns(table) == ["k", "nothing"]
    assert hive.dictionary_columns(table.slice(0, 0)) == ["id", "k", "s", "nothing"]

    writer = _writer(tmp_path, [])
    writer.write(table.to_batches()[0])
    writer.close()
    written = pq.ParquetFile(tmp_path / "task" / "part-00000.parquet")
    assert written.read().equals(table)
    group = written.metadata.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)}
    assert "RLE_DICTIONARY" in encodings["k"] and "RLE_DICTIONARY" not in encodings["id"], encodings
    assert "RLE_DICTIONARY" not in encodings["s"], encodings
