"""The names shared by the DAG factory and its clients, and the client side's imports."""

import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from airflow_provider_staged.materialized.naming import (
    DEFINITION_GLOB,
    broken_dag_id,
    dag_id_for,
    manual_run_fields,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier


def test_dag_ids() -> None:
    assert dag_id_for(TableIdentifier.parse("Analytics.Orders")) == "mt__analytics__orders"
    assert broken_dag_id(Path("/defs/bad name!.sql")) == "mt__broken__bad_name_"
    assert Path("a__b.sql").match(DEFINITION_GLOB)


def test_manual_run_is_due_at_once_on_sqlite() -> None:
    from sqlalchemy.dialects.sqlite import DATETIME

    now = datetime(2026, 11, 24, 1, 39, 45, 357592, tzinfo=timezone.utc)
    fields = manual_run_fields(now, False, None)
    assert fields["run_after"] == datetime(2026, 11, 24, 1, 39, 44, 999999, tzinfo=timezone.utc)
    assert fields["dag_run_id"] == "manual__2026-11-24T01:39:45.357592+00:00"  # Airflow's own form
    later = manual_run_fields(now.replace(microsecond=357593), False, None)
    assert later["dag_run_id"] != fields["dag_run_id"]
    # A periodic refresh takes its partition from its schedule time: run_after unless one is given.
    assert manual_run_fields(now, True, None) == {}
    assert manual_run_fields(now, True, "2026-11-24 00:00:00") == fields
    # Airflow's test on SQLite: run_after, stored as SQLAlchemy writes it, <= CURRENT_TIMESTAMP
    # (whole seconds; here the database's clock is `now`): `now` itself, even cut to its
    # second, is not due before the next second.
    stored = DATETIME().bind_processor(None)
    due = "SELECT ? <= strftime('%Y-%m-%d %H:%M:%S', ?)"
    with sqlite3.connect(":memory:") as db:
        def is_due(run_after: datetime) -> bool:
            return bool(db.execute(due, (stored(run_after.replace(tzinfo=None)), str(now))).fetchone()[0])

        assert is_due(fields["run_after"])
        assert not is_due(now) and not is_due(now.replace(microsecond=0))


def test_client_side_does_not_import_the_dag_factory() -> None:
    # The manager and the workflow scheduler run in the CLI: no DAG-building imports there.
    code = (
        "import sys, airflow_provider_staged.materialized.workflow.manager\n"
        "import airflow_provider_staged.cli.main\n"
        "loaded = [m for m in ('airflow_provider_staged.materialized.workflow.dag_factory', 'airflow.sdk')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
