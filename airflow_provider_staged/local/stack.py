"""``staged up|down|status``: the embedded metastore, the gateway and a local Airflow serving a
dags folder.

Layout under ``$STAGED_HOME``: the metastore (``metastore.json``, Derby, ``warehouse/``), the
Airflow home ``airflow/`` (SQLite, logs, the users' passwords) and ``materialized/``, the folder
``staged mt create`` writes definitions to. The DAG factory file reads it from the environment
variable :data:`DEFINITIONS_ENV`, so user definitions stay out of the project's repository.

Warm by default: the stack also starts the gateway (``local/gateway.py``) and sets the local
Airflow's ``[staged] refresh_engine`` to ``connect``, so refresh tasks run on it instead of
starting a Spark each; their tasks find it through ``STAGED_HOME`` (its token stays in its 0600
file, out of the Airflow state file). ``staged up --engine embedded`` starts no gateway.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_staged.discovery.embedded import (
    DEFINITIONS_ENV,
    AirflowInfo,
    GatewayInfo,
    MetastoreInfo,
    airflow_home,
    airflow_status,
    gateway_status,
    metastore_status,
)
from airflow_provider_staged.local.airflow_server import start_airflow, stop_airflow
from airflow_provider_staged.local.gateway import launch_gateway, stop_gateway
from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
from airflow_provider_staged.local.processes import ServiceError, listening_sockets

FACTORY_FILE = "materialized_tables.py"
# The provider's option ``[staged] refresh_engine`` as the local Airflow's processes read it.
REFRESH_ENGINE_ENV = "AIRFLOW__STAGED__REFRESH_ENGINE"


class StackEngine(str, enum.Enum):
    """Where the stack's refresh tasks run Spark (``staged up --engine``)."""

    connect = "connect"  # the stack's gateway, started with it: warm
    embedded = "embedded"  # a Spark in each task process: no gateway


def stack_env(home: Path, definitions: Path, engine: StackEngine) -> dict[str, str]:
    """What the stack adds to the local Airflow's environment (so to every task's)."""
    return {
        "STAGED_HOME": str(home),  # tasks find the metastore, the journal and the gateway here
        DEFINITIONS_ENV: str(definitions),
        "SPARK_LOCAL_IP": "127.0.0.1",  # Spark's driver and UI in refresh tasks: loopback
        REFRESH_ENGINE_ENV: engine.value,
    }


def definitions_dir(home: Path) -> Path:
    return home / "materialized"


@dataclass(frozen=True)
class StackStatus:
    """What runs under one ``$STAGED_HOME``."""

    home: Path
    metastore: MetastoreInfo | None
    airflow: AirflowInfo | None
    gateway: GatewayInfo | None = None

    @property
    def engine(self) -> str | None:
        """The refresh engine the running Airflow's tasks use (None when it does not run)."""
        if self.airflow is None:
            return None
        # A stack started before the gateway was part of it: the provider's default.
        return self.airflow.env.get(REFRESH_ENGINE_ENV, StackEngine.embedded.value)

    @property
    def running(self) -> bool:
        """Everything the stack started runs: the gateway too when its refreshes need it."""
        needs_gateway = self.engine == StackEngine.connect.value
        return (self.metastore is not None and self.airflow is not None
                and (self.gateway is not None or not needs_gateway))

    def pids(self) -> dict[str, int]:
        pids = {"metastore": self.metastore.pid} if self.metastore else {}
        pids |= {"gateway": self.gateway.pid} if self.gateway else {}
        return pids | (self.airflow.pids if self.airflow else {})

    def as_dict(self) -> dict[str, object]:
        """Everything ``staged status`` shows (``--output json``)."""
        airflow = self.airflow
        return {
            "home": str(self.home),
            "metastore": None if self.metastore is None else {
                "uri": self.metastore.uri, "pid": self.metastore.pid, "warehouse": self.metastore.warehouse},
            "gateway": None if self.gateway is None else {
                "url": self.gateway.public_url, "pid": self.gateway.pid,
                "token_file": self.gateway.as_dict()["token_file"]},
            "refresh_engine": self.engine,
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


def engine_line(status: StackStatus) -> str:
    """``staged status``'s line saying where refreshes run, and why a connect one would fail."""
    if status.engine == StackEngine.connect.value:
        where = (f"on the gateway {status.gateway.public_url}" if status.gateway is not None
                 else "on the gateway, which is NOT running: refreshes fail until `staged up` restarts it")
    else:
        where = "in a Spark of each task (`staged up --engine connect` runs them on the gateway)"
    return f"refreshes   engine {status.engine}: {where}"


def stack_status(home: Path) -> StackStatus:
    return StackStatus(home, metastore_status(home), airflow_status(airflow_home(home)), gateway_status(home))


def check_dags_folder(dags_folder: Path) -> Path:
    """``dags_folder`` resolved, refused (changing nothing) unless it holds the DAG factory file."""
    folder = dags_folder.expanduser().resolve()
    if not (folder / FACTORY_FILE).is_file():
        raise ServiceError(
            f"dags folder {dags_folder} has no {FACTORY_FILE}: run `staged up` in the project "
            "directory (its dags/ folder) or pass --dags-folder DIR"
        )
    return folder


def stack_up(home: Path, dags_folder: Path, port: int | None = None,
             engine: StackEngine = StackEngine.connect) -> StackStatus:
    """Start the metastore, the gateway (engine ``connect``) and the local Airflow under ``home``
    unless they already run; the gateway's JVM starts while Airflow does."""
    folder = check_dags_folder(dags_folder)
    running = stack_status(home)
    if running.airflow is not None and Path(running.airflow.dags_folder) != folder:
        raise ServiceError(
            f"the local Airflow under {airflow_home(home)} already serves {running.airflow.dags_folder}, "
            f"not {folder}: run `staged down` first"
        )
    if running.airflow is not None and running.engine != engine.value:
        raise ServiceError(
            f"the local Airflow under {airflow_home(home)} already runs its refreshes on engine "
            f"{running.engine}, not {engine.value}: run `staged down` first"
        )
    started_metastore = running.metastore is None
    metastore = start_metastore(home)
    definitions = definitions_dir(home)
    definitions.mkdir(parents=True, exist_ok=True)
    gateway = None
    try:
        if engine is StackEngine.connect and running.gateway is not None and (
                running.gateway.metastore_uri != metastore.uri):
            # One `staged gateway start --conn` made: the stack's refreshes would write elsewhere.
            raise ServiceError(f"the gateway under {home} runs on the metastore "
                               f"{running.gateway.metastore_uri}, not the local {metastore.uri}: stop it "
                               "with `staged gateway stop` first")
        if engine is StackEngine.connect:
            gateway = launch_gateway(metastore.uri, metastore.warehouse, home)
        airflow = start_airflow(airflow_home(home), folder, port,
                                extra_env=stack_env(home, definitions, engine))
        info = gateway.wait() if gateway is not None else None
    except BaseException:
        # Leave nothing half-started behind (what ran before this call keeps running).
        if gateway is not None:
            gateway.stop()
        if running.airflow is None:
            stop_airflow(airflow_home(home))
        if started_metastore:
            stop_metastore(home)
        raise
    return StackStatus(home, metastore, airflow, info or gateway_status(home))


def stack_down(home: Path) -> list[str]:
    """Stop the local Airflow, the gateway, then the metastore; return what was stopped."""
    stopped = []
    if stop_airflow(airflow_home(home)):
        stopped.append("airflow")
    if stop_gateway(home):
        stopped.append("gateway")
    if stop_metastore(home):
        stopped.append("metastore")
    return stopped
