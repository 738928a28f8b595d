"""Shard files under a DAG processor that re-parses nothing on its own (a real Airflow).

The set-up of a deployment with thousands of definitions: ``staged mt shards`` wrote the DAG
files, and ``[dag_processor] min_file_process_interval`` is an hour. A create, a change and a
drop through the workflow scheduler still show in Airflow within seconds, because each asks for
a parse of its table's shard file; the other shard's file is not parsed again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airflow_provider_staged.discovery.embedded import AirflowInfo, MetastoreInfo
from airflow_provider_staged.local.airflow_server import api_token, start_airflow, stop_airflow
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreatePeriodicRefreshWorkflow,
    DeleteRefreshWorkflow,
    ModifyRefreshWorkflowDefinition,
)
from airflow_provider_staged.materialized.workflow.shards import Shard, install_shard_files, shard_index
from airflow_provider_staged.staging.identifiers import TableIdentifier

SHARDS = 2
# Without its parse request a change would wait for this: the test's scheduler gives up long before.
NEVER = "3600"
PARSE_TIMEOUT = 60.0
PROMPT = 30.0  # seconds: a requested parse, with the processor's and the API's loops


def definition(table: TableIdentifier, comment: str = "v1") -> str:
    return (f"CREATE MATERIALIZED TABLE {table.name} COMMENT '{comment}'\n"
            "FRESHNESS = INTERVAL '1' DAY\nAS SELECT 1 AS n\n")


def tables_of(shard: int, count: int) -> Iterator[TableIdentifier]:
    for i in range(1000):
        table = TableIdentifier("shards", f"t{i}")
        if shard_index(table.name, SHARDS) == shard:
            yield table
            count -= 1
            if count == 0:
                return


@pytest.fixture(scope="module")
def sharded_airflow(
    tmp_path_factory: pytest.TempPathFactory, staged_home: Path, metastore: MetastoreInfo
) -> Iterator[AirflowInfo]:
    home = tmp_path_factory.mktemp("airflow-sharded")
    dags = home / "dags"
    (dags / "materialized").mkdir(parents=True)
    install_shard_files(dags, SHARDS)
    for shard in range(SHARDS):  # one table in each shard from the start
        (table,) = tables_of(shard, 1)
        (dags / "materialized" / f"{table.database}__{table.table}.sql").write_text(definition(table))
    env = {"STAGED_HOME": str(staged_home), "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": NEVER}
    try:
        yield start_airflow(home, dags, extra_env=env)
    finally:
        stop_airflow(home)


def dags_by_id(airflow: AirflowInfo) -> dict[str, dict]:
    headers = {"Authorization": f"Bearer {api_token(airflow)}"}
    response = httpx.get(f"{airflow.endpoint}/api/v2/dags", headers=headers, timeout=60,
                         params={"limit": 100, "tags": "materialized-table"})
    return {dag["dag_id"]: dag for dag in response.raise_for_status().json()["dags"]}


def test_changes_reach_only_their_tables_shard_file_and_show_at_once(sharded_airflow: AirflowInfo) -> None:
    definitions = Path(sharded_airflow.dags_folder) / "materialized"
    first, second = (next(tables_of(shard, 1)) for shard in range(SHARDS))
    deadline = time.monotonic() + 120
    while {f"mt__shards__{t.table}" for t in (first, second)} - set(dags_by_id(sharded_airflow)):
        assert time.monotonic() < deadline, "the two shard files were not parsed at start"
        time.sleep(1)
    before = dags_by_id(sharded_airflow)
    for table, shard in ((first, 0), (second, 1)):
        assert Path(before[f"mt__shards__{table.table}"]["fileloc"]).name == Shard(shard, SHARDS).file_name

    user, password = sharded_airflow.credentials("admin")
    scheduler = AirflowWorkflowScheduler(sharded_airflow.endpoint, definitions, user, password,
                                         parse_timeout=PARSE_TIMEOUT)
    new = list(tables_of(0, 2))[1]  # a new table of shard 0: it borrows the first table's token
    try:
        start = time.monotonic()
        handler = scheduler.create_refresh_workflow(CreatePeriodicRefreshWorkflow(new, definition(new)))
        created = time.monotonic() - start
        scheduler.modify_refresh_workflow(ModifyRefreshWorkflowDefinition(handler, definition(new, "v2")))
        modified = time.monotonic() - start - created
        start = time.monotonic()
        scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))
        deleted = time.monotonic() - start
    finally:
        scheduler.close()
    assert max(created, modified, deleted) < PROMPT, (created, modified, deleted)
    after = dags_by_id(sharded_airflow)
    assert handler.dag_id not in after
    # Shard 1 was never asked for: its file was parsed once, at start.
    other = f"mt__shards__{second.table}"
    assert after[other]["last_parsed_time"] == before[other]["last_parsed_time"]
    assert after[f"mt__shards__{first.table}"]["last_parsed_time"] > before[f"mt__shards__{first.table}"][
        "last_parsed_time"]
