"""The names shared by the DAG factory and its clients, and the client side's imports."""

import subprocess
import sys
from pathlib import Path

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB, broken_dag_id, dag_id_for


def test_dag_ids() -> None:
    assert dag_id_for(TableIdentifier.parse("Analytics.Orders")) == "mt__analytics__orders"
    assert broken_dag_id(Path("/defs/bad name!.sql")) == "mt__broken__bad_name_"
    assert Path("a__b.sql").match(DEFINITION_GLOB)


def test_client_side_does_not_import_the_dag_factory() -> None:
    # The manager and the workflow scheduler run in the CLI: no DAG-building imports there.
    code = (
        "import sys, airflow_provider_staged.materialized.manager, airflow_provider_staged.cli\n"
        "loaded = [m for m in ('airflow_provider_staged.materialized.factory', 'airflow.sdk')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
