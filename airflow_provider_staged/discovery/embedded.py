"""Where the product finds the embedded default's services: what a running local stack
(``staged up``, ``local/``) announces under ``$STAGED_HOME``, read-only.

The launchers in ``local/`` write these files; everything else (the hook's fallback, the
Materialized tables page, the SQL client, the ``connect`` engine, the CLI) only reads them here,
so no product code imports the local stack to find it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from airflow_provider_staged.staging.errors import ServiceError
from airflow_provider_staged.staging.owner import pid_alive

DEFINITIONS_ENV = "STAGED_MT_DEFINITIONS_DIR"


def definitions_folder(dags_folder: str | Path) -> Path:
    """The one folder of materialized-table definitions that Airflow serves and every view reads:
    ``STAGED_MT_DEFINITIONS_DIR`` when set (``staged up`` sets it), else the DAGs folder's
    ``materialized/``. One folder, so no table has a DAG that ``staged mt list`` or the page
    cannot see."""
    return Path(os.environ.get(DEFINITIONS_ENV) or Path(dags_folder) / "materialized")


class _Announced(Protocol):
    pid: int


Info = TypeVar("Info", bound=_Announced)


def staged_home() -> Path:
    """Where the embedded runtime keeps its metastore, warehouse, journal, pids and logs."""
    return Path(os.environ.get("STAGED_HOME", Path.home() / ".staged")).resolve()


def read_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process still runs, else None."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def _announced(state_file: Path, pid_file: Path, info: Callable[[dict[str, Any]], Info]) -> Info | None:
    """The service ``state_file`` describes, if its process (``pid_file``) still runs."""
    try:
        found = info(json.loads(state_file.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
    return found if read_pid(pid_file) == found.pid else None


# -- the metastore ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MetastoreInfo:
    host: str
    port: int
    pid: int
    warehouse: str
    home: str

    @property
    def uri(self) -> str:
        return f"thrift://{self.host}:{self.port}"


def metastore_pid_file(home: Path) -> Path:
    return home / "metastore.pid"


def metastore_state_file(home: Path) -> Path:
    return home / "metastore.json"


def metastore_status(home: Path | None = None) -> MetastoreInfo | None:
    """The running metastore recorded under ``home``, or None."""
    home = (home or staged_home()).resolve()
    return _announced(metastore_state_file(home), metastore_pid_file(home),
                      lambda state: MetastoreInfo(**state))


# -- the gateway (Spark Connect) ---------------------------------------------------------------


@dataclass(frozen=True)
class GatewayInfo:
    """A running gateway, as recorded in ``$STAGED_HOME/gateway.json``."""

    port: int
    pid: int
    token: str
    metastore_uri: str
    warehouse: str
    home: str

    @property
    def public_url(self) -> str:
        """The address without the token (safe to print and log)."""
        return f"sc://localhost:{self.port}"

    @property
    def url(self) -> str:
        """What a client connects to: ``SparkSession.builder.remote(info.url)``."""
        return f"{self.public_url}/;token={self.token}"

    def as_dict(self) -> dict[str, object]:
        """The status without the token."""
        return {"url": self.public_url, "pid": self.pid, "port": self.port,
                "metastore": self.metastore_uri, "warehouse": self.warehouse,
                "token_file": str(token_file(Path(self.home)))}


def gateway_state_file(home: Path) -> Path:
    return home / "gateway.json"


def gateway_pid_file(home: Path) -> Path:
    return home / "gateway.pid"


def token_file(home: Path) -> Path:
    return home / "gateway.token"


def gateway_status(home: Path | None = None) -> GatewayInfo | None:
    """The running gateway recorded under ``home``, or None."""
    home = (home or staged_home()).resolve()
    return _announced(gateway_state_file(home), gateway_pid_file(home),
                      lambda state: GatewayInfo(token=token_file(home).read_text().strip(), **state))


def require_gateway(home: Path | None = None) -> GatewayInfo:
    """The running local gateway, or a clear error saying how to start one."""
    info = gateway_status(home)
    if info is None:
        where = (home or staged_home()).resolve()
        raise ServiceError(f"no gateway runs under {where}: start one with `staged gateway start`")
    return info


# -- the local Airflow -------------------------------------------------------------------------


def airflow_home(home: Path) -> Path:
    return home / "airflow"


# The simple auth manager's users (name, role): an admin who may do anything, a viewer who
# may only read, so that a UI or a test can check what a read-only user is refused.
USERS = {"admin": "admin", "viewer": "viewer"}
PASSWORDS_FILE = "simple_auth_manager_passwords.json"


@dataclass(frozen=True)
class AirflowInfo:
    """A running local Airflow: where it answers and what it reads."""

    home: str
    port: int
    dags_folder: str
    pids: dict[str, int]
    env: dict[str, str]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_server_port(self) -> int:
        return int(self.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])

    @property
    def passwords_file(self) -> Path:
        """Where the passwords of :data:`USERS` are kept (JSON ``{user: password}``): the file
        this Airflow reads, which an ``extra_env`` (e.g. the compose topology's) may move."""
        configured = self.env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
        return Path(configured) if configured else passwords_file(Path(self.home))

    def credentials(self, user: str = "admin") -> tuple[str, str]:
        """``(user, password)`` of one of :data:`USERS` for logging in to this Airflow."""
        passwords = json.loads(self.passwords_file.read_text())
        if user not in passwords:
            raise ValueError(f"unknown Airflow user {user!r}: the local Airflow has {', '.join(USERS)}")
        return user, passwords[user]


def passwords_file(home: Path) -> Path:
    return home / PASSWORDS_FILE


def airflow_state_file(home: Path) -> Path:
    return home / "airflow-local.json"


def airflow_pid_file(home: Path, component: str) -> Path:
    return home / f"{component}.pid"


def airflow_status(home: Path) -> AirflowInfo | None:
    """The local Airflow recorded under ``home`` if all its processes still run, else None."""
    try:
        info = AirflowInfo(**json.loads(airflow_state_file(home.resolve()).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
    if any(read_pid(airflow_pid_file(Path(info.home), c)) != pid for c, pid in info.pids.items()):
        return None
    return info
