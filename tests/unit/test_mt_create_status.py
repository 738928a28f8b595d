"""CREATE keeps what the workflow's first run recorded before CREATE stored the status."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_staged.materialized.catalog_status import CatalogStatus, CatalogStatusStore
from airflow_provider_staged.materialized.failure_streak import FailureStreak
from airflow_provider_staged.materialized.workflow.airflow_scheduler import (
    AirflowRefreshHandler,
    AirflowRefreshHandlerSerializer,
)
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreateRefreshWorkflow,
    RefreshStatus,
    WorkflowException,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier

DEFINITION = """CREATE MATERIALIZED TABLE e2e.t
FRESHNESS = INTERVAL '1' DAY
AS SELECT 1 AS n;
"""


class _FirstRunFailsDuringCreate:
    """A workflow scheduler whose workflow's first scheduled run fails (and counts) before
    ``create_refresh_workflow`` returns, as a catch-up run does right after the unpause."""

    def __init__(self, folder: Path) -> None:
        self.folder = self.definitions_dir = folder

    def definition_path_for(self, identifier: TableIdentifier) -> Path:
        return self.folder / f"{identifier.database}__{identifier.table}.sql"

    def create_refresh_workflow(self, workflow: CreateRefreshWorkflow) -> AirflowRefreshHandler:
        path = self.definition_path_for(workflow.identifier)
        path.write_text(workflow.definition_text)

        def first_run_failed(current: CatalogStatus) -> CatalogStatus:
            return replace(current, refresh_status=RefreshStatus.ACTIVATED,
                           failures=FailureStreak(1, "scheduled__2026-11-19: source missing"))

        CatalogStatusStore(None).update(workflow.identifier, path, first_run_failed)
        return AirflowRefreshHandler("mt__e2e__t", "http://127.0.0.1:9")

    def get_refresh_handler_serializer(self) -> AirflowRefreshHandlerSerializer:
        return AirflowRefreshHandlerSerializer()


def test_create_keeps_a_failure_the_first_run_counted(tmp_path: Path) -> None:
    scheduler = _FirstRunFailsDuringCreate(tmp_path)
    tables = MaterializedTables(scheduler, None)  # type: ignore[arg-type]

    tables.create(DEFINITION)

    identifier = TableIdentifier("e2e", "t")
    status = tables.store.load(identifier, scheduler.definition_path_for(identifier))
    assert status.refresh_status is RefreshStatus.ACTIVATED
    assert status.failures == FailureStreak(1, "scheduled__2026-11-19: source missing")
    assert status.refresh_handler is not None and "mt__e2e__t" in status.refresh_handler


class _CatalogWithoutDatabase:
    """A metastore client of a catalog that holds no database ``e2e``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __enter__(self) -> _CatalogWithoutDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get_table(self, database: str, table: str) -> None:
        return None

    def database_location(self, database: str) -> str:
        from airflow_provider_staged.staging.errors import TableNotFoundError

        raise TableNotFoundError(f"database {database!r} does not exist")


def test_create_in_a_database_the_catalog_lacks_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flink refuses it (the database does not exist); here every refresh failed instead,
    after the workflow, its definition and its status were installed."""
    from airflow_provider_staged.materialized.workflow import manager

    monkeypatch.setattr(manager, "MetastoreClient", _CatalogWithoutDatabase)
    scheduler = _FirstRunFailsDuringCreate(tmp_path)
    tables = MaterializedTables(scheduler, "thrift://127.0.0.1:9")  # type: ignore[arg-type]

    with pytest.raises(WorkflowException, match=r"e2e\.t not created: database 'e2e' does not exist"):
        tables.create(DEFINITION)
    assert list(tmp_path.iterdir()) == []  # no definition, no state file


class _PausingScheduler:
    """A workflow scheduler whose DAG pauses and unpauses, with the runs it is given."""

    def __init__(self, folder: Path, definition: str) -> None:
        self.folder, self.paused, self.runs, self.modified = folder, False, [], []
        self.path = folder / "e2e__t.sql"
        self.path.write_text(definition)
        self.endpoint = "http://127.0.0.1:9"
        self.poll_interval = 0.0

    def definition_file(self, dag_id: str) -> Path | None:
        return self.path if dag_id == "mt__e2e__t" else None

    def get_refresh_handler_serializer(self) -> AirflowRefreshHandlerSerializer:
        return AirflowRefreshHandlerSerializer()

    def get_dag(self, handler: AirflowRefreshHandler) -> object:
        return SimpleNamespace(is_paused=self.paused)

    def last_runs(self, handler: AirflowRefreshHandler, limit: int = 5) -> list[object]:
        return [SimpleNamespace(state=SimpleNamespace(value=state)) for state in self.runs]

    def modify_refresh_workflow(self, workflow: object) -> None:
        self.modified.append(type(workflow).__name__)
        self.paused = type(workflow).__name__ == "SuspendRefreshWorkflow"


FULL = ("CREATE MATERIALIZED TABLE e2e.t\nFRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = FULL\n"
        "AS SELECT 1 AS n;\n")
CONTINUOUS = FULL.replace("REFRESH_MODE = FULL", "REFRESH_MODE = CONTINUOUS")
T = TableIdentifier("e2e", "t")


def test_flink_repeated_suspend_and_resume_in_full_mode(tmp_path: Path) -> None:
    """MaterializedTableStatementITCase.testAlterMaterializedTableWithRepeatedSuspendAndResumeInFullMode:
    a second SUSPEND and a second RESUME are refused, naming the table; before, both did again
    what was already so (and RESUME WITH (...) changed a running table's options)."""
    scheduler = _PausingScheduler(tmp_path, FULL)
    tables = MaterializedTables(scheduler, None)  # type: ignore[arg-type]
    tables.suspend(T)
    with pytest.raises(WorkflowException, match=r"^Materialized table e2e\.t refresh workflow has been "
                       r"suspended\.$"):
        tables.suspend(T)
    tables.resume(T)
    with pytest.raises(WorkflowException, match=r"^Materialized table e2e\.t refresh workflow has been "
                       r"resumed\.$"):
        tables.resume(T, {"compression": "zstd"})
    assert scheduler.modified == ["SuspendRefreshWorkflow", "ResumeRefreshWorkflow"]
    # Auto-suspend records its reason even over a person's suspension.
    tables.suspend(T)
    tables.suspend(T, "SUSPENDED_DUE_TO_ERRORS")
    assert tables.store.load(T, scheduler.path).suspend_reason == "SUSPENDED_DUE_TO_ERRORS"


def test_the_dag_decides_when_it_disagrees_with_the_status(tmp_path: Path) -> None:
    """A DAG unpaused in Airflow's own UI is not suspended, whatever the stored status says."""
    scheduler = _PausingScheduler(tmp_path, FULL)
    tables = MaterializedTables(scheduler, None)  # type: ignore[arg-type]
    tables.suspend(T)
    scheduler.paused = False  # unpaused behind the workflow scheduler's back
    tables.suspend(T)
    assert scheduler.modified == ["SuspendRefreshWorkflow", "SuspendRefreshWorkflow"]


def test_flink_repeated_suspend_and_resume_in_continuous_mode(tmp_path: Path) -> None:
    """...InContinuousMode: "continuous refresh job has been suspended/resumed". A RESUME of an
    active table whose stream has no queued or running run restarts it, as before."""
    scheduler = _PausingScheduler(tmp_path, CONTINUOUS)
    tables = MaterializedTables(scheduler, None)  # type: ignore[arg-type]
    tables._wait_until_stopped = lambda handler: None  # type: ignore[method-assign]
    tables._restart_stream = lambda handler: None  # type: ignore[method-assign]
    tables.suspend(T)
    with pytest.raises(WorkflowException, match=r"^Materialized table e2e\.t continuous refresh job has "
                       r"been suspended\.$"):
        tables.suspend(T)
    tables.resume(T)
    scheduler.runs = ["running"]
    with pytest.raises(WorkflowException, match=r"continuous refresh job has been resumed\.$"):
        tables.resume(T)
    scheduler.runs = ["failed"]
    tables.resume(T)  # the stream died: RESUME starts it again from its checkpoint
    assert scheduler.modified == ["SuspendRefreshWorkflow", "ResumeRefreshWorkflow", "ResumeRefreshWorkflow"]


class _CatalogWithTables:
    """A metastore client of a catalog with an ordinary table e2e.plain and a view e2e.v."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __enter__(self) -> _CatalogWithTables:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get_table(self, database: str, table: str) -> object | None:
        kinds = {"plain": "MANAGED_TABLE", "v": "VIRTUAL_VIEW"}
        return SimpleNamespace(tableType=kinds[table], parameters={}) if table in kinds else None


@pytest.mark.parametrize(("table", "why"), [
    ("plain", "table e2e.plain of the catalog is not a materialized table (no definition in "),
    ("v", "view e2e.v of the catalog is not a materialized table (no definition in "),
    ("nothing", "no definition in "),
])
def test_flink_an_ordinary_table_is_named_as_not_materialized(
    table: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaterializedTableStatementITCase.testDropMaterializedTableInContinuousMode: DROP MATERIALIZED
    TABLE of an ordinary table says it is not a materialized table (Flink: "Table ... is not a
    materialized table, does not support materialized table related operation."); a name the
    catalog lacks keeps "no definition"."""
    from airflow_provider_staged.materialized.workflow import manager

    monkeypatch.setattr(manager, "MetastoreClient", _CatalogWithTables)
    scheduler = _PausingScheduler(tmp_path, FULL)
    scheduler.definitions_dir = tmp_path
    tables = MaterializedTables(scheduler, "thrift://127.0.0.1:9")  # type: ignore[arg-type]
    for act in (tables.drop, tables.suspend, tables.resume):
        with pytest.raises(WorkflowException) as caught:
            act(TableIdentifier("e2e", table))
        closing = ")" if table != "nothing" else ""
        assert str(caught.value) == f"no materialized table e2e.{table}: {why}{tmp_path}{closing}"
