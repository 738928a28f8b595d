"""Refuse a refresh DAG's trigger that its refresh task would refuse, before Airflow creates the run.

The Trigger form and REST clients post ``POST /api/v2/dags/{dag_id}/dagRuns``. Airflow checks the
conf against the DAG's Params only: a JSON-schema pattern cannot know that February has 28 days
(``2024-02-30`` made a run that failed in its task), and its refusal is a schema dump with the
regex. This ASGI middleware (the plugin's ``fastapi_root_middlewares``) runs the task's own check,
``check_refresh_call``, as the page and ``staged mt refresh`` do, and answers 400 with its one
line. Only users Airflow lets trigger the DAG get that answer; every other request, and a conf
that passes, goes on to Airflow untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_staged.materialized.naming import DAG_ID_PREFIX

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# After any base path the api-server is mounted under.
_TRIGGER = re.compile(rf"/api/v2/dags/({re.escape(DAG_ID_PREFIX)}[^/]+)/dagRuns/?$")


class TriggerConfCheck:
    """Checks ``POST …/dags/mt__…/dagRuns`` bodies before the app behind it sees them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _TRIGGER.search(scope.get("path", "")) if scope["type"] == "http" else None
        if found is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, replay = await _buffered(receive)
        refusal = await _refusal(scope, found.group(1), body)
        if refusal is None:
            await self.app(scope, replay, send)
            return
        from starlette.responses import JSONResponse

        await JSONResponse({"detail": refusal}, status_code=400)(scope, replay, send)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a ``receive`` that hands it on to the app unchanged."""
    chunks, messages = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return b"".join(chunks), replay


async def _refusal(scope: Scope, dag_id: str, body: bytes) -> str | None:
    """Why the refresh task would refuse this trigger; None to leave it to Airflow (not a table of
    the definitions folder, a body Airflow itself refuses, a user Airflow will refuse)."""
    try:
        conf = json.loads(body or b"{}").get("conf")
    except (ValueError, AttributeError):
        return None
    entry = _entry_of(dag_id)
    if entry is None or not await _may_trigger(scope, dag_id):
        return None
    from airflow_provider_staged.materialized.params import RefreshRequestError, check_refresh_call

    try:
        check_refresh_call(conf, entry.definition, datetime.now(timezone.utc))
    except RefreshRequestError as err:
        return f"refresh of {entry.identifier} not triggered: {err}"
    return None


def _entry_of(dag_id: str) -> Any:
    """The definition of ``dag_id`` in the folder the page and the DAG file read (cached parse)."""
    from airflow_provider_staged.airflow.ui.app import PageConfig
    from airflow_provider_staged.airflow.ui.sources import read_entries
    from airflow_provider_staged.materialized.naming import dag_id_for

    entries, _ = read_entries(PageConfig.current().definitions_dir)
    return next((entry for entry in entries if dag_id_for(entry.identifier) == dag_id), None)


async def _may_trigger(scope: Scope, dag_id: str) -> bool:
    """Whether the request's user (bearer token, else the UI's cookie) may trigger ``dag_id``."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.core_api.security import resolve_user_from_token
    from starlette.requests import Request

    from airflow_provider_staged.airflow.ui.app import user_token

    try:
        user = await resolve_user_from_token(user_token(Request(scope)))
    except Exception:  # no, expired or bad token: Airflow answers 401/403 itself
        return False
    return get_auth_manager().is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id), user=user)
