"""discovery.embedded: a service counts as running only while its state file and live pid agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_staged.discovery.embedded import (
    gateway_pid_file,
    gateway_state_file,
    gateway_status,
    metastore_pid_file,
    metastore_state_file,
    metastore_status,
    token_file,
)


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def _announce_metastore(home: Path, pid: int) -> None:
    state = {"host": "127.0.0.1", "port": 9083, "pid": pid, "warehouse": str(home / "w"), "home": str(home)}
    metastore_state_file(home).write_text(json.dumps(state))
    metastore_pid_file(home).write_text(str(pid))


def test_a_metastore_is_found_while_its_process_runs(tmp_path: Path) -> None:
    _announce_metastore(tmp_path, os.getpid())
    found = metastore_status(tmp_path)
    assert found is not None and found.uri == "thrift://127.0.0.1:9083"


def test_a_dead_or_damaged_announcement_is_no_service(tmp_path: Path) -> None:
    _announce_metastore(tmp_path, _dead_pid())
    assert metastore_status(tmp_path) is None
    _announce_metastore(tmp_path, os.getpid())
    metastore_state_file(tmp_path).write_text("{not json")
    assert metastore_status(tmp_path) is None
    metastore_state_file(tmp_path).write_text(json.dumps({"host": "127.0.0.1"}))  # fields missing
    assert metastore_status(tmp_path) is None


def test_a_gateway_needs_its_token_file(tmp_path: Path) -> None:
    state = {"port": 15002, "pid": os.getpid(), "metastore_uri": "thrift://127.0.0.1:9083",
             "warehouse": "/w", "home": str(tmp_path)}
    gateway_state_file(tmp_path).write_text(json.dumps(state))
    gateway_pid_file(tmp_path).write_text(str(os.getpid()))
    assert gateway_status(tmp_path) is None  # no token: a client could not connect
    token_file(tmp_path).write_text("secret\n")
    found = gateway_status(tmp_path)
    assert found is not None and found.url == "sc://localhost:15002/;token=secret"
    assert "secret" not in json.dumps(found.as_dict())
