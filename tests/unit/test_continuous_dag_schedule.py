"""The @continuous refresh DAG keeps making runs: every run gets a logical date of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.timetables.base import TimeRestriction
from airflow.timetables.simple import ContinuousTimetable

from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

# The factory names each table's asset after the staged connection's metastore.
pytestmark = pytest.mark.usefixtures("staged_default_connection")


def test_each_next_continuous_run_has_a_new_logical_date(tmp_path: Path) -> None:
    # Without a start date, Airflow's timetable gave the first run an empty interval (now, now)
    # and every later one the first run's logical date: the scheduler then never made another.
    (tmp_path / "live.sql").write_text(
        "CREATE MATERIALIZED TABLE live.clicks FRESHNESS = INTERVAL '5' MINUTE AS SELECT id FROM raw.clicks")
    dag = build_dags(tmp_path, {})["mt__live__clicks"]
    assert type(dag.timetable).__name__ == "ContinuousTimetable"
    # What the scheduler does with the DAG: its timetable (the core class) from the start date.
    restriction = TimeRestriction(earliest=dag.start_date, latest=None, catchup=False)
    timetable, seen, last = ContinuousTimetable(), [], None
    for _ in range(3):
        info = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        assert info is not None
        seen.append(info.logical_date)
        last = info.data_interval
    assert len(set(seen)) == 3, seen


def test_a_continuous_table_keeps_its_own_start_date(tmp_path: Path) -> None:
    (tmp_path / "live.sql").write_text(
        "CREATE MATERIALIZED TABLE live.clicks WITH ('start-date' = '2024-05-06')\n"
        "FRESHNESS = INTERVAL '5' MINUTE AS SELECT id FROM raw.clicks")
    dag = build_dags(tmp_path, {})["mt__live__clicks"]
    assert dag.start_date.date().isoformat() == "2024-05-06"


def test_a_new_table_waits_for_its_next_slot_instead_of_running_the_one_just_passed(tmp_path: Path) -> None:
    # Every minute: the slot that just passed is always within Airflow's default catch-up window
    # (5 min), so without the factory's choice the table refreshed on its own right after CREATE.
    from airflow.utils import timezone

    (tmp_path / "t.sql").write_text(
        "CREATE MATERIALIZED TABLE db.t FRESHNESS = INTERVAL '1' MINUTE REFRESH_MODE = FULL\n"
        "AS SELECT id FROM raw.t")
    dag = build_dags(tmp_path, {})["mt__db__t"]
    assert dag.start_date is None
    timetable = dag.timetable
    if not hasattr(timetable, "next_dagrun_info"):  # the Task SDK's (Airflow 3.1+): the scheduler runs core's
        from airflow.serialization.decoders import decode_timetable
        from airflow.serialization.encoders import encode_timetable

        timetable = decode_timetable(encode_timetable(timetable))
    before = timezone.utcnow()
    restriction = TimeRestriction(earliest=None, latest=None, catchup=False)
    info = timetable.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
    assert info is not None and info.run_after > before, (info, before)
