"""Fixtures of the unit tests (no services)."""

from __future__ import annotations

import json

import pytest

# The metastore a unit test's staged_default connection names: never contacted, it names assets.
METASTORE_URI = "thrift://metastore.example:9083"


@pytest.fixture
def staged_default_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    """``staged_default`` defined (by ``AIRFLOW_CONN_STAGED_DEFAULT``): what a DAG file needs when
    parsed, since a table's asset is named after the connection's metastore. Returns its URI."""
    connection = {"conn_type": "staged_hive", "host": "metastore.example", "port": 9083}
    monkeypatch.setenv("AIRFLOW_CONN_STAGED_DEFAULT", json.dumps(connection))
    return METASTORE_URI
