"""The "Materialized tables" page: its data endpoint, its actions and the page in a real browser.

Against the session's real Airflow (the plugin is loaded by the api-server through the
``airflow.plugins`` entry point), the real metastore and headless Chromium. The tables start
in 2099 (``start-date``), so resuming one never starts an unasked-for scheduled run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.discovery.embedded import AirflowInfo
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.materialized.catalog_status import CatalogStatusStore
from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.workflow.airflow_scheduler import AirflowRefreshHandler
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.materialized.workflow.scheduler import RefreshStatus, create_workflow_scheduler
from airflow_provider_staged.staging.identifiers import TableIdentifier
from tests.fixtures.browser import log_in, screenshot, type_like_a_person, wait_for

pytestmark = pytest.mark.slow

PAGE = "/materialized-tables"
HTTP_TIMEOUT = 180
PARTITIONED = TableIdentifier("ui", "orders_daily")
WHOLE = TableIdentifier("ui", "order_totals")
BAD_VALUE = "2024-01-03'; DROP"
DEFINITIONS = {
    PARTITIONED: """CREATE MATERIALIZED TABLE ui.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'start-date' = '2099-01-01')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders
FROM VALUES ('2024-01-01'), ('2024-01-02'), ('2024-01-02') AS src(ds) GROUP BY ds;
""",
    WHOLE: """CREATE MATERIALIZED TABLE ui.order_totals
WITH ('start-date' = '2099-01-01')
FRESHNESS = INTERVAL '1' HOUR
AS SELECT count(*) AS orders FROM VALUES (1), (2) AS src(x);
""",
}


def client_as(server: AirflowInfo, user: str) -> httpx.Client:
    return httpx.Client(base_url=server.endpoint, timeout=HTTP_TIMEOUT,
                        headers={"Authorization": f"Bearer {api_token(server, user)}"})


@pytest.fixture(scope="module")
def admin(airflow_server: AirflowInfo) -> Iterator[httpx.Client]:
    with client_as(airflow_server, "admin") as client:
        yield client


@pytest.fixture(scope="module")
def viewer(airflow_server: AirflowInfo) -> Iterator[httpx.Client]:
    with client_as(airflow_server, "viewer") as client:
        yield client


@pytest.fixture(scope="module")
def ui_tables(airflow_server: AirflowInfo, definitions_dir: Path, metastore) -> Iterator[MaterializedTables]:
    """Two materialized tables created through the workflow scheduler, dropped at the end."""
    user, password = airflow_server.credentials("admin")
    config = {
        "workflow-scheduler.type": "airflow",
        "workflow-scheduler.airflow.endpoint": airflow_server.endpoint,
        "workflow-scheduler.airflow.definitions-dir": str(definitions_dir),
        "workflow-scheduler.airflow.username": user,
        "workflow-scheduler.airflow.password": password,
        "workflow-scheduler.airflow.parse-timeout": "120",
    }
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database("ui", metastore.warehouse)
    with create_workflow_scheduler(config) as scheduler:
        tables = MaterializedTables(scheduler, metastore.uri)
        for text in DEFINITIONS.values():
            tables.create(text)
        yield tables
        # Both at once: one parse makes both DAGs stale (dropped one by one, each waits for its own).
        tables.scheduler.delete_refresh_workflows(
            [AirflowRefreshHandler(dag_id_for(table), airflow_server.endpoint) for table in DEFINITIONS])


def rows(client: httpx.Client) -> dict[str, dict[str, Any]]:
    data = client.get(f"{PAGE}/api/tables").raise_for_status().json()
    return {row["table"]: row for row in data["tables"]}


def dag_state(admin: httpx.Client, identifier: TableIdentifier) -> tuple[bool, int]:
    """(is_paused, number of runs) of the table's DAG, read through Airflow's own REST API."""
    dag_id = f"mt__{identifier.database}__{identifier.table}"
    dag = admin.get(f"/api/v2/dags/{dag_id}").raise_for_status().json()
    runs = admin.get(f"/api/v2/dags/{dag_id}/dagRuns").raise_for_status().json()
    return dag["is_paused"], runs["total_entries"]


def catalog_status(tables: MaterializedTables, identifier: TableIdentifier) -> RefreshStatus | None:
    path = tables.scheduler.definition_path_for(identifier)
    return CatalogStatusStore(tables.metastore_uri).load(identifier, path).refresh_status


def post(client: httpx.Client, identifier: TableIdentifier, action: str, body: Any = None) -> httpx.Response:
    return client.post(f"{PAGE}/api/tables/{identifier.name}/{action}", json=body or {})


# -- the data endpoint and the actions, over HTTP --------------------------------------------


def test_endpoint_lists_every_table_in_batched_reads(
    ui_tables: MaterializedTables, admin: httpx.Client
) -> None:
    data = admin.get(f"{PAGE}/api/tables").raise_for_status().json()
    by_table = {row["table"]: row for row in data["tables"]}
    row = by_table[PARTITIONED.name]
    assert row["dag_id"] == "mt__ui__orders_daily"
    assert (row["freshness"], row["refresh_mode"], row["schedule"]) == (
        "INTERVAL '1' DAY", "FULL", "0 0 * * *")
    assert row["status"] == "ACTIVATED" and row["reason"] is None
    assert row["next_run"].startswith("2099-01-0")  # nothing before its start date
    assert row["partition_columns"] == [{"name": "ds", "example": "2024-01-02"}]
    assert row["can_edit"] is True and row["last_refresh"] is None and row["lag_seconds"] is None
    whole = by_table[WHOLE.name]
    assert (whole["freshness"], whole["schedule"], whole["partition_columns"]) == (
        "INTERVAL '1' HOUR", "0 * * * *", [])
    # One metastore call for the one database of the tables (plus none per table), three
    # metadatabase queries, whatever the number of tables.
    databases = {name.split(".")[0] for name in by_table}
    assert data["stats"]["metastore_calls"] <= len(databases)
    assert data["stats"]["airflow_queries"] == 3
    # Nothing changed since: the same rows, the tables served from the api-server's cache.
    again = admin.get(f"{PAGE}/api/tables").raise_for_status().json()
    assert {row["table"]: row for row in again["tables"]}[PARTITIONED.name] == row
    assert again["stats"]["catalog_cached"] >= len(DEFINITIONS)


def test_page_is_in_the_ui_navigation(airflow_server: AirflowInfo, admin: httpx.Client) -> None:
    plugins = admin.get("/api/v2/plugins").raise_for_status().json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "staged_materialized_tables")
    assert ours["external_views"][0]["url_route"] == "materialized-tables"
    assert "Materialized tables" in httpx.get(airflow_server.endpoint + PAGE + "/").text
    health = admin.get("/api/v2/monitor/health").json()  # the plugin broke neither of them
    assert health["scheduler"]["status"] == health["dag_processor"]["status"] == "healthy"


def test_suspend_and_resume_through_the_workflow_scheduler(
    ui_tables: MaterializedTables, admin: httpx.Client
) -> None:
    assert rows(admin)[PARTITIONED.name]["status"] == "ACTIVATED"  # now in the page's cache
    assert post(admin, PARTITIONED, "suspend").status_code == 200
    assert dag_state(admin, PARTITIONED)[0] is True
    assert catalog_status(ui_tables, PARTITIONED) is RefreshStatus.SUSPENDED
    # The next request shows the stored status and its reason, not the cached ACTIVATED with
    # only the DAG's pause ("the DAG is paused in Airflow").
    suspended = rows(admin)[PARTITIONED.name]
    assert (suspended["status"], suspended["reason"]) == ("SUSPENDED", "suspended by a user")
    assert suspended["next_run"] is None

    assert post(admin, PARTITIONED, "resume").status_code == 200
    assert dag_state(admin, PARTITIONED)[0] is False
    assert catalog_status(ui_tables, PARTITIONED) is RefreshStatus.ACTIVATED
    resumed = rows(admin)[PARTITIONED.name]
    assert (resumed["status"], resumed["reason"]) == ("ACTIVATED", None)


def test_viewer_sees_the_tables_but_may_not_act(
    ui_tables: MaterializedTables, admin: httpx.Client, viewer: httpx.Client
) -> None:
    row = rows(viewer)[PARTITIONED.name]
    assert row["status"] == "ACTIVATED" and row["can_edit"] is False
    before = dag_state(admin, PARTITIONED)
    refresh = {"partitions": {"ds": "2024-01-02"}}
    for action, body in (("suspend", None), ("resume", None), ("refresh", refresh)):
        response = post(viewer, PARTITIONED, action, body)
        assert response.status_code == 403, response.text
        assert "viewer" in response.json()["detail"] and "mt__ui__orders_daily" in response.json()["detail"]
    assert dag_state(admin, PARTITIONED) == before
    assert catalog_status(ui_tables, PARTITIONED) is RefreshStatus.ACTIVATED
    anonymous = httpx.post(f"{admin.base_url}{PAGE}/api/tables/{PARTITIONED.name}/suspend", json={})
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("partitions", "named"),
    [
        ({"ds": BAD_VALUE}, BAD_VALUE),
        ({"ds": "2024-13-01"}, "2024-13-01"),
        ({"region": "eu"}, "region"),
        ({}, "type a value for ds"),
    ],
)
def test_bad_partition_value_is_refused_and_changes_nothing(
    ui_tables: MaterializedTables, admin: httpx.Client, partitions: dict[str, str], named: str
) -> None:
    before = dag_state(admin, PARTITIONED)
    response = post(admin, PARTITIONED, "refresh", {"partitions": partitions})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "not triggered" in detail and named in detail
    assert dag_state(admin, PARTITIONED) == before  # no run, not paused or unpaused


def test_bad_requests_name_the_bad_value(ui_tables: MaterializedTables, admin: httpx.Client) -> None:
    unknown = post(admin, TableIdentifier("ui", "nope"), "suspend")
    assert unknown.status_code == 404 and "ui.nope" in unknown.json()["detail"]
    response = admin.post(f"{PAGE}/api/tables/a.b.c/suspend", json={})
    assert response.status_code == 400 and "'a.b.c'" in response.json()["detail"]
    form = admin.post(f"{PAGE}/api/tables/{PARTITIONED.name}/suspend", data={"x": "1"})
    assert form.status_code == 415  # a cross-site form post is not an action
    assert dag_state(admin, PARTITIONED)[0] is False


def test_refresh_of_a_partition_commits_it_and_the_page_shows_it(
    ui_tables: MaterializedTables, admin: httpx.Client, metastore
) -> None:
    assert rows(admin)[PARTITIONED.name]["table_exists"] is False  # cached: no table yet
    # Ticked "downstream" (staged mt refresh --downstream): the run conf says so.
    response = post(admin, PARTITIONED, "refresh", {"partitions": {"ds": "2024-01-02"}, "downstream": True})
    assert response.status_code == 200, response.text
    run_id = response.json()["run_id"]
    assert ui_tables.wait_for_refresh(PARTITIONED, run_id, 300) == "success"
    run = admin.get(f"/api/v2/dags/mt__ui__orders_daily/dagRuns/{run_id}").raise_for_status().json()
    assert run["conf"]["refreshDownstream"] is True
    with MetastoreClient(metastore.uri) as client:
        parts = client.partitions(PARTITIONED.database, PARTITIONED.table)
    assert [p.values for p in parts] == [["2024-01-02"]]
    row = rows(admin)[PARTITIONED.name]
    assert row["last_refresh"]["partitions"] == {"ds": "2024-01-02"}
    assert row["last_refresh"]["rows"] == 1  # one group: ds=2024-01-02, 2 orders
    assert row["last_refresh"]["version"] and row["last_refresh"]["version"] in parts[0].sd.location
    assert (row["last_run"]["run_id"], row["last_run"]["state"]) == (run_id, "success")
    # Lag per Flink's freshness: the newest committed day, 2024-01-02, ended at midnight UTC of
    # 2024-01-03, however recent its commit; a day's freshness long past, so late.
    ended = datetime(2024, 1, 3, tzinfo=timezone.utc)
    assert 0 <= (datetime.now(timezone.utc) - ended).total_seconds() - row["lag_seconds"] < 600
    assert row["late"] is True
    assert row["table_exists"] is True  # the run's end moved the table's token: read again


# -- the page in a real browser ----------------------------------------------------------------


def open_page(driver, server: AirflowInfo, user: str) -> None:
    """Log in as ``user``, open the page from the UI's own route and enter its frame."""
    log_in(driver, server.endpoint, *server.credentials(user))
    driver.get(f"{server.endpoint}/plugin/materialized-tables")
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.TAG_NAME, "iframe"))
    driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
    wait_for(driver, f"tr[data-table='{PARTITIONED.name}']")


def row_text(driver, identifier: TableIdentifier, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, f"tr[data-table='{identifier.name}'] {css}").text


def wait_for_status(driver, identifier: TableIdentifier, status: str) -> None:
    WebDriverWait(driver, 120).until(lambda d: row_text(d, identifier, ".status") == status)


def test_browser_suspend_and_resume(
    ui_tables: MaterializedTables, airflow_server: AirflowInfo, admin: httpx.Client, browser
) -> None:
    open_page(browser, airflow_server, "admin")
    links = browser.find_elements(By.CSS_SELECTOR, f"tr[data-table='{WHOLE.name}'] .links a")
    assert [(a.text, a.get_attribute("href")) for a in links] == [
        (text, f"{airflow_server.endpoint}/dags/mt__ui__order_totals{path}")
        for text, path in (("DAG", ""), ("Runs", "/runs"), ("Trigger", ""))
    ]
    screenshot(browser, "ui_page_listed")
    browser.find_element(By.CSS_SELECTOR, f"tr[data-table='{PARTITIONED.name}'] button.suspend").click()
    wait_for_status(browser, PARTITIONED, "SUSPENDED")
    assert "suspended by a user" in row_text(browser, PARTITIONED, ".reason")
    assert dag_state(admin, PARTITIONED)[0] is True
    screenshot(browser, "ui_page_suspended")
    browser.find_element(By.CSS_SELECTOR, f"tr[data-table='{PARTITIONED.name}'] button.resume").click()
    wait_for_status(browser, PARTITIONED, "ACTIVATED")
    assert dag_state(admin, PARTITIONED)[0] is False
    assert catalog_status(ui_tables, PARTITIONED) is RefreshStatus.ACTIVATED


def test_browser_bad_partition_value_shows_the_error_and_changes_nothing(
    ui_tables: MaterializedTables, airflow_server: AirflowInfo, admin: httpx.Client, browser
) -> None:
    open_page(browser, airflow_server, "admin")
    before = dag_state(admin, PARTITIONED)
    row = f"tr[data-table='{PARTITIONED.name}']"
    type_like_a_person(browser.find_element(By.CSS_SELECTOR, f"{row} input.partition[data-column='ds']"),
                       BAD_VALUE)
    browser.find_element(By.CSS_SELECTOR, f"{row} button.refresh").click()
    error = wait_for(browser, f"{row} .message.error")
    # The reason itself, in words: no HTTP status code in front of it.
    assert error.text.startswith(f"refresh of {PARTITIONED} not triggered: "), error.text
    assert BAD_VALUE in error.text
    screenshot(browser, "ui_page_bad_partition")
    time.sleep(2)  # a run, had one been triggered, would be listed by now
    assert dag_state(admin, PARTITIONED) == before


def test_browser_viewer_gets_no_buttons(
    ui_tables: MaterializedTables, airflow_server: AirflowInfo, browser
) -> None:
    open_page(browser, airflow_server, "viewer")
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-table='{PARTITIONED.name}']")
    # Reading the history is all a viewer may do.
    assert [b.text for b in row.find_elements(By.CSS_SELECTOR, "button")] == ["History"]
    assert row.find_element(By.CSS_SELECTOR, ".readonly").text == "read-only"
    screenshot(browser, "ui_page_viewer")


def test_browser_page_follows_a_refresh_live_and_lists_it_in_the_history(
    ui_tables: MaterializedTables, airflow_server: AirflowInfo, admin: httpx.Client, browser
) -> None:
    open_page(browser, airflow_server, "admin")
    before = row_text(browser, WHOLE, ".last-run")
    typed = f"tr[data-table='{PARTITIONED.name}'] input.partition[data-column='ds']"
    type_like_a_person(browser.find_element(By.CSS_SELECTOR, typed), "2024-01-0")  # mid-typing
    # Triggered elsewhere (the REST API, as the Trigger form or another person would): the page
    # must notice by itself, never reloaded here.
    response = post(admin, WHOLE, "refresh")
    assert response.status_code == 200, response.text
    run_id = response.json()["run_id"]
    assert ui_tables.wait_for_refresh(WHOLE, run_id, 300) == "success"

    def shows_the_run(driver) -> bool:
        text = row_text(driver, WHOLE, ".last-run")
        return text != before and text.startswith("success")

    WebDriverWait(browser, 30).until(shows_the_run)
    assert "1 rows" in row_text(browser, WHOLE, ".last-refresh")
    # The live updates left what the person was typing alone.
    assert browser.find_element(By.CSS_SELECTOR, typed).get_attribute("value") == "2024-01-0"
    browser.find_element(By.CSS_SELECTOR, f"tr[data-table='{WHOLE.name}'] button.history-toggle").click()
    line = wait_for(browser, f"tr.history[data-history-of='{WHOLE.name}'] tr.run[data-run-id='{run_id}']")
    cells = [cell.text for cell in line.find_elements(By.TAG_NAME, "td")]
    assert (cells[0], cells[1], cells[2], cells[5]) == (run_id, "manual", "whole table", "1"), cells
    assert cells[6].startswith("success (committed)"), cells
    screenshot(browser, "ui_page_history")
    time.sleep(6)  # one live update later the history is still open, read again
    assert browser.find_elements(By.CSS_SELECTOR, f"tr.history[data-history-of='{WHOLE.name}'] tr.run")
    assert "Airflow queries" in browser.find_element(By.ID, "stats").get_attribute("textContent")


REPORT = TableIdentifier("ui", "orders_report")


def test_browser_graph_draws_each_table_right_of_what_it_reads(
    ui_tables: MaterializedTables, airflow_server: AirflowInfo, admin: httpx.Client, definitions_dir: Path,
    browser,
) -> None:
    # Put in the folder by hand (a table reading one not refreshed yet cannot be CREATEd): the page
    # lists it from the definition, whether or not Airflow has parsed its DAG yet.
    report = definitions_dir / "ui__orders_report.sql"
    report.write_text(f"CREATE MATERIALIZED TABLE {REPORT}\nPARTITIONED BY (ds)\n"
                      f"FRESHNESS = DOWNSTREAM\nAS SELECT ds, orders FROM {PARTITIONED}")
    try:
        listed = rows(admin)
        assert listed[REPORT.name]["upstream"] == [PARTITIONED.name]
        assert listed[PARTITIONED.name]["upstream"] == [] == listed[WHOLE.name]["upstream"]
        open_page(browser, airflow_server, "admin")
        browser.find_element(By.CSS_SELECTOR, "#graph summary").click()
        edge = wait_for(browser, f"#graph path.edge[data-from='{PARTITIONED}'][data-to='{REPORT}']")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#graph path.edge")) == 1, edge
        nodes = {node.get_attribute("data-table"): node
                 for node in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
        assert set(nodes) == set(listed)

        def column(table: TableIdentifier) -> float:
            return float(nodes[table.name].get_attribute("transform").split("(")[1].split(",")[0])

        assert column(REPORT) > column(PARTITIONED) == column(WHOLE) == 0
        assert "DOWNSTREAM" in nodes[REPORT.name].text and "ACTIVATED" in nodes[PARTITIONED.name].text
        # The partition field shows its whole placeholder (the issue saw it cut).
        field = browser.find_element(By.CSS_SELECTOR, f"tr[data-table='{PARTITIONED}'] input.partition")
        fits = browser.execute_script(
            "const i = arguments[0], c = document.createElement('canvas').getContext('2d');"
            "c.font = getComputedStyle(i).font; return c.measureText(i.placeholder).width <= i.clientWidth;",
            field)
        assert fits, field.get_attribute("placeholder")
        screenshot(browser, "ui_page_graph")
    finally:
        report.unlink()
