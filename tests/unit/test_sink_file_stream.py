"""The file sink's log as the logged stream path reads it: batches, their files, pruning, sweeping."""

from __future__ import annotations

import json

import pytest

from airflow_provider_staged.sink import file_stream
from airflow_provider_staged.sink.file_stream import (
    LOG_DIR,
    _prune_log,
    logged_batches,
    logged_files,
    sweep_staging,
)


def _log(staging, batch_id: int, *paths: str, sizes: int = 7) -> None:
    directory = staging / LOG_DIR
    directory.mkdir(parents=True, exist_ok=True)
    entries = [{"path": (staging / p).as_uri(), "size": sizes, "isDir": False, "modificationTime": 1,
                "blockReplication": 1, "blockSize": 1, "action": "add"} for p in paths]
    (directory / str(batch_id)).write_text("\n".join(["v1", *map(json.dumps, entries)]))
    (directory / f".{batch_id}.crc").write_text("crc")


def test_each_batch_lists_its_own_files_relative_to_the_staging_directory(tmp_path):
    _log(tmp_path, 0, "p=0/part-a.parquet", "p=1/part-b.parquet")
    _log(tmp_path, 1)  # a micro-batch that wrote no rows
    _log(tmp_path, 10, "part-c.parquet", sizes=42)
    assert logged_batches(tmp_path) == [0, 1, 10]  # numerically ordered, crc files ignored
    assert [(f.path, f.bytes) for f in logged_files(str(tmp_path), 0)] == [
        ("p=0/part-a.parquet", 7), ("p=1/part-b.parquet", 7)]
    assert logged_files(str(tmp_path), 1) == []
    assert [(f.path, f.bytes) for f in logged_files(str(tmp_path), 10)] == [("part-c.parquet", 42)]


def test_paths_are_read_as_the_uris_spark_logs(tmp_path):
    staging = tmp_path / "a dir%"  # Spark logs it percent-encoded: file:///…/a%20dir%25/…
    _log(staging, 0, "p=x y/part-0.parquet")
    assert "%20" in (staging / LOG_DIR / "0").read_text()
    assert [f.path for f in logged_files(str(staging), 0)] == ["p=x y/part-0.parquet"]


def test_no_log_is_no_batch_and_a_compacted_log_is_refused_by_name(tmp_path):
    assert logged_batches(tmp_path) == []
    _log(tmp_path, 8)
    (tmp_path / LOG_DIR / "9.compact").write_text("v1\n")
    with pytest.raises(RuntimeError, match=r"9\.compact.*compactInterval"):
        logged_batches(tmp_path)


def test_pruning_keeps_the_last_batches_and_sweeping_keeps_only_the_log(tmp_path, monkeypatch):
    monkeypatch.setattr(file_stream, "KEEP_LOGGED_BATCHES", 2)
    for batch_id in range(5):
        _log(tmp_path, batch_id)
    _prune_log(str(tmp_path), logged_batches(tmp_path), 4)
    assert logged_batches(tmp_path) == [3, 4]
    assert sorted(p.name for p in (tmp_path / LOG_DIR).iterdir()) == [".3.crc", ".4.crc", "3", "4"]
    (tmp_path / "p=0").mkdir()
    (tmp_path / "p=0" / "part-orphan.parquet").write_text("x")
    (tmp_path / "part-orphan.parquet").write_text("x")
    sweep_staging(str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [LOG_DIR]
    assert logged_batches(tmp_path) == [3, 4]
