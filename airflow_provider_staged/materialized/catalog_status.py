"""Refresh status and refresh handler of a materialized table, kept with the table.

As Flink keeps them in its catalog, they are table parameters in the Hive Metastore:
``materialized.refresh-status``, ``materialized.refresh-handler`` and ``materialized.definition``.
The table only exists after its first refresh, so until then they live in a small JSON state
file beside the definition (``<stem>.workflow.json``); the first save or load that finds the
table moves them into its parameters.

A status write is a read-modify-write of the whole table object: it holds the table's
metastore lock (``metastore.locks``), as partition commits do, and its ``alter_table`` is a
compare-and-set on the table's revision, as every commit's is: a whole-table commit that lands
between its read and its write makes it read again. Neither undoes the other, across machines.

The same state file always holds the workflow's default ``dynamicOptions`` and
``executionConfig`` (set on create or resume): a refresh reads them with
:func:`workflow_options` and lets the run's conf override them key by key.

Auto-suspend (:mod:`.failure_streak`) keeps its count of consecutive failed scheduled refreshes,
the last failure and the suspend reason with the status, written by the refresh tasks under the
same lock. The state file also always holds the suspension note (``suspension``): the DAG
factory shows it in the DAG's description and must not call the metastore while parsing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.materialized.failure_streak import FailureStreak, suspension_note
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus, WorkflowException
from airflow_provider_staged.staging.conflicts import retry_on_conflict
from airflow_provider_staged.staging.identifiers import TableIdentifier

REFRESH_STATUS_KEY = "materialized.refresh-status"
REFRESH_HANDLER_KEY = "materialized.refresh-handler"
DEFINITION_KEY = "materialized.definition"
SUSPEND_REASON_KEY = "materialized.suspend-reason"
FAILURES_KEY = "materialized.consecutive-failures"
LAST_FAILURE_KEY = "materialized.last-failure"
STATE_SUFFIX = ".workflow.json"
# Hive's TABLE_PARAMS values are VARCHAR(4000) in most schemas: split longer ones, as Spark does.
_CHUNK = 4000
_TABLE_KEYS = (REFRESH_STATUS_KEY, REFRESH_HANDLER_KEY, DEFINITION_KEY, SUSPEND_REASON_KEY,
               FAILURES_KEY, LAST_FAILURE_KEY)
# State-file fields of the status while the table does not exist yet.
_FILE_FIELDS = ("refresh_status", "refresh_handler", "suspend_reason", "consecutive_failures",
                "last_failure")


@dataclass(frozen=True)
class CatalogStatus:
    """What is stored for one table, and where (``"table"``, ``"file"`` or ``"none"``)."""

    refresh_status: RefreshStatus | None
    refresh_handler: str | None
    definition: str | None
    stored_in: str
    dynamic_options: Mapping[str, str] = field(default_factory=dict)
    execution_config: Mapping[str, str] = field(default_factory=dict)
    suspend_reason: str | None = None  # e.g. SUSPENDED_DUE_TO_ERRORS; None when not suspended
    failures: FailureStreak = field(default_factory=FailureStreak)

    def status_text(self) -> str:
        """``SUSPENDED (SUSPENDED_DUE_TO_ERRORS)``, ``ACTIVATED`` or ``-``."""
        text = self.refresh_status.value if self.refresh_status else "-"
        return f"{text} ({self.suspend_reason})" if self.suspend_reason else text


def state_path(definition_path: str | Path) -> Path:
    path = Path(definition_path)
    return path.with_name(path.stem + STATE_SUFFIX)


def read_state(definition_path: str | Path) -> dict[str, Any]:
    path = state_path(definition_path)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise WorkflowException(f"unreadable workflow state file {path}: {err}") from None
    if not isinstance(state, dict):
        raise WorkflowException(f"invalid workflow state file {path}: expected a JSON object")
    return state


def write_text_atomically(path: Path, text: str) -> None:
    """Readers (the DAG processor) see the old file or the new one, never a partial one."""
    # The temp name must not match the factory's "*.sql" glob.
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _state_locked(definition_path: str | Path) -> Iterator[None]:
    """Serialize read-modify-writes of one state file (the CLI and refresh tasks write it)."""
    # A dot file: the factory only reads "*.sql".
    with open(_lock_path(definition_path), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _update_state(definition_path: str | Path, **changes: Any) -> None:
    """Set (or, for None, remove) fields of the state file; remove it once empty."""
    with _state_locked(definition_path):
        _update_state_unlocked(definition_path, **changes)


def _update_state_unlocked(definition_path: str | Path, **changes: Any) -> None:
    state = read_state(definition_path)
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    path = state_path(definition_path)
    if state:
        write_text_atomically(path, json.dumps(state, indent=2, sort_keys=True) + "\n")
    else:
        path.unlink(missing_ok=True)


def workflow_options(definition_path: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """The stored default ``(dynamicOptions, executionConfig)`` of a table's refreshes."""
    return _options_of(read_state(definition_path))


def _options_of(state: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    return dict(state.get("dynamic_options") or {}), dict(state.get("execution_config") or {})


def set_workflow_options(
    definition_path: str | Path,
    dynamic_options: Mapping[str, str] | None,
    execution_config: Mapping[str, str] | None,
) -> None:
    """Replace the stored defaults; None keeps what is stored, an empty map clears it."""
    changes = {}
    if dynamic_options is not None:
        changes["dynamic_options"] = dict(dynamic_options) or None
    if execution_config is not None:
        changes["execution_config"] = dict(execution_config) or None
    _update_state(definition_path, **changes)


def _lock_path(definition_path: str | Path) -> Path:
    path = state_path(definition_path)
    return path.with_name(f".{path.name}.lock")


def remove_state(definition_path: str | Path) -> None:
    state_path(definition_path).unlink(missing_ok=True)
    _lock_path(definition_path).unlink(missing_ok=True)


def _split(key: str, value: str) -> dict[str, str]:
    if len(value) <= _CHUNK:
        return {key: value}
    chunks = [value[i : i + _CHUNK] for i in range(0, len(value), _CHUNK)]
    return {f"{key}.numParts": str(len(chunks)), **{f"{key}.part.{i}": c for i, c in enumerate(chunks)}}


def _join(params: Mapping[str, str], key: str) -> str | None:
    if key in params:
        return params[key]
    parts = params.get(f"{key}.numParts")
    if parts is None:
        return None
    return "".join(params[f"{key}.part.{i}"] for i in range(int(parts)))


def _read_definition(definition_path: str | Path) -> str | None:
    try:
        return Path(definition_path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def status_from(
    params: Mapping[str, str] | None, state: Mapping[str, Any], definition_path: str | Path
) -> CatalogStatus:
    """The status held by the table's ``params`` (None: no table), else by the state file.

    Reads no catalog: a caller that fetched many tables at once (the UI page) passes their
    parameters; unlike :meth:`CatalogStatusStore.load` nothing is moved into the table.
    """
    dynamic_options, execution_config = _options_of(state)
    if params is not None and REFRESH_STATUS_KEY in params:
        return CatalogStatus(
            RefreshStatus(params[REFRESH_STATUS_KEY]), _join(params, REFRESH_HANDLER_KEY),
            _join(params, DEFINITION_KEY), "table", dynamic_options, execution_config,
            params.get(SUSPEND_REASON_KEY),
            FailureStreak(int(params.get(FAILURES_KEY, "0")), _join(params, LAST_FAILURE_KEY)),
        )
    if state.get("refresh_status"):
        return CatalogStatus(
            RefreshStatus(state["refresh_status"]), state.get("refresh_handler"),
            _read_definition(definition_path), "file", dynamic_options, execution_config,
            state.get("suspend_reason"),
            FailureStreak(int(state.get("consecutive_failures") or 0), state.get("last_failure")),
        )
    return CatalogStatus(None, None, None, "none", dynamic_options, execution_config)


def suspension_of(definition_path: str | Path) -> str | None:
    """The suspension note kept beside the definition, for the DAG description; never raises
    (a DAG file must not fail because of a damaged state file)."""
    try:
        note = read_state(definition_path).get("suspension")
    except WorkflowException:
        return None
    return note if isinstance(note, str) else None


def _owned(key: str) -> bool:
    """Keys this module writes, including the ``.numParts`` / ``.part.N`` of split values."""
    return any(key == k or key.startswith(k + ".") for k in _TABLE_KEYS)


class CatalogStatusStore:
    """Reads and writes a table's refresh status; ``metastore_uri=None`` keeps it in files only."""

    def __init__(self, metastore_uri: str | None) -> None:
        self.metastore_uri = metastore_uri

    def save(
        self,
        identifier: TableIdentifier,
        definition_path: str | Path,
        status: RefreshStatus,
        refresh_handler: str | None = None,
        suspend_reason: str | None = None,
        failures: FailureStreak | None = None,
    ) -> str:
        """Store ``status`` with ``suspend_reason`` (and the handler and failure streak, if
        given: else the stored ones stay); return where it went."""

        def change(current: CatalogStatus) -> CatalogStatus:
            return replace(
                current,
                refresh_status=status,
                refresh_handler=refresh_handler if refresh_handler is not None else current.refresh_handler,
                suspend_reason=suspend_reason,
                failures=failures if failures is not None else current.failures,
            )

        return self.update(identifier, definition_path, change).stored_in

    def load(self, identifier: TableIdentifier, definition_path: str | Path) -> CatalogStatus:
        """The stored status; moves a file-held status into the table once the table exists."""
        state = read_state(definition_path)
        params = self._table_params(identifier)
        if params is not None and state.get("refresh_status"):
            return self.update(identifier, definition_path, lambda current: current)
        return status_from(params, state, definition_path)

    def update(
        self,
        identifier: TableIdentifier,
        definition_path: str | Path,
        change: Callable[[CatalogStatus], CatalogStatus | None],
    ) -> CatalogStatus:
        """Read-modify-write of the status under the table's metastore lock (and the state
        file's lock); ``change`` returns None to write nothing. Returns the stored status.
        A write that lost to a lock-free commit (compare-and-set) is made again from a new read."""
        return retry_on_conflict(
            lambda: self._update_once(identifier, definition_path, change), f"status of {identifier}"
        )

    def _update_once(
        self,
        identifier: TableIdentifier,
        definition_path: str | Path,
        change: Callable[[CatalogStatus], CatalogStatus | None],
    ) -> CatalogStatus:
        with contextlib.ExitStack() as stack:
            client = table = None
            if self.metastore_uri is not None:
                client = stack.enter_context(MetastoreClient(self.metastore_uri))
                stack.enter_context(client.locked(identifier.database, identifier.table))
                table = client.read_for_update(identifier.database, identifier.table)
            stack.enter_context(_state_locked(definition_path))
            params = None if table is None else dict(table.parameters or {})
            current = status_from(params, read_state(definition_path), definition_path)
            new = change(current)
            if new is None:
                return current
            if client is not None and table is not None:
                kept = {k: v for k, v in (table.parameters or {}).items() if not _owned(k)}
                table.parameters = {**kept, **self._params(new, definition_path)}
                client.alter_table(table)
                _update_state_unlocked(definition_path, **dict.fromkeys(_FILE_FIELDS),
                                       suspension=suspension_note(new.suspend_reason, new.failures))
                where = "table"
            else:
                _update_state_unlocked(definition_path, **self._fields(new))
                where = "file"
        return status_from(table.parameters if where == "table" else None,  # type: ignore[union-attr]
                           read_state(definition_path), definition_path)

    @staticmethod
    def _params(status: CatalogStatus, definition_path: str | Path) -> dict[str, str]:
        ours = {}
        if status.refresh_status is not None:
            ours[REFRESH_STATUS_KEY] = status.refresh_status.value
        if status.refresh_handler is not None:
            ours.update(_split(REFRESH_HANDLER_KEY, status.refresh_handler))
        definition = _read_definition(definition_path)
        if definition is not None:
            ours.update(_split(DEFINITION_KEY, definition))
        if status.suspend_reason is not None:
            ours[SUSPEND_REASON_KEY] = status.suspend_reason
        if status.failures.count:
            ours[FAILURES_KEY] = str(status.failures.count)
        if status.failures.last_failure is not None:
            ours.update(_split(LAST_FAILURE_KEY, status.failures.last_failure))
        return ours

    @staticmethod
    def _fields(status: CatalogStatus) -> dict[str, Any]:
        return {
            "refresh_status": status.refresh_status.value if status.refresh_status else None,
            "refresh_handler": status.refresh_handler,
            "suspend_reason": status.suspend_reason,
            "consecutive_failures": status.failures.count or None,
            "last_failure": status.failures.last_failure,
            "suspension": suspension_note(status.suspend_reason, status.failures),
        }

    def clear(self, identifier: TableIdentifier, definition_path: str | Path) -> None:
        """Forget the status (table parameters and state file); the table's data stays."""
        remove_state(definition_path)
        if self.metastore_uri is None:
            return
        uri = self.metastore_uri

        def clear_params() -> None:
            with MetastoreClient(uri) as client, client.locked(identifier.database, identifier.table):
                table = client.read_for_update(identifier.database, identifier.table)
                if table is not None and any(_owned(key) for key in table.parameters or {}):
                    table.parameters = {k: v for k, v in table.parameters.items() if not _owned(k)}
                    client.alter_table(table)

        retry_on_conflict(clear_params, f"status of {identifier}")

    def _table_params(self, identifier: TableIdentifier) -> dict[str, str] | None:
        if self.metastore_uri is None:
            return None
        with MetastoreClient(self.metastore_uri) as client:
            table = client.get_table(identifier.database, identifier.table)
        return None if table is None else dict(table.parameters or {})
