"""A materialized table bound to a non-default staged connection refreshes into THAT catalog.

Two real metastores (the session one behind ``staged_default``, a second one behind
``other``), each with its own warehouse and journal; the refresh DAGs come from a dags folder
that calls ``build_dags(..., conn_id="other")`` and run through real ``airflow dags test``.
The target database exists in both metastores, so a refresh into the wrong catalog would
succeed there and be seen.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import current_location
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.lineage.datasets import hive_namespace
from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState, TaskRef
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_table import HiveStagedTable
from airflow_provider_staged.storage.files import local_path, normalize_location
from tests.fixtures.airflow_cli import AirflowCli, staged_connection
from tests.integration import race_workers

DAG_FILE = """\
# airflow DAG file: the refresh DAGs of ./materialized, bound to the staged connection "other"
from pathlib import Path

from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

build_dags(Path(__file__).with_name("materialized"), globals(), conn_id="other")
"""
# With ANSI off (the run's executionConfig) the bad value casts to NULL; with ANSI on (Spark
# 4's default) the cast fails inside the write job, after the attempt began.
DEFINITION = """\
CREATE MATERIALIZED TABLE {db}.totals
FRESHNESS = INTERVAL '1' HOUR
AS SELECT /*+ REPARTITION(2) */ id, CAST(label AS INT) AS n
   FROM (SELECT id, IF(id = 7, 'seven', CAST(id AS STRING)) AS label FROM range(10));
"""
ANSI_OFF = {"executionConfig": {"spark.sql.ansi.enabled": "false"}}
ANSI_ON = {"executionConfig": {"spark.sql.ansi.enabled": "true"}}
EXPECTED_ROWS = sorted((i, None if i == 7 else i) for i in range(10))


@dataclass
class Catalogs:
    default: MetastoreInfo
    other: MetastoreInfo
    default_journal: Path
    other_journal: Path
    db: str
    dags: Path
    env: dict[str, str]

    @property
    def dag_id(self) -> str:
        return f"mt__{self.db}__totals"


@pytest.fixture(scope="module")
def second_metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetastoreInfo]:
    home = tmp_path_factory.mktemp("second-metastore")
    info = start_metastore(home)
    try:
        yield info
    finally:
        stop_metastore(home)


@pytest.fixture(scope="module")
def catalogs(
    airflow_cli: AirflowCli,
    metastore: MetastoreInfo,
    second_metastore: MetastoreInfo,
    tmp_path_factory: pytest.TempPathFactory,
) -> Catalogs:
    assert metastore.uri != second_metastore.uri and metastore.warehouse != second_metastore.warehouse
    db = "two_" + uuid.uuid4().hex[:8]
    for info in (metastore, second_metastore):
        with MetastoreClient(info.uri) as client:
            client.ensure_database(db, info.warehouse)
    journals = tmp_path_factory.mktemp("journals")
    default_journal, other_journal = journals / "default", journals / "other"
    dags = tmp_path_factory.mktemp("two-catalog-dags")
    (dags / "materialized_other.py").write_text(DAG_FILE)
    (dags / "materialized").mkdir()
    (dags / "materialized" / "totals.sql").write_text(DEFINITION.format(db=db))
    env = airflow_cli.env(
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_STAGED_DEFAULT=staged_connection(
            metastore.port, metastore.uri, default_journal, metastore.warehouse
        ),
        AIRFLOW_CONN_OTHER=staged_connection(
            second_metastore.port, second_metastore.uri, other_journal, second_metastore.warehouse
        ),
    )
    return Catalogs(metastore, second_metastore, default_journal, other_journal, db, dags, env)


def _dags_test(airflow_cli: AirflowCli, catalogs: Catalogs, conf: dict[str, Any]) -> tuple[int, str]:
    result = airflow_cli.run("dags", "test", catalogs.dag_id, "--conf", json.dumps(conf), env=catalogs.env)
    return result.returncode, result.stdout + result.stderr


def _table(info: MetastoreInfo, db: str, table: str = "totals") -> Any:
    with MetastoreClient(info.uri) as client:
        return client.get_table(db, table)


def _rows(location: str) -> list[tuple[int, int | None]]:
    files = sorted(local_path(location).rglob("*.parquet"))
    assert files, f"no data files under {location}"
    rows = []
    for path in files:
        table = pq.read_table(path)
        rows.extend(zip(table.column("id").to_pylist(), table.column("n").to_pylist(), strict=True))
    return sorted(rows)


def _records(journal_dir: Path) -> list[AttemptRecord]:
    return sorted(FileJournal(journal_dir).records(), key=lambda record: record.created_at)


def test_a_table_bound_to_other_refreshes_into_other(airflow_cli: AirflowCli, catalogs: Catalogs) -> None:
    code, output = _dags_test(airflow_cli, catalogs, ANSI_OFF)
    assert code == 0, output[-4000:]

    # The table is in the second metastore, in its warehouse, with the query's rows...
    table = _table(catalogs.other, catalogs.db)
    assert table is not None
    location = normalize_location(current_location(table))
    assert location.startswith(normalize_location(catalogs.other.warehouse) + "/")
    assert _rows(location) == EXPECTED_ROWS
    # ...and not in the first one, although its database exists there too.
    assert _table(catalogs.default, catalogs.db) is None

    (record,) = _records(catalogs.other_journal)
    assert record.state is AttemptState.COMMITTED
    assert record.conn_id == "other"
    assert record.target == f"{catalogs.db}.totals"
    assert normalize_location(record.location) == location
    assert record.catalog["metastore_uri"] == catalogs.other.uri
    assert record.task is not None and (record.task.dag_id, record.task.task_id) == (
        catalogs.dag_id,
        "refresh",
    )
    assert _records(catalogs.default_journal) == []

    # The refresh task's outlet asset names other's metastore: hive://<its host:port>/<db>/totals.
    with sqlite3.connect(airflow_cli.home / "airflow.db") as db:
        uris = {
            row[0]
            for row in db.execute(
                "SELECT asset.uri FROM asset_event JOIN asset ON asset.id = asset_event.asset_id "
                "WHERE asset_event.source_dag_id = ?",
                (catalogs.dag_id,),
            )
        }
    assert uris == {f"{hive_namespace(catalogs.other.uri)}/{catalogs.db}/totals"}


def test_a_failed_refresh_on_other_is_aborted_in_others_journal(
    airflow_cli: AirflowCli, catalogs: Catalogs
) -> None:
    before = _table(catalogs.other, catalogs.db)
    if before is None:  # run alone: make the previous version first
        code, output = _dags_test(airflow_cli, catalogs, ANSI_OFF)
        assert code == 0, output[-4000:]
        before = _table(catalogs.other, catalogs.db)
    committed = [r.attempt_id for r in _records(catalogs.other_journal)]

    _, output = _dags_test(airflow_cli, catalogs, ANSI_ON)
    assert "CAST_INVALID_INPUT" in output and "'seven'" in output, output[-4000:]

    # In a `dags test` run the task's own abort (run_attempt) gets there first: the failure
    # callback then finds the attempt ended (its own effect: the next test).
    failed = [r for r in _records(catalogs.other_journal) if r.attempt_id not in committed]
    assert len(failed) == 1, [(r.attempt_id, r.state) for r in failed]
    (record,) = failed
    assert record.state is AttemptState.ABORTED
    assert record.conn_id == "other"
    assert record.task is not None and record.task.dag_id == catalogs.dag_id
    assert not local_path(record.location).exists(), "the aborted attempt's data was not deleted"
    # The table in "other" is the previous version, untouched; nothing reached the default catalog.
    after = _table(catalogs.other, catalogs.db)
    assert current_location(after) == current_location(before)
    assert _rows(current_location(after)) == EXPECTED_ROWS
    assert _table(catalogs.default, catalogs.db) is None
    assert _records(catalogs.default_journal) == []


def test_the_failure_callback_aborts_on_others_catalog(
    catalogs: Catalogs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's on_failure_callback, as Airflow calls it, aborts an attempt that the task left
    open (a try that died before its own abort) in ``other``'s journal and catalog."""
    from airflow.dag_processing.dagbag import DagBag

    for key in ("AIRFLOW_CONN_STAGED_DEFAULT", "AIRFLOW_CONN_OTHER"):
        monkeypatch.setenv(key, catalogs.env[key])
    dagbag = DagBag(dag_folder=str(catalogs.dags), bundle_path=catalogs.dags)
    assert dagbag.import_errors == {}
    task = dagbag.dags[catalogs.dag_id].get_task("refresh")
    (outlet,) = task.outlets
    assert outlet.uri == f"{hive_namespace(catalogs.other.uri)}/{catalogs.db}/totals"

    ti = SimpleNamespace(
        dag_id=catalogs.dag_id,
        task_id="refresh",
        run_id=f"manual__{uuid.uuid4().hex}",
        try_number=1,
        map_index=-1,
    )
    task_ref = TaskRef(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index)
    staged = HiveStagedTable(
        TableIdentifier.parse(f"{catalogs.db}.totals"),
        StagingPurpose.CREATE_OR_REPLACE_TABLE_AS,
        FileJournal(catalogs.other_journal),
        catalogs.other.uri,
        task=task_ref,
        conn_id="other",
    )
    staged.begin()
    source = catalogs.dags / "source.parquet"
    race_workers.write_source_parquet(source)
    staged.written(race_workers.write_flat(staged, str(source)))
    before = _table(catalogs.other, catalogs.db)

    callbacks = task.on_failure_callback
    for callback in callbacks if isinstance(callbacks, list) else [callbacks]:
        callback({"ti": ti, "task": task})

    record = FileJournal(catalogs.other_journal).require(staged.attempt_id)
    assert record.state is AttemptState.ABORTED and record.error == "task failed"
    assert not local_path(record.location).exists()
    after = _table(catalogs.other, catalogs.db)
    assert (after and current_location(after)) == (before and current_location(before))
    assert _records(catalogs.default_journal) == []
