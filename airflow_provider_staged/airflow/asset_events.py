"""The asset event of a commit made outside an Airflow task: ``staged publish`` of a quarantined
version. A task's commit emits its table's event through the task's outlets; a person publishing
a version from the CLI tells Airflow through its REST API (``POST /api/v2/assets/events``), so
that the DAGs scheduled on the table (a ``FRESHNESS = DOWNSTREAM`` table, any asset-aware DAG)
learn of the data they did not get when the audits held it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import urllib3
from airflow_client.client import ApiClient, Configuration
from airflow_client.client.api.asset_api import AssetApi
from airflow_client.client.exceptions import ApiException
from airflow_client.client.models.create_asset_events_body import CreateAssetEventsBody

from airflow_provider_staged.airflow.assets import table_asset_uri
from airflow_provider_staged.airflow.operators.targets import is_jdbc
from airflow_provider_staged.materialized.propagation import MAX_KEY_LENGTH, partition_key
from airflow_provider_staged.materialized.workflow.airflow_scheduler import asset_id, fetch_token
from airflow_provider_staged.staging.errors import ServiceError
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord


def target_asset_uri(target: str, metastore_uri: str) -> str:
    """The URI of the asset the staged operators emit for ``target`` (``operators.targets``)."""
    if is_jdbc(target):
        return target
    return table_asset_uri(metastore_uri, TableIdentifier.parse(target))


def event_key(spec: Mapping[str, str]) -> str | None:
    """The partition key of a commit of ``spec`` (as a refresh keys it), None for a whole table."""
    if not spec:
        return None
    key = partition_key(list(spec), spec)
    return key if len(key) <= MAX_KEY_LENGTH else None


def announce_publish(
    record: AttemptRecord, metastore_uri: str, endpoint: str, username: str | None, password: str | None
) -> str:
    """Create the asset event of the published ``record`` in the Airflow at ``endpoint``; a line
    saying what was done. ServiceError (naming the endpoint, never the password) on failure."""
    uri = target_asset_uri(record.target, metastore_uri)
    key = event_key(record.partition_spec)
    extra: dict[str, Any] = {"attempt_id": record.attempt_id, "published_anyway": True}
    try:
        token = fetch_token(endpoint, username, password)
        with ApiClient(Configuration(host=endpoint, access_token=token)) as client:
            api = AssetApi(client)
            found = asset_id(api, uri)
            if found is None:
                return f"no DAG in Airflow at {endpoint} uses asset {uri}: no asset event needed"
            body = CreateAssetEventsBody(asset_id=found, extra=extra, partition_key=key)
            event = api.create_asset_event(body)
    except (ApiException, PermissionError, httpx.HTTPError, urllib3.exceptions.HTTPError) as err:
        reason = f"HTTP {err.status}" if isinstance(err, ApiException) else str(err)
        raise ServiceError(f"published attempt {record.attempt_id} of {record.target}, but Airflow at "
                           f"{endpoint} did not take its asset event ({reason}): DAGs scheduled on {uri} "
                           "do not know; create the event in Airflow (Assets page)") from None
    keyed = f" (partition key {key})" if key else ""
    return f"asset event {event.id} of {uri}{keyed} created in Airflow at {endpoint}"
