"""docker/docker-compose.yml by construction: what once kept the topology from starting.

No Docker engine runs here or on CI: the file is read as compose reads it. Airflow 3.3's simple
auth manager opens its passwords file for writing, so that file on a read-only mount killed the
api-server ("OSError: [Errno 30] Read-only file system") and everything waiting for it; the
Materialized tables page and ``staged mt`` had no metastore and no API endpoint.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.test_at_scale_topology import AIRFLOW_SERVICES, DOCKER, services


def mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """``(source, target, read_only)`` of each of ``service``'s volumes (short or long syntax)."""
    found = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            found.append((volume["source"], volume["target"], bool(volume.get("read_only"))))
        else:
            source, target, *mode = volume.split(":")
            found.append((source, target, "ro" in (mode[0].split(",") if mode else [])))
    return found


def mount_of(service: dict[str, Any], path: str) -> tuple[str, str, bool] | None:
    """The mount ``path`` lies on in ``service``'s container (the deepest one), if any."""
    holding = [m for m in mounts(service) if PurePosixPath(path).is_relative_to(m[1])]
    return max(holding, key=lambda m: len(PurePosixPath(m[1]).parts), default=None)


def command_port(service: dict[str, Any]) -> int:
    args = shlex.split(service["command"])
    return int(args[args.index("--port") + 1])


def written_by_airflow(env: dict[str, str]) -> dict[str, str]:
    """What the Airflow containers write, by what: Airflow's passwords file and task logs, the
    definitions ``staged mt create`` writes, the staged connection's warehouse and journal."""
    extra = json.loads(env["AIRFLOW_CONN_STAGED_DEFAULT"])["extra"]
    return {
        "simple auth manager passwords file": env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"],
        "task logs": "/opt/airflow/logs",
        "materialized-table definitions": env["STAGED_MT_DEFINITIONS_DIR"],
        "warehouse": urlsplit(extra["warehouse"]).path,
        "attempt journal": extra["journal_dir"],
    }


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_no_read_only_mount_holds_a_file_airflow_writes(name: str) -> None:
    service = services()[name]
    for what, path in written_by_airflow(service["environment"]).items():
        mount = mount_of(service, path)
        # On a volume: shared by the containers and kept when one is recreated.
        assert mount is not None, f"{name}: the {what} {path} is on no volume"
        assert not mount[2], f"{name}: the {what} {path} is on the read-only mount {mount[0]}:{mount[1]}"


def test_the_secrets_service_writes_the_passwords_file_where_airflow_reads_it() -> None:
    found = services()
    env = found["airflow-api-server"]["environment"]
    path = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    volume, target, _ = mount_of(found["airflow-api-server"], path) or ("", "", True)
    assert (volume, target, False) in mounts(found["secrets"])
    script = found["secrets"]["command"][-1]
    assert path in script
    # Its admin entry is the secret the README tells `staged mt` users to read.
    assert 'passwords["admin"] = pathlib.Path("airflow_admin_password")' in script
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(":")[0] == env["STAGED_AIRFLOW_USERNAME"]


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_the_page_and_the_cli_find_the_metastore_the_api_and_the_definitions(name: str) -> None:
    found = services()
    env = found[name]["environment"]
    metastore = f"metastore:{command_port(found['metastore'])}"
    assert env["STAGED_METASTORE_URI"] == f"thrift://{metastore}"
    conn = json.loads(env["AIRFLOW_CONN_STAGED_DEFAULT"])
    assert f"{conn['host']}:{conn['port']}" == metastore  # the tasks' catalog is the page's
    assert (
        env["STAGED_AIRFLOW_ENDPOINT"]
        == f"http://airflow-api-server:{command_port(found['airflow-api-server'])}"
    )
    # The folder the image's DAG factory (dags/materialized_tables.py) reads, on the shared dags volume.
    dags_folder = re.search(r"AIRFLOW__CORE__DAGS_FOLDER=(\S+)", (DOCKER / "Dockerfile").read_text())
    assert dags_folder is not None
    assert env["STAGED_MT_DEFINITIONS_DIR"] == f"{dags_folder[1]}/materialized"
    assert mount_of(found[name], env["STAGED_MT_DEFINITIONS_DIR"])[:2] == ("dags", dags_folder[1])
