"""The pure row assembly of the Materialized tables page (``airflow_provider_staged.airflow.ui.rows``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_provider_staged.airflow.ui.rows import (
    DagFacts,
    RefreshFacts,
    TableEntry,
    note_inputs,
    page_row,
    refresh_from_event,
    refresh_from_table,
)
from airflow_provider_staged.materialized.catalog_status import CatalogStatus
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.failure_streak import FailureStreak
from airflow_provider_staged.materialized.graph import TableGraph
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


def _entry(text: str) -> TableEntry:
    definition = parse_definition(text, "x.sql")
    path = Path(f"/defs/{definition.identifier}.sql")
    return TableEntry(definition.identifier, path, definition, (1, 0, 0))


def test_rows_carry_their_upstream_and_a_suspended_one_shows_on_its_dependents() -> None:
    day = "FRESHNESS = INTERVAL '1' DAY AS SELECT"
    up = _entry(f"CREATE MATERIALIZED TABLE db.up {day} n FROM src")
    down = _entry("CREATE MATERIALIZED TABLE db.down FRESHNESS = DOWNSTREAM AS SELECT n FROM db.up")
    # Names db.up in a string and a comment only: it reads src, not the suspended table.
    aside = _entry(f"CREATE MATERIALIZED TABLE db.aside {day} 'db.up' AS n FROM src -- not db.up")
    other = _entry(f"CREATE MATERIALIZED TABLE db.other {day} n FROM db.down")
    hidden = _entry(f"CREATE MATERIALIZED TABLE db.hidden {day} n FROM db.up")  # a row the user cannot see
    entries = [up, down, aside, other, hidden]
    suspended = status(RefreshStatus.SUSPENDED, "SUSPENDED_DUE_TO_ERRORS", 5)
    rows = [page_row(entry, suspended if entry is up else status(RefreshStatus.ACTIVATED), True,
                     DagFacts(f"mt__{entry.identifier.table}", entry is up, None, None),
                     None, None, True, NOW) for entry in entries if entry is not hidden]
    note_inputs(rows, TableGraph.from_definitions(entry.definition for entry in entries))
    by_table = {row["table"]: row for row in rows}
    assert {table: row["upstream"] for table, row in by_table.items()} == {
        "db.up": [], "db.down": ["db.up"], "db.aside": [], "db.other": ["db.down"]}
    assert by_table["db.down"]["suspended_inputs"] == ["db.up"]
    assert by_table["db.down"]["reason"] == "its input db.up is suspended: no new data from it until resumed"
    # Direct inputs only; the suspended table's own reason stays its own.
    for table in ("db.aside", "db.other"):
        assert (by_table[table]["suspended_inputs"], by_table[table]["reason"]) == ([], None)
    assert by_table["db.up"]["reason"].startswith("SUSPENDED_DUE_TO_ERRORS after 5")
