"""The local Airflow's settings (``airflow_env``) are ones Airflow 3.3 has and reads as meant."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from airflow.configuration import conf, retrieve_configuration_description
from airflow.utils.process_utils import resolve_mp_start_method

from airflow_provider_staged.local.airflow_server import (
    SCHEDULER_IDLE_SLEEP_SECONDS,
    TASK_PRELOAD,
    airflow_env,
)

# Airflow reads ``mp_start_method`` from a component's own section before [core]'s (documented
# under [core] mp_start_method), so it is the one key that may stand in another section.
PER_COMPONENT = {"mp_start_method"}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = airflow_env(tmp_path, 8080, tmp_path / "dags", "secret", 8793)
    for key, value in env.items():
        if key.startswith("AIRFLOW__"):
            monkeypatch.setenv(key, value)
    return env


def test_every_setting_is_one_airflow_declares(env: dict[str, str]) -> None:
    declared = retrieve_configuration_description()
    unknown = []
    for key in env:
        if not key.startswith("AIRFLOW__"):
            continue
        section, option = (part.lower() for part in key.removeprefix("AIRFLOW__").split("__", 1))
        options = declared.get(section, {}).get("options", {})
        if option not in options and option not in PER_COMPONENT:
            unknown.append(key)
    assert unknown == []


def test_forkserver_preload_is_the_schedulers_alone(env: dict[str, str]) -> None:
    assert resolve_mp_start_method("scheduler") == "forkserver"
    for component in ("triggerer", "dag_processor"):  # they keep the platform default
        assert resolve_mp_start_method(component) is None
    assert conf.get("core", "mp_forkserver_preload").split(",") == list(TASK_PRELOAD)
    assert conf.getfloat("scheduler", "scheduler_idle_sleep_time") == SCHEDULER_IDLE_SLEEP_SECONDS


@pytest.mark.parametrize("module", TASK_PRELOAD)
def test_preloaded_module_exists(module: str) -> None:
    # The forkserver skips a module it cannot import without a word: a renamed one would
    # silently bring the import time back into every task.
    assert importlib.util.find_spec(module) is not None
