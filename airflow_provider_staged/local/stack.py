"""``staged up|down|status``: the embedded metastore plus a local Airflow serving a dags folder.

Layout under ``$STAGED_HOME``: the metastore (``metastore.json``, Derby, ``warehouse/``), the
Airflow home ``airflow/`` (SQLite, logs, the users' passwords) and ``materialized/``, the folder
``staged mt create`` writes definitions to. The DAG factory file reads it from the environment
variable :data:`DEFINITIONS_ENV`, so user definitions stay out of the project's repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from airflow_provider_staged.discovery.embedded import (
    DEFINITIONS_ENV,
    AirflowInfo,
    MetastoreInfo,
    airflow_home,
    airflow_status,
    metastore_status,
)
from airflow_provider_staged.local.airflow_server import start_airflow, stop_airflow
from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
from airflow_provider_staged.local.processes import ServiceError, listening_sockets

FACTORY_FILE = "materialized_tables.py"


def definitions_dir(home: Path) -> Path:
    return home / "materialized"


@dataclass(frozen=True)
class StackStatus:
    """What runs under one ``$STAGED_HOME``."""

    home: Path
    metastore: MetastoreInfo | None
    airflow: AirflowInfo | None

    @property
    def running(self) -> bool:
        return self.metastore is not None and self.airflow is not None

    def pids(self) -> dict[str, int]:
        pids = {"metastore": self.metastore.pid} if self.metastore else {}
        return pids | (self.airflow.pids if self.airflow else {})

    def as_dict(self) -> dict[str, object]:
        """Everything ``staged status`` shows (``--output json``)."""
        airflow = self.airflow
        return {
            "home": str(self.home),
            "metastore": None if self.metastore is None else {
                "uri": self.metastore.uri, "pid": self.metastore.pid, "warehouse": self.metastore.warehouse},
            "airflow": None if airflow is None else {
                "ui": airflow.endpoint + "/",
                "rest_api": airflow.endpoint + "/api/v2",
                "pids": airflow.pids,
                "dags_folder": airflow.dags_folder,
                "definitions_dir": airflow.env.get(DEFINITIONS_ENV),
                "login": {"users": ["admin", "viewer"], "passwords_file": str(airflow.passwords_file)},
            },
            "listening": [f"{address}:{port} ({name})" for name, address, port in self.listening()],
        }

    def listening(self) -> list[tuple[str, str, int]]:
        """``(component, address, port)`` of every socket the stack's process trees listen on."""
        return [(name, address, port) for name, pid in self.pids().items()
                for address, port in listening_sockets(pid)]


def stack_status(home: Path) -> StackStatus:
    return StackStatus(home, metastore_status(home), airflow_status(airflow_home(home)))


def check_dags_folder(dags_folder: Path) -> Path:
    """``dags_folder`` resolved, refused (changing nothing) unless it holds the DAG factory file."""
    folder = dags_folder.expanduser().resolve()
    if not (folder / FACTORY_FILE).is_file():
        raise ServiceError(
            f"dags folder {dags_folder} has no {FACTORY_FILE}: run `staged up` in the project "
            "directory (its dags/ folder) or pass --dags-folder DIR"
        )
    return folder


def stack_up(home: Path, dags_folder: Path, port: int | None = None) -> StackStatus:
    """Start the metastore and the local Airflow under ``home`` unless they already run."""
    folder = check_dags_folder(dags_folder)
    running = airflow_status(airflow_home(home))
    if running is not None and Path(running.dags_folder) != folder:
        raise ServiceError(
            f"the local Airflow under {airflow_home(home)} already serves {running.dags_folder}, "
            f"not {folder}: run `staged down` first"
        )
    started_metastore = metastore_status(home) is None
    metastore = start_metastore(home)
    definitions = definitions_dir(home)
    definitions.mkdir(parents=True, exist_ok=True)
    try:
        airflow = start_airflow(
            airflow_home(home),
            folder,
            port,
            extra_env={
                "STAGED_HOME": str(home),  # tasks find the metastore and the journal here
                DEFINITIONS_ENV: str(definitions),
                "SPARK_LOCAL_IP": "127.0.0.1",  # Spark's driver and UI in refresh tasks: loopback
            },
        )
    except BaseException:
        if started_metastore:  # leave nothing half-started behind
            stop_metastore(home)
        raise
    return StackStatus(home, metastore, airflow)


def stack_down(home: Path) -> list[str]:
    """Stop the local Airflow, then the metastore; return what was stopped."""
    stopped = []
    if stop_airflow(airflow_home(home)):
        stopped.append("airflow")
    if stop_metastore(home):
        stopped.append("metastore")
    return stopped
