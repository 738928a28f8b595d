"""The worker process of the statement-set kill tests (``test_statement_set``), started with spawn.

It runs a statement set's commit group of appends — the SQL client's attempts
(``statement_set_run.insert_attempt``) on the real metastore and journal — and is SIGKILLed at a
pause point. Each INSERT's rows are written with pyarrow into the attempt's ``ready/`` directory:
what is under test is the group's journal and commits, not Spark (``test_statement_set`` runs the
same sets through Spark whole).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.catalogs.metastore.tables import SCHEMA_KEY
from airflow_provider_staged.engine.spark_job import data_files
from airflow_provider_staged.sql.statement_set import InsertPlan
from airflow_provider_staged.sql.statement_set_run import insert_attempt
from airflow_provider_staged.staging.attempts import JournaledStagedTable, run_group
from airflow_provider_staged.staging.faults import PAUSE_DIR_ENV
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.kinds.hive_sink import READY_DIR
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import local_path

ROWS = 5  # each INSERT appends ids 100..104 to its table of one bigint column ``id``


def append_set(
    metastore_uri: str, warehouse: str, journal_dir: str, pause_dir: str, targets: list[str]
) -> None:
    """INSERT INTO each of ``targets`` (tables of one column ``id bigint``) as one statement set."""
    os.environ[PAUSE_DIR_ENV] = pause_dir
    settings = StagedSettings(metastore_uri, warehouse, journal_dir)
    members = [insert_attempt(settings, InsertPlan(TableIdentifier.parse(t), False, "")) for t in targets]

    def write(staged: JournaledStagedTable, spec: dict[str, Any]) -> dict[str, Any]:
        with MetastoreClient(metastore_uri) as client:
            table = client.get_table(*staged.target.split("."))
        ready = Path(local_path(f"{spec['location']}/{READY_DIR}"))
        ready.mkdir(parents=True)
        rows = pa.table({"id": pa.array(range(100, 100 + ROWS), pa.int64())})
        pq.write_table(rows, ready / "part-0.parquet")
        return {"location": str(ready), "schema_json": table.parameters[SCHEMA_KEY],
                "hive_columns": [["id", "bigint"]], "partition_columns": [], "files": data_files(ready)}

    run_group(members, write, settings.attempt_ttl_seconds)
