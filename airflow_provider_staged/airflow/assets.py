"""The Airflow Asset that stands for a table (pure naming; Airflow imported by callers)."""

from __future__ import annotations

from airflow_provider_staged.staging.identifiers import TableIdentifier

# The staged_hive connection used when none is named (kept here: this module imports nothing heavy).
DEFAULT_CONN_ID = "staged_default"


def table_asset_uri(identifier: TableIdentifier, conn_id: str) -> str:
    """``hive://<staged connection id>/<database>/<table>``: one asset per catalog table."""
    return f"hive://{conn_id}/{identifier.database}/{identifier.table}"
