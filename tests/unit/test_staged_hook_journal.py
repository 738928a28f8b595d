"""The staged connection's journal as the Airflow hook resolves it (a real Airflow connection
from ``AIRFLOW_CONN_<ID>``, as a deployment defines it)."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_provider_staged.airflow.hooks import staged_table
from airflow_provider_staged.staging.journal_postgres import PostgresJournal


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, str]) -> None:
    conn = {"conn_type": "staged_hive", "host": "127.0.0.1", "port": 9083, "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_a_shared_warehouse_with_a_file_journal_is_warned_about_once(monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("STAGED_HOME", str(tmp_path))
    _connection(monkeypatch, "s3_files", {"warehouse": "s3a://bucket/warehouse"})
    _connection(
        monkeypatch,
        "s3_shared",
        {"warehouse": "s3a://bucket/warehouse", "journal": "postgresql://staged:pw@db:5432/airflow"},
    )
    _connection(monkeypatch, "local_files", {"warehouse": f"file:{tmp_path}/warehouse"})
    with caplog.at_level(logging.WARNING, logger=staged_table.__name__):
        for conn_id in ("s3_files", "s3_files", "s3_shared", "local_files"):
            staged_table.StagedTableHook(conn_id).get_settings()
    warnings = [r.getMessage() for r in caplog.records if r.name == staged_table.__name__]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("connection s3_files: warehouse s3a://bucket/warehouse is shared")
    assert str(tmp_path / "journal") in warnings[0] and '"journal"' in warnings[0]
    shared = staged_table.StagedTableHook("s3_shared").get_settings().journal
    assert isinstance(shared, PostgresJournal) and "pw" not in str(shared)
