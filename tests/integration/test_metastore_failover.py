"""Several URIs of one metastore (Hive's ``hive.metastore.uris``): tried in order, the first
that answers serves, and a build commits through it."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.local.processes import free_port
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.staging.settings import StagedSettings
from tests.fixtures.metastore import new_database
from tests.integration.staged_helpers import build, expected_snapshot, snapshot

SQL = "SELECT id, concat('v-', id) AS label FROM range(100)"


def test_the_first_server_that_answers_serves(metastore):
    dead = f"thrift://127.0.0.1:{free_port()}"
    with MetastoreClient(f"{dead},{metastore.uri}", timeout_ms=2000) as client:
        assert "default" in client.thrift.get_all_databases()
    other_dead = f"thrift://127.0.0.1:{free_port()}"
    with pytest.raises(StagingError, match="cannot reach the Hive Metastore at") as error:
        MetastoreClient(f"{dead},{other_dead}", timeout_ms=2000).__enter__()
    assert dead in str(error.value) and other_dead in str(error.value)
    with pytest.raises(ValueError, match="invalid metastore URI 'thrift://nohost'"):
        MetastoreClient(f"{metastore.uri},thrift://nohost")


def test_connection_hosts_become_uris_tried_in_order(metastore, tmp_path):
    settings = StagedSettings.from_fields(f"10.255.255.1, {metastore.host}", metastore.port, {}, tmp_path)
    assert settings.metastore_uri == f"thrift://10.255.255.1:{metastore.port},{metastore.uri}"
    with pytest.raises(ValueError, match="metastore host\\(s\\) and port, got 'a,,b'"):
        StagedSettings.from_fields("a,,b", 9083, {}, tmp_path)


def test_a_build_commits_through_the_server_that_answers(spark, metastore, tmp_path):
    database = new_database(metastore, "failover")
    target = TableIdentifier(database, f"t_{uuid.uuid4().hex[:8]}")
    uris = f"thrift://127.0.0.1:{free_port()},{metastore.uri}"
    staged = HiveStagedTable(target, StagingPurpose.CREATE_TABLE_AS, FileJournal(tmp_path / "journal"), uris)
    build(spark, staged, SQL)
    assert snapshot(spark, target.name) == expected_snapshot(spark, SQL)
