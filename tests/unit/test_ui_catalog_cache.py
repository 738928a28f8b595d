"""The page's cache of metastore reads and its change tokens (``ui.catalog_cache``, ``ui.sources``)."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_staged.airflow.ui.catalog_cache import ChangeTokenCache, change_token, settled
from airflow_provider_staged.airflow.ui.rows import DagFacts, RunFacts, TableEntry
from airflow_provider_staged.airflow.ui.sources import CatalogReads, read_state_file
from airflow_provider_staged.materialized.catalog_status import (
    REFRESH_STATUS_KEY,
    state_path,
    write_text_atomically,
)
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.staging.identifiers import TableIdentifier

WHEN = datetime(2024, 1, 3, 12, 0, tzinfo=timezone.utc)
ACTIVE = DagFacts("mt__db__t", False, "0 * * * *", None)
PAUSED = DagFacts("mt__db__t", True, "0 * * * *", None)
DONE = RunFacts("manual__1", "success", WHEN, WHEN)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fetch:
    """A batched read that records which keys each call asked for; ``None`` values do not exist."""

    def __init__(self, values: dict[str, str | None]) -> None:
        self.values = values
        self.calls: list[list[str]] = []

    def __call__(self, keys: list[str]) -> dict[str, str]:
        self.calls.append(sorted(keys))
        return {key: value for key in keys if (value := self.values.get(key)) is not None}


def always(_key: str, _value: str | None) -> bool:
    return True


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def jobs() -> list:
    return []


@pytest.fixture
def cache(clock: Clock, jobs: list) -> ChangeTokenCache[str, str]:
    # Background re-reads are collected, for each test to run when it chooses.
    return ChangeTokenCache(max_age=60, clock=clock, stale_limit=600, spawn=jobs.append)


def test_unchanged_tokens_read_nothing_and_a_changed_one_only_its_table(cache: ChangeTokenCache) -> None:
    fetch = Fetch({"a": "A1", "b": "B1", "c": None})
    tokens: dict[str, Hashable] = {"a": 1, "b": 1, "c": 1}
    first = cache.read(tokens, fetch, always)
    assert (first.values, first.reread, first.cached) == ({"a": "A1", "b": "B1"}, 3, 0)
    again = cache.read(tokens, fetch, always)
    assert (again.values, again.reread, again.cached) == ({"a": "A1", "b": "B1"}, 0, 3)
    assert fetch.calls == [["a", "b", "c"]]  # a missing table is remembered as missing too

    fetch.values.update(b="B2", c="C1")
    changed = cache.read({"a": 1, "b": 2, "c": 2}, fetch, always)
    assert changed.values == {"a": "A1", "b": "B2", "c": "C1"} and changed.reread == 2
    assert fetch.calls[-1] == ["b", "c"]


def test_entries_older_than_max_age_are_served_and_read_again_in_the_background(
    cache: ChangeTokenCache, clock: Clock, jobs: list
) -> None:
    fetch = Fetch({"a": "A1", "b": "B1"})
    cache.read({"a": 1, "b": 1}, fetch, always)
    clock.now += 59.9
    assert cache.read({"a": 1, "b": 1}, fetch, always).reread == 0 and jobs == []
    fetch.values.update(a="A2", b="B2")  # written behind the tokens' back (e.g. by hand in Spark)
    clock.now += 0.1
    served = cache.read({"a": 1, "b": 1}, fetch, always)
    assert (served.values, served.reread, served.revalidating) == ({"a": "A1", "b": "B1"}, 0, 2)
    assert cache.read({"a": 1, "b": 1}, fetch, always).revalidating == 0  # one re-read at a time
    assert len(jobs) == 1 and len(fetch.calls) == 1
    jobs.pop()()
    assert fetch.calls[-1] == ["a", "b"]
    again = cache.read({"a": 1, "b": 1}, fetch, always)
    assert (again.values, again.reread, again.revalidating) == ({"a": "A2", "b": "B2"}, 0, 0)


def test_a_background_read_never_overwrites_a_newer_entry(cache: ChangeTokenCache, clock: Clock,
                                                          jobs: list) -> None:
    fetch = Fetch({"a": "A1"})
    cache.read({"a": 1}, fetch, always)
    clock.now += 61
    cache.read({"a": 1}, fetch, always)  # hands "a" to a background re-read
    fetch.values["a"] = "A2"
    assert cache.read({"a": 2}, fetch, always).values == {"a": "A2"}  # token moved: read at once
    fetch.values["a"] = "A-old"  # what the late background read gets
    jobs.pop()()
    assert cache.read({"a": 2}, fetch, always).values == {"a": "A2"}


def test_entries_older_than_the_stale_limit_are_read_before_the_answer(
    cache: ChangeTokenCache, clock: Clock, jobs: list
) -> None:
    fetch = Fetch({"a": "A1"})
    cache.read({"a": 1}, fetch, always)
    fetch.values["a"] = "A2"
    clock.now += 600
    assert cache.read({"a": 1}, fetch, always).values == {"a": "A2"} and jobs == []


def test_a_failed_background_read_keeps_the_entries_and_is_retried(
    cache: ChangeTokenCache, clock: Clock, jobs: list
) -> None:
    fetch = Fetch({"a": "A1"})
    cache.read({"a": 1}, fetch, always)
    clock.now += 61

    def broken(keys: list[str]) -> dict[str, str]:
        raise ConnectionError("metastore down")

    assert cache.read({"a": 1}, broken, always).values == {"a": "A1"}
    jobs.pop()()  # logged, not raised: no request is waiting for it
    assert cache.read({"a": 1}, fetch, always).revalidating == 1  # the next request tries again


def test_untrusted_entries_are_read_at_every_request(cache: ChangeTokenCache) -> None:
    fetch = Fetch({"a": "A1", "b": "B1"})
    cache.read({"a": 1, "b": 1}, fetch, always)
    for _ in range(2):
        cache.read({"a": 1, "b": 1}, fetch, lambda key, value: key != "b")
    assert fetch.calls[1:] == [["b"], ["b"]]


def test_forgotten_keys_and_a_failed_read(cache: ChangeTokenCache) -> None:
    fetch = Fetch({"a": "A1", "b": "B1"})
    cache.read({"a": 1, "b": 1}, fetch, always)
    cache.read({"a": 1}, fetch, always)  # b's definition was dropped
    assert cache.read({"a": 1, "b": 1}, fetch, always).reread == 1  # re-created: read again

    def broken(keys: list[str]) -> dict[str, str]:
        raise ConnectionError("metastore down")

    with pytest.raises(ConnectionError):
        cache.read({"a": 2, "b": 1}, broken, always)
    fetch.values["a"] = "A2"
    result = cache.read({"a": 2, "b": 1}, fetch, always)  # the failed read stored nothing
    assert result.values == {"a": "A2", "b": "B1"} and fetch.calls[-1] == ["a"]


def test_concurrent_requests_share_one_read(cache: ChangeTokenCache) -> None:
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow(keys: list[str]) -> dict[str, str]:
        calls.append(sorted(keys))
        started.set()
        release.wait(10)
        return dict.fromkeys(keys, "v")

    results = []
    first = threading.Thread(target=lambda: results.append(cache.read({"a": 1, "b": 1}, slow, always)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: results.append(cache.read({"a": 1, "b": 1}, slow, always)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert calls == [["a", "b"]]
    assert sorted((r.reread, r.cached) for r in results) == [(0, 2), (2, 0)]


def token(**changes: object) -> Hashable:
    parts: dict[str, object] = {"metastore_uri": "thrift://h:1", "definition": (1, 10, 100),
                                "state_file": None, "dag": ACTIVE, "run": DONE}
    parts.update(changes)
    return change_token(**parts)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"metastore_uri": "thrift://h:2"},
        {"definition": (2, 10, 100)},  # create/drop/alter: the definition file is replaced
        {"state_file": (3, 5, 40)},  # a status moved between state file and table
        {"dag": PAUSED},  # suspend or resume
        {"dag": None},
        {"run": RunFacts("manual__2", "queued", WHEN, None)},  # a new run
        {"run": RunFacts("manual__1", "failed", WHEN, WHEN)},  # the run ended otherwise
        {"run": RunFacts("manual__1", "success", WHEN, datetime(2024, 1, 3, 13, tzinfo=timezone.utc))},
        {"run": None},
    ],
)
def test_every_fact_is_part_of_the_token(changes: dict[str, object]) -> None:
    assert token(**changes) != token()
    assert token() == token(run=RunFacts("manual__1", "success", None, WHEN))  # run_after: not a change


@pytest.mark.parametrize(
    ("dag", "run", "stored", "trusted"),
    [
        (ACTIVE, DONE, "ACTIVATED", True),
        (PAUSED, DONE, "SUSPENDED", True),
        (ACTIVE, None, None, True),  # no table (or no status in it): the state file is read each time
        (None, None, "ACTIVATED", True),  # no DAG yet: its appearance changes the token
        (PAUSED, DONE, "ACTIVATED", False),  # paused, SUSPENDED not written yet (or paused by hand)
        (ACTIVE, DONE, "SUSPENDED", False),  # unpaused, ACTIVATED not written yet
        (ACTIVE, RunFacts("r", "running", WHEN, None), "ACTIVATED", False),  # its task may commit now
        (ACTIVE, RunFacts("r", "queued", WHEN, None), "ACTIVATED", False),
    ],
)
def test_settled(dag: DagFacts | None, run: RunFacts | None, stored: str | None, trusted: bool) -> None:
    assert settled(dag, run, stored) is trusted


def test_state_file_rewrite_changes_its_key(tmp_path: Path) -> None:
    definition = tmp_path / "db__t.sql"
    assert read_state_file(definition).key is None
    write_text_atomically(state_path(definition), '{"refresh_status": "SUSPENDED"}')
    first = read_state_file(definition)
    assert first.state == {"refresh_status": "SUSPENDED"} and first.key is not None
    write_text_atomically(state_path(definition), '{"refresh_status": "SUSPENDED"}')  # same bytes
    assert read_state_file(definition).key != first.key
    state_path(definition).write_text("[1]")
    broken = read_state_file(definition)
    assert broken.error is not None and "expected a JSON object" in broken.error


class FakeReads(CatalogReads):
    """CatalogReads whose batched read answers from a dict (no metastore: pure cache logic)."""

    def __init__(self, params: dict[TableIdentifier, dict[str, str]], cache: ChangeTokenCache) -> None:
        super().__init__("thrift://h:1", cache=cache)
        self.params = params
        self.asked: list[list[str]] = []

    def tables(self, identifiers):  # type: ignore[no-untyped-def, override]
        names = sorted(i.name for i in identifiers)
        self.asked.append(names)
        self.calls += 1
        return {i: SimpleNamespace(parameters=dict(self.params[i])) for i in identifiers if i in self.params}


def test_cached_tables_reread_a_table_until_its_status_matches_the_pause(tmp_path: Path) -> None:
    text = "CREATE MATERIALIZED TABLE db.t\nFRESHNESS = INTERVAL '1' HOUR\nAS SELECT 1 AS x;\n"
    entry = TableEntry(TableIdentifier("db", "t"), tmp_path / "db__t.sql",
                       parse_definition(text, "db__t.sql"), (1, 1, 1))
    states = {entry.identifier: read_state_file(entry.path)}
    stored = {entry.identifier: {REFRESH_STATUS_KEY: "ACTIVATED"}}
    cache: ChangeTokenCache = ChangeTokenCache()
    runs = {"mt__db__t": DONE}

    def read(dag: DagFacts) -> tuple[str, int]:
        reads = FakeReads(stored, cache)
        tables = reads.cached_tables([entry], states, {"mt__db__t": dag}, runs)
        return tables[entry.identifier].parameters[REFRESH_STATUS_KEY], reads.reread

    assert read(ACTIVE) == ("ACTIVATED", 1)
    assert read(ACTIVE) == ("ACTIVATED", 0)
    # SUSPEND: the DAG is paused first, the status written after: read until it is.
    assert read(PAUSED) == ("ACTIVATED", 1)
    assert read(PAUSED) == ("ACTIVATED", 1)
    stored[entry.identifier] = {REFRESH_STATUS_KEY: "SUSPENDED"}
    assert read(PAUSED) == ("SUSPENDED", 1)
    assert read(PAUSED) == ("SUSPENDED", 0)
