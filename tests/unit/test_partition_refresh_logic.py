import re
from pathlib import Path

import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.materialized.params import RefreshRequestError, execution_conf, writer_options
from airflow_provider_staged.materialized.refresh import partition_query, string_literal
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.manifest import DataFile, Manifest
from airflow_provider_staged.staging.partition_paths import (
    escape_path_name,
    matches,
    partition_path,
    partition_values,
)


def test_partition_path_escapes_like_spark():
    assert partition_path(["ds", "hh"], ["2024-01-01", "10:00"]) == "ds=2024-01-01/hh=10%3A00"
    assert escape_path_name("a/b=c%") == "a%2Fb%3Dc%25"


def test_partition_values_round_trip():
    path = partition_path(["ds", "hh"], ["2024-01-01", "10:00"]) + "/part-0.parquet"
    assert partition_values(path, ["ds", "hh"]) == ("2024-01-01", "10:00")
    assert partition_values("part-0.parquet", ["ds"]) is None
    assert partition_values("other=1/part-0.parquet", ["ds"]) is None


def test_matches_prefix_and_full_specs():
    assert matches(("2024-01-01", "10"), ["ds", "hh"], {"ds": "2024-01-01"})
    assert not matches(("2024-01-02", "10"), ["ds", "hh"], {"ds": "2024-01-01"})
    assert matches(("2024-01-02", "10"), ["ds", "hh"], {})


def test_partition_query_quotes_names_and_values():
    sql = partition_query("SELECT ds, x FROM t", {"ds": "2024-01-01"})
    assert sql.endswith("WHERE `ds` = '2024-01-01'")
    assert partition_query("SELECT 1", {}) == "SELECT 1"
    assert string_literal("a'b\\c") == "'a\\'b\\\\c'"
    with pytest.raises(InvalidIdentifierError):
        partition_query("SELECT 1", {"ds`; drop": "x"})


def test_flink_manually_refresh_statement():
    """DefaultMaterializedTableExecutorTest.testGetManuallyRefreshStatement (Flink's
    MaterializedTableManagerTest before 2.x): the whole query without partitions, else the
    query filtered by each partition value. Flink writes ``INSERT OVERWRITE t SELECT * FROM
    (query) WHERE k1 = 'v1' AND k2 = 'v2'``; here the staged table writes, the names are quoted,
    and the query stands on its own lines so a trailing ``--`` comment cannot swallow the ``)``
    (Flink's one-line form would)."""
    query = "SELECT * FROM my_source_table"
    assert partition_query(query, {}) == query
    assert partition_query(query, {"k1": "v1", "k2": "v2"}) == (
        "SELECT * FROM (\nSELECT * FROM my_source_table\n) AS _materialized_source "
        "WHERE `k1` = 'v1' AND `k2` = 'v2'"
    )
    commented = partition_query(query + " -- the source", {"k1": "v1"})
    assert commented.splitlines()[1:] == [
        query + " -- the source", ") AS _materialized_source WHERE `k1` = 'v1'"]


def test_writer_options_allowlist():
    assert writer_options({"compression": "zstd"}) == {"compression": "zstd"}
    with pytest.raises(RefreshRequestError, match="path"):
        writer_options({"path": "/tmp/elsewhere"})


@pytest.mark.parametrize(
    "key",
    [
        "spark.executor.memory",
        "spark.sql.warehouse.dir",
        "spark.sql.catalog.x",
        "spark.sql.a b",
        "spark.sql.extensions",
        "spark.sql.sources.commitProtocolClass",
        "spark.sql.defaultCatalog",
    ],
)
def test_execution_conf_rejects_keys_outside_the_allowlist(key):
    with pytest.raises(RefreshRequestError, match=f"executionConfig key '{key}' is not allowed"):
        execution_conf({key: "1"})


def test_execution_conf_accepts_sql_settings():
    assert execution_conf({"spark.sql.shuffle.partitions": "8"}) == {"spark.sql.shuffle.partitions": "8"}


class _PatternMatchingThrift:
    """``get_partitions_ps`` as Hive 2.3 answers it: the escaped name matched as a regular
    expression (measured: a spec of 'a.b' also returned 'axb', 'a(b' and 'a_b')."""

    def __init__(self, values: list[str]) -> None:
        self.values = values

    def get_partitions_ps(self, db: str, table: str, spec: list[str], limit: int) -> list[ttypes.Partition]:
        pattern = re.compile(escape_path_name(spec[0]))
        names = {value: escape_path_name(value) for value in self.values}
        return [ttypes.Partition(values=[v, "z"]) for v, name in names.items() if pattern.fullmatch(name)]


def test_partitions_matching_keeps_only_the_spec_the_metastore_pattern_matched() -> None:
    client = MetastoreClient("thrift://127.0.0.1:9083")
    client._client = _PatternMatchingThrift(["a.b", "axb", "a_b"])  # type: ignore[assignment]
    found = client.partitions_matching("db", "t", ["k", "j"], {"k": "a.b"})
    assert [part.values for part in found] == [["a.b", "z"]]


def test_partition_query_quotes_values_the_data_produces():
    """A quote, backslash or newline from the data stays data in the refresh's filter."""
    sql = partition_query("SELECT k FROM t", {"k": "it's\\\n; --"})
    assert sql.endswith("WHERE `k` = 'it\\'s\\\\\n; --'")
    assert partition_path(["k"], ["it's\n"]) == "k=it%27s%0A"


def test_a_partition_the_metastore_cannot_store_is_refused_before_the_catalog_changes(tmp_path: Path) -> None:
    """A value the query produced (no request named it) over 255 bytes, or whose escaped name
    overflows PART_NAME, is named by the commit before any partition is registered."""
    staged = HivePartitionStagedTable(TableIdentifier("db", "t"), ["region"], {}, FileJournal(tmp_path),
                                      "thrift://127.0.0.1:9083")

    def written(value: str) -> Manifest:
        return Manifest("/w/_v=a1", files=[DataFile(partition_path(["region"], [value]) + "/part-0", 1, 1)])

    assert staged._targets(written("it's"), []) == {("it's",)}
    assert staged._written(written("'" * 255)) == {("'" * 255,)}  # an abort still reads it
    with pytest.raises(StagingError, match=r"refresh of db\.t cannot commit: value 'éé.* of partition column "
                       r"'region' is 256 bytes long, the metastore stores at most 255"):
        staged._targets(written("é" * 128), [])
    with pytest.raises(StagingError, match=r"refresh of db\.t cannot commit: partition .* has a name of 772 "
                       r"characters escaped, the metastore stores at most 767"):
        staged._targets(written("'" * 255), [])
