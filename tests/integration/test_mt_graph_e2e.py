"""SUSPEND ... CASCADE and DROP ... CASCADE against a real Airflow: both DAGs of a two-table chain.

Run alone: ``pytest tests/integration/test_mt_graph_e2e.py -x`` (Airflow starts once per session,
as for test_mt_workflow_e2e.py, whose fixtures this uses).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowWorkflowScheduler
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import WorkflowException
from airflow_provider_staged.staging.identifiers import TableIdentifier
from tests.integration.test_mt_workflow_e2e import Rest, rest, scheduler  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

UP, DOWN = TableIdentifier("e2e", "graph_up"), TableIdentifier("e2e", "graph_down")


def definition(table: TableIdentifier, query: str) -> str:
    return f"CREATE MATERIALIZED TABLE {table}\nFRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = FULL\nAS {query}"


def test_suspend_and_drop_cascade_reach_the_downstream_dag(
    scheduler: AirflowWorkflowScheduler, rest: Rest, definitions_dir: Path  # noqa: F811
) -> None:
    # No metastore: the status stays beside the definitions; the DAGs are what this is about.
    tables = MaterializedTables(scheduler, None)
    # Put in the folder by hand, the downstream DAG comes with the upstream one's parse (a second
    # CREATE waited for a parse of its own).
    (definitions_dir / "e2e__graph_down.sql").write_text(definition(DOWN, f"SELECT n FROM {UP}"))
    try:
        tables.create(definition(UP, "SELECT 1 AS n"))
        with pytest.raises(WorkflowException, match=r"graph_up not dropped: .* read it: e2e\.graph_down"):
            tables.drop(UP)
        assert tables.suspend(UP, cascade=True) == [DOWN, UP]
        assert [rest.dag(dag_id_for(t)).json()["is_paused"] for t in (UP, DOWN)] == [True, True]
        assert tables.drop(UP, cascade=True) == [DOWN, UP]
        assert [rest.dag(dag_id_for(t)).status_code for t in (UP, DOWN)] == [404, 404]
    finally:
        for path in definitions_dir.glob("e2e__graph_*.sql"):
            path.unlink()
