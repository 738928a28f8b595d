"""The hook that owns a staged-table catalog connection: metastore, warehouse, journal."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook
from psycopg.conninfo import conninfo_to_dict

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.discovery.embedded import metastore_status, staged_home
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import configure_s3, probe_writable
from airflow_provider_staged.storage.s3 import S3Options

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0: the Task SDK's masker
    from airflow.sdk.execution_time.secrets_masker import mask_secret

# The connection test answers a person waiting in the UI: a silent host fails within this.
TEST_TIMEOUT_MS = 10_000

log = logging.getLogger(__name__)
# Connections already warned about a file journal beside a shared warehouse (once per process).
_WARNED: set[str] = set()


class StagedTableHook(BaseHook):
    """Resolve :class:`StagedSettings` from a ``staged_hive`` connection.

    Without a connection named :attr:`default_conn_name`, the embedded default is used: the
    local metastore started by ``staged services up`` under ``STAGED_HOME``. Any other id must
    name a connection: a typo would otherwise build into the local catalog without a word.
    The connection form's fields are declared in ``get_provider_info.py``.
    """

    conn_name_attr = "staged_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "staged_hive"
    hook_name = "Staged tables (Hive Metastore)"

    def __init__(self, staged_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.staged_conn_id = staged_conn_id

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
        settings = StagedSettings.from_fields(conn.host, conn.port, conn.extra, staged_home())
        if settings.aws_conn_id:
            # This process's storage layer and Spark reach the warehouse's bucket with its keys.
            bucket = urlsplit(settings.warehouse).netloc
            configure_s3(s3_options_of(self.get_connection(settings.aws_conn_id)), bucket or None)
        if settings.journal_url:  # the extra is no secret field: keep the URL's password out of task logs
            password = conninfo_to_dict(settings.journal_url).get("password")
            if password:
                mask_secret(password)
        warn_if_journal_is_local(self.staged_conn_id, settings)
        return settings

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's connection test: the metastore answers, the warehouse and journal take files.

        Run where Airflow runs it (the api-server): the locations are checked as this process
        reaches them.
        """
        try:
            settings = self.get_settings()
        except (ValueError, RuntimeError) as err:
            return False, str(err)
        uri = settings.metastore_uri
        try:
            with MetastoreClient(uri, timeout_ms=TEST_TIMEOUT_MS) as client:
                databases = client.thrift.get_all_databases()
        except StagingError as err:  # "cannot reach the Hive Metastore at <uri>: ..."
            return False, str(err)
        except Exception as err:  # reached, but no metastore answer (another server, a timeout)
            return False, f"no Hive Metastore answer from {uri}: {type(err).__name__}: {err}"
        for what, location in (
            ("warehouse", settings.warehouse),
            ("journal directory", settings.journal_dir),
        ):
            try:
                probe_writable(location)
            except (OSError, ValueError) as err:  # pyarrow: OSError, or ValueError for a bad URI
                return False, f"{what} {location} is not writable from this Airflow process: {err}"
        return True, (
            f"Hive Metastore at {uri} answered (databases: {len(databases)}); "
            f"warehouse {settings.warehouse} and journal directory {settings.journal_dir} writable"
        )


def s3_options_of(connection: Any) -> S3Options:
    """S3 options from an Airflow ``aws`` connection, read as the Amazon provider reads it: the
    keys in login and password, ``endpoint_url``, ``region_name``, ``aws_session_token`` and
    ``config_kwargs.s3.addressing_style`` in its extra."""
    extra = connection.extra_dejson
    endpoint = extra.get("endpoint_url") or None
    style = ((extra.get("config_kwargs") or {}).get("s3") or {}).get("addressing_style")
    return S3Options(
        endpoint=endpoint,
        region=extra.get("region_name") or None,
        path_style=style == "path" if style else endpoint is not None,
        access_key=connection.login or None,
        secret_key=connection.password or None,
        session_token=extra.get("aws_session_token") or None,
    )


def warn_if_journal_is_local(conn_id: str, settings: StagedSettings) -> None:
    """Say once that a warehouse other hosts write into is journaled on this host's disk only:
    there, each worker's sweep sees only its own attempts (docs/DESIGN.md, "The shared journal")."""
    if settings.journal_url or urlsplit(settings.warehouse).scheme in ("", "file") or conn_id in _WARNED:
        return
    _WARNED.add(conn_id)
    log.warning(
        "connection %s: warehouse %s is shared, but the attempt journal is a directory on this host "
        "(%s): workers on other hosts do not see its attempts, and their sweeps may delete this "
        'host\'s versions. Set the connection extra "journal" to a postgresql:// URL that every '
        "worker reaches.",
        conn_id,
        settings.warehouse,
        settings.journal_dir,
    )


def embedded_settings(conn_id: str = StagedTableHook.default_conn_name) -> StagedSettings:
    """Settings of the local services under ``STAGED_HOME`` (the embedded default)."""
    info = metastore_status()
    if info is None:
        raise RuntimeError(
            f"no connection {conn_id!r} and no local metastore under {staged_home()}: "
            "run `staged up` (or `staged services up`) or define the connection"
        )
    return StagedSettings.from_fields(info.host, info.port, {"warehouse": info.warehouse}, staged_home())
