"""The pause point that tests stop a commit at (``staging/faults.py``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from airflow_provider_staged.staging.faults import PAUSE_DIR_ENV, pause_point


def test_an_armed_point_waits_until_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PAUSE_DIR_ENV, str(tmp_path))
    (tmp_path / "publish").touch()
    passed = threading.Event()
    waiting = threading.Thread(target=lambda: (pause_point("publish"), passed.set()))
    waiting.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "publish.reached").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not passed.wait(0.3)  # reached, and waiting
    (tmp_path / "publish").unlink()
    waiting.join(10)
    assert passed.is_set()
    pause_point("publish")  # released: the next process goes through


def test_unarmed_points_do_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pause_point("publish")  # no directory named
    monkeypatch.setenv(PAUSE_DIR_ENV, str(tmp_path))
    (tmp_path / "other").touch()
    pause_point("publish")
    assert not (tmp_path / "publish.reached").exists()
