"""The ``staged_hive`` connection on Airflow 3.3: its form, its fields, its test.

Airflow's own CLI lists what the provider declares; the hook's ``test_connection`` runs against
the session's real metastore; and in headless Chromium a person adds a connection through
Airflow's form, filling the provider's typed fields, and presses Test in the connections list
(Airflow 3.3 has the button there), which runs the test in the real api-server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
from airflow_provider_staged.discovery.embedded import AirflowInfo, MetastoreInfo
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.local.processes import free_port
from airflow_provider_staged.staging.settings import KNOWN_EXTRAS
from tests.fixtures.airflow_cli import AirflowCli
from tests.fixtures.browser import log_in, screenshot, type_like_a_person, wait_for

FORM_CONN_ID = "staged_form"
DEAD_CONN_ID = "staged_form_dead"


def use_connection(
    monkeypatch: pytest.MonkeyPatch, conn_id: str, port: int, **extra: object
) -> StagedTableHook:
    conn = {"conn_type": "staged_hive", "host": "127.0.0.1", "port": port, "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return StagedTableHook(conn_id)


# -- what Airflow reads from the provider --------------------------------------------------------


def test_airflow_lists_the_connection_type_with_its_fields(airflow_cli: AirflowCli) -> None:
    behaviours = airflow_cli.run("providers", "behaviours", "--output", "json")
    assert behaviours.returncode == 0, behaviours.stderr[-3000:]
    assert {"field_behaviours": "staged_hive"} in json.loads(behaviours.stdout)

    widgets = airflow_cli.run("providers", "widgets", "--output", "json")
    assert widgets.returncode == 0, widgets.stderr[-3000:]
    fields = {
        widget["connection_parameter_name"].removeprefix("extra__staged_hive__"): widget["field_type"]
        for widget in json.loads(widgets.stdout)
        if widget["connection_parameter_name"].startswith("extra__staged_hive__")
    }
    assert set(fields) == KNOWN_EXTRAS
    assert fields["keep_versions"] == ["integer", "null"] and fields["atomic"] == ["boolean", "null"]

    # The [staged] options the code reads, with their defaults.
    for option, default in (("refresh_engine", "embedded"), ("atomicity_enabled", "True")):
        value = airflow_cli.run("config", "get-value", "staged", option)
        assert (value.returncode, value.stdout.strip()) == (0, default), value.stderr[-3000:]


# -- the hook's test, against the real metastore --------------------------------------------------


def test_connection_test_answers_true_for_the_metastore(
    monkeypatch: pytest.MonkeyPatch, metastore: MetastoreInfo, tmp_path: Path
) -> None:
    hook = use_connection(
        monkeypatch,
        "staged_ok",
        metastore.port,
        warehouse=metastore.warehouse,
        journal_dir=str(tmp_path / "journal"),
    )
    ok, message = hook.test_connection()
    assert ok, message
    assert f"Hive Metastore at thrift://127.0.0.1:{metastore.port} answered" in message
    assert not (tmp_path / "journal").exists()  # probed in its parent: the test creates nothing


def test_connection_test_names_an_unreachable_metastore(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens there
    ok, message = use_connection(monkeypatch, "staged_dead", port, warehouse=str(tmp_path)).test_connection()
    assert not ok
    assert message.startswith(f"cannot reach the Hive Metastore at thrift://127.0.0.1:{port}:"), message


def test_connection_test_refuses_a_warehouse_it_cannot_write(
    monkeypatch: pytest.MonkeyPatch, metastore: MetastoreInfo, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # even root cannot create a directory below a file
    warehouse = f"file:{blocker}/warehouse"
    hook = use_connection(monkeypatch, "staged_nowrite", metastore.port, warehouse=warehouse)
    ok, message = hook.test_connection()
    assert not ok
    assert message.startswith(f"warehouse {warehouse} is not writable from this Airflow process:"), message


def test_connection_test_names_a_bad_extra(monkeypatch: pytest.MonkeyPatch, metastore: MetastoreInfo) -> None:
    ok, message = use_connection(
        monkeypatch, "staged_bad", metastore.port, keep_versions="two"
    ).test_connection()
    assert (ok, message) == (False, "invalid connection extra keep_versions='two': expected a number")


# -- the form and its Test button, in a browser ---------------------------------------------------


def click(driver: webdriver.Chrome, find: Callable[[webdriver.Chrome], WebElement]) -> None:
    """Click what ``find`` finds once it is there; the UI re-renders lists while they load."""

    def clicked(d: webdriver.Chrome) -> bool:
        find(d).click()
        return True

    WebDriverWait(
        driver, 60, ignored_exceptions=(StaleElementReferenceException, IndexError, ValueError)
    ).until(clicked)


def button(scope: webdriver.Chrome | WebElement, text: str) -> WebElement:
    (found,) = [b for b in scope.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == text]
    return found


def field(dialog: WebElement, label: str) -> WebElement:
    """The input of the form field labelled ``label``."""
    (found,) = [
        item
        for item in dialog.find_elements(By.CSS_SELECTOR, "label[data-part='label']")
        if item.text.strip().rstrip("*").strip() == label
    ]
    return found.find_element(By.XPATH, "ancestor::*[@data-part='root'][1]").find_element(
        By.CSS_SELECTOR, "input"
    )


def press_test(driver: webdriver.Chrome, conn_id: str) -> tuple[str, str]:
    """Press Test in ``conn_id``'s row: the toast's (title, message), read while it shows (2 s)."""

    def row(d: webdriver.Chrome) -> WebElement:
        (found,) = [
            r
            for r in d.find_elements(By.CSS_SELECTOR, "tbody tr")
            if conn_id in (cell.text.strip() for cell in r.find_elements(By.CSS_SELECTOR, "td"))
        ]
        return found.find_element(By.CSS_SELECTOR, "button[aria-label='Test Connection']")

    click(driver, row)

    def toast(d: webdriver.Chrome) -> tuple[str, str] | None:
        for root in d.find_elements(By.CSS_SELECTOR, "[data-scope='toast'][data-part='root']"):
            parts = [
                root.find_element(By.CSS_SELECTOR, f"[data-part='{part}']").get_attribute("textContent")
                for part in ("title", "description")
            ]
            if parts[0].startswith("Test Connection"):
                return parts[0], parts[1]
        return None

    return WebDriverWait(
        driver, 60, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    ).until(toast)


@pytest.fixture
def admin_api(airflow_server: AirflowInfo) -> Iterator[httpx.Client]:
    """REST API v2 as the admin; the connections this test makes are deleted after it."""
    with httpx.Client(
        base_url=airflow_server.endpoint + "/api/v2",
        timeout=120,
        headers={"Authorization": f"Bearer {api_token(airflow_server)}"},
    ) as api:
        yield api
        for conn_id in (FORM_CONN_ID, DEAD_CONN_ID):
            api.delete(f"/connections/{conn_id}")


@pytest.mark.slow
def test_the_connection_form_fills_typed_fields_and_tests_them(
    airflow_server: AirflowInfo,
    metastore: MetastoreInfo,
    admin_api: httpx.Client,
    browser: webdriver.Chrome,
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal"
    log_in(browser, airflow_server.endpoint, *airflow_server.credentials("admin"))
    browser.get(f"{airflow_server.endpoint}/connections")
    click(browser, lambda d: button(d, "Add Connection"))
    dialog = wait_for(browser, "div[role='dialog']")
    type_like_a_person(wait_for(browser, "input[name='connection_id']"), FORM_CONN_ID, delay=0.02)
    kind = dialog.find_element(By.CSS_SELECTOR, "input[role='combobox']")
    type_like_a_person(kind, "Staged tables", delay=0.05)
    kind.send_keys(Keys.ENTER)

    # The standard fields the metastore needs, relabelled; login, password and schema hidden.
    wait_for(browser, "input[name='host']")
    labels = dialog.text
    assert "Metastore host" in labels and "Metastore Thrift port" in labels, labels
    assert not dialog.find_elements(By.CSS_SELECTOR, "input[name='login'], input[name='password']")
    type_like_a_person(field(dialog, "Metastore host"), "127.0.0.1", delay=0.02)
    type_like_a_person(field(dialog, "Metastore Thrift port"), str(metastore.port), delay=0.02)

    # The extras as typed fields: text, numbers (blank ones stay the defaults), a switch.
    click(browser, lambda _: button(dialog, "Extra Fields"))
    type_like_a_person(field(dialog, "Warehouse"), metastore.warehouse, delay=0.02)
    type_like_a_person(field(dialog, "Journal directory"), str(journal), delay=0.02)
    type_like_a_person(field(dialog, "Versions kept"), "3")
    type_like_a_person(field(dialog, "Version grace (minutes)"), "30")
    assert field(dialog, "Atomic builds").is_selected()  # on unless switched off
    for label in ("Maximum version age (hours)", "Attempt TTL (minutes)", "Spark configuration"):
        assert label in dialog.text, label
    screenshot(browser, "connection_form_filled")
    click(browser, lambda _: button(dialog, "Save"))

    WebDriverWait(browser, 60).until(
        lambda _: admin_api.get(f"/connections/{FORM_CONN_ID}").status_code == 200
    )
    saved = admin_api.get(f"/connections/{FORM_CONN_ID}").json()
    assert (saved["conn_type"], saved["host"], saved["port"]) == ("staged_hive", "127.0.0.1", metastore.port)
    extra = json.loads(saved["extra"])
    assert extra["keep_versions"] == 3 and extra["version_grace_minutes"] == 30 and extra["atomic"] is True
    assert (extra["warehouse"], extra["journal_dir"]) == (metastore.warehouse, str(journal))

    title, message = press_test(browser, FORM_CONN_ID)
    screenshot(browser, "connection_form_tested")
    assert title == "Test Connection Successful", message
    assert f"Hive Metastore at thrift://127.0.0.1:{metastore.port} answered" in message

    # A metastore that is not there: the answer names where the test looked.
    dead_port = free_port()
    created = admin_api.post(
        "/connections",
        json={
            "connection_id": DEAD_CONN_ID,
            "conn_type": "staged_hive",
            "host": "127.0.0.1",
            "port": dead_port,
            "extra": json.dumps({"warehouse": metastore.warehouse}),
        },
    )
    assert created.status_code == 201, created.text
    browser.refresh()
    title, message = press_test(browser, DEAD_CONN_ID)
    screenshot(browser, "connection_form_tested_dead")
    assert title == "Test Connection Failed", message
    assert f"cannot reach the Hive Metastore at thrift://127.0.0.1:{dead_port}" in message
