"""Shards of the definitions folder: which DAG file builds which table (pure logic)."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from airflow_provider_staged.materialized.workflow.shards import (
    MAX_SHARDS,
    Shard,
    ShardError,
    install_shard_files,
    shard_index,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier


def test_a_shard_file_name_round_trips_and_other_names_build_everything() -> None:
    assert Shard(2, 16).file_name == "materialized_tables_shard_03_of_16.py"
    assert Shard(0, 4).file_name == "materialized_tables_shard_1_of_4.py"
    for shard in Shard.all_of(12):
        assert Shard.of_dag_file(f"/dags/{shard.file_name}") == shard
    assert Shard.of_dag_file("/dags/materialized_tables.py") == Shard(0, 1)
    assert Shard.of_dag_file("materialized_tables_shard_x_of_4.py") == Shard(0, 1)


@pytest.mark.parametrize("name", ["materialized_tables_shard_5_of_4.py",
                                  "materialized_tables_shard_0_of_4.py",
                                  "materialized_tables_shard_1_of_999.py"])
def test_a_shard_file_name_out_of_range_is_refused(name: str) -> None:
    with pytest.raises(ShardError, match=r"invalid shard"):
        Shard.of_dag_file(name)


@pytest.mark.parametrize("count", [0, 1, -3, MAX_SHARDS + 1, True, "4"])
def test_a_bad_shard_count_is_refused_naming_it(count: object) -> None:
    with pytest.raises(ShardError, match=rf"invalid shard count {count!r}"):
        Shard.all_of(count)  # type: ignore[arg-type]


def test_the_shard_is_a_stable_hash_of_the_table_name_not_of_the_file() -> None:
    table = TableIdentifier.parse("Sales.Orders_Daily")
    index = zlib.crc32(b"sales.orders_daily") % 7
    assert shard_index(table.name, 7) == index
    assert Shard(index, 7).holds(table, Path("anything.sql"))
    assert Shard(index, 7).holds(TableIdentifier.parse("sales.orders_daily"), Path("other.sql"))
    # A file whose table cannot be read goes by its file name.
    broken = Path("broken.sql")
    assert [shard.holds(None, broken) for shard in Shard.all_of(7)].count(True) == 1
    counts = [0] * 8
    for i in range(4000):
        counts[shard_index(f"db.t{i}", 8)] += 1
    assert min(counts) > 400  # spread, not clumped


def test_installing_shards_replaces_those_of_another_count(tmp_path: Path) -> None:
    first = install_shard_files(tmp_path, 3)
    assert [path.name for path in sorted(tmp_path.iterdir())] == [path.name for path in first]
    (tmp_path / "other_dag.py").write_text("# not ours")
    second = install_shard_files(tmp_path, 2)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [path.name for path in second] + ["other_dag.py"])
    assert "Shard.of_dag_file(__file__)" in second[0].read_text()
    with pytest.raises(ShardError, match=r"DAGs folder .*missing does not exist"):
        install_shard_files(tmp_path / "missing", 2)


def test_staged_mt_shards_writes_the_files_and_says_what_to_set(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from airflow_provider_staged.cli.main import app

    result = CliRunner().invoke(app, ["mt", "shards", "4", "--dags-folder", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == [shard.file_name for shard in Shard.all_of(4)]
    assert "wrote 4 shard files" in result.output and "min_file_process_interval" in result.output
