"""The pure row assembly of the Materialized tables page (``airflow_provider_staged.airflow.ui.rows``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_provider_staged.airflow.ui.rows import (
    DagFacts,
    RefreshFacts,
    TableEntry,
    page_row,
    refresh_from_event,
    refresh_from_table,
)
from airflow_provider_staged.materialized.catalog_status import CatalogStatus
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.failure_streak import FailureStreak
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus

NOW = datetime(2024, 1, 3, 12, 0, tzinfo=timezone.utc)
DEFINITION = parse_definition("""CREATE MATERIALIZED TABLE db.t
PARTITIONED BY (ds, hh)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' HOUR
AS SELECT ds, hh, count(*) AS n FROM src GROUP BY ds, hh;
""", "db__t.sql")
ENTRY = TableEntry(DEFINITION.identifier, Path("/defs/db__t.sql"), DEFINITION, (1, 0, 0))
ACTIVE = DagFacts("mt__db__t", False, "0 * * * *", NOW + timedelta(minutes=30))


def status(refresh: RefreshStatus | None, reason: str | None = None, failures: int = 0) -> CatalogStatus:
    return CatalogStatus(refresh, None, None, "table", {}, {}, reason, FailureStreak(failures, "boom"))


def row(catalog: CatalogStatus, dag: DagFacts | None = ACTIVE, refresh: RefreshFacts | None = None,
        can_edit: bool = True) -> dict:
    return page_row(ENTRY, catalog, True, dag, None, refresh, can_edit, NOW)


@pytest.mark.parametrize(
    ("catalog", "dag", "shown", "reason"),
    [
        (status(RefreshStatus.ACTIVATED), ACTIVE, "ACTIVATED", None),
        (status(None), ACTIVE, "ACTIVATED", None),  # a definition dropped in by hand
        (status(RefreshStatus.SUSPENDED), DagFacts("mt__db__t", True, None, None), "SUSPENDED",
         "suspended by a user"),
        (status(RefreshStatus.SUSPENDED, "SUSPENDED_DUE_TO_ERRORS", 3), ACTIVE, "SUSPENDED",
         "SUSPENDED_DUE_TO_ERRORS after 3 consecutive failed scheduled refreshes; last: boom"),
        (status(RefreshStatus.ACTIVATED), DagFacts("mt__db__t", True, None, None), "SUSPENDED",
         "the DAG is paused in Airflow"),
        (status(RefreshStatus.ACTIVATED), None, "NO DAG", "Airflow has not parsed"),
    ],
)
def test_status_and_reason(
    catalog: CatalogStatus, dag: DagFacts | None, shown: str, reason: str | None
) -> None:
    result = row(catalog, dag)
    assert result["status"] == shown
    if reason is None:
        assert result["reason"] is None
    else:
        assert reason in result["reason"]


def test_lag_against_freshness_and_next_run_only_when_active() -> None:
    half_hour_ago = RefreshFacts(NOW - timedelta(minutes=30), {}, 5, "v1")
    fresh = row(status(RefreshStatus.ACTIVATED), refresh=half_hour_ago)
    assert (fresh["lag_seconds"], fresh["late"]) == (1800, False)
    assert fresh["next_run"] == "2024-01-03T12:30:00+00:00"
    late = row(status(RefreshStatus.ACTIVATED), refresh=RefreshFacts(NOW - timedelta(hours=2), {}, 5, "v1"))
    assert (late["lag_seconds"], late["late"]) == (7200, True)
    paused = row(status(RefreshStatus.SUSPENDED), DagFacts("mt__db__t", True, "0 * * * *", NOW))
    assert paused["next_run"] is None and paused["lag_seconds"] is None and paused["late"] is False


def test_lag_of_a_partition_refresh_is_since_the_end_of_its_period() -> None:
    # Daily partitions refreshed hourly: today's is the current period (lag 0, however old the
    # commit); yesterday's ended at midnight, 12 hours ago, longer than the hour promised.
    today = row(status(RefreshStatus.ACTIVATED),
                refresh=RefreshFacts(NOW - timedelta(hours=2), {"ds": "2024-01-03", "hh": "9"}, 5, "v1"))
    assert (today["lag_seconds"], today["late"]) == (0, False)
    yesterday = row(status(RefreshStatus.ACTIVATED),
                    refresh=RefreshFacts(NOW - timedelta(minutes=1), {"ds": "2024-01-02"}, 5, "v1"))
    assert (yesterday["lag_seconds"], yesterday["late"]) == (12 * 3600, True)


def test_partition_inputs_show_the_formatter_example_and_edit_needs_a_dag() -> None:
    result = row(status(RefreshStatus.ACTIVATED))
    assert result["partition_columns"] == [{"name": "ds", "example": "2024-01-02"},
                                           {"name": "hh", "example": None}]
    assert result["can_edit"] is True
    assert row(status(RefreshStatus.ACTIVATED), dag=None)["can_edit"] is False
    assert row(status(RefreshStatus.ACTIVATED), can_edit=False)["can_edit"] is False


def test_last_refresh_from_asset_event_or_table_parameters() -> None:
    event = refresh_from_event({"version": "a1", "rows": 7, "partitions": {"ds": "2024-01-02"}}, NOW)
    assert event == RefreshFacts(NOW, {"ds": "2024-01-02"}, 7, "a1")
    assert refresh_from_event({"rows": "7"}, NOW).rows is None  # only what the refresh recorded
    table = refresh_from_table({"staged.committed_at": str(int(NOW.timestamp())), "staged.rows": "9",
                                "staged.version": "a2"})
    assert table == RefreshFacts(NOW, {}, 9, "a2")
    assert refresh_from_table({"EXTERNAL": "TRUE"}) is None and refresh_from_table(None) is None
