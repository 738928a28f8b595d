"""The hook that owns a staged-table catalog connection: metastore, warehouse, journal."""

from __future__ import annotations

from typing import Any

from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.discovery.embedded import metastore_status, staged_home
from airflow_provider_staged.staging.settings import StagedSettings


class StagedTableHook(BaseHook):
    """Resolve :class:`StagedSettings` from a ``staged_hive`` connection.

    Without a connection named :attr:`default_conn_name`, the embedded default is used: the
    local metastore started by ``staged services up`` under ``STAGED_HOME``. Any other id must
    name a connection: a typo would otherwise build into the local catalog without a word.
    """

    conn_name_attr = "staged_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "staged_hive"
    hook_name = "Staged tables (Hive Metastore)"

    def __init__(self, staged_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.staged_conn_id = staged_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "password"],
            "relabeling": {"host": "Metastore host", "port": "Metastore Thrift port"},
            "placeholders": {
                "host": "127.0.0.1",
                "port": "9083",
                "extra": (
                    '{"warehouse": "file:/data/warehouse", "journal_dir": "/data/staged/journal", '
                    '"atomic": true, "keep_versions": 2, "max_version_age_hours": 168, '
                    '"version_grace_minutes": 60, '
                    '"attempt_ttl_minutes": 60, "spark_conf": {}}'
                ),
            },
        }

    def get_settings(self) -> StagedSettings:
        try:
            conn = self.get_connection(self.staged_conn_id)
        except AirflowNotFoundException:
            if self.staged_conn_id != self.default_conn_name:
                raise RuntimeError(
                    f"no Airflow connection {self.staged_conn_id!r} (conn type {self.conn_type}): "
                    f"define it, or use {self.default_conn_name!r}, which falls back to the local "
                    "metastore when it is not defined"
                ) from None
            return embedded_settings(self.staged_conn_id)
        return StagedSettings.from_fields(conn.host, conn.port, conn.extra, staged_home())


def embedded_settings(conn_id: str = StagedTableHook.default_conn_name) -> StagedSettings:
    """Settings of the local services under ``STAGED_HOME`` (the embedded default)."""
    info = metastore_status()
    if info is None:
        raise RuntimeError(
            f"no connection {conn_id!r} and no local metastore under {staged_home()}: "
            "run `staged up` (or `staged services up`) or define the connection"
        )
    return StagedSettings.from_fields(info.host, info.port, {"warehouse": info.warehouse}, staged_home())
