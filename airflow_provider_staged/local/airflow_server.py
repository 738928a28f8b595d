"""A real Airflow on loopback (SQLite, LocalExecutor): api-server, scheduler, dag-processor,
triggerer and a task-log server, every one listening on 127.0.0.1 only.

For ``staged up``, tests and benchmarks. Everything lives under one home directory: the SQLite
database, ``airflow.cfg``, the users' passwords, pid files, logs and a state file.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from airflow_provider_staged.discovery.embedded import (
    USERS,
    AirflowInfo,
    airflow_pid_file,
    airflow_state_file,
    airflow_status,
    passwords_file,
    read_pid,
)
from airflow_provider_staged.local.processes import (
    ServiceError,
    free_port,
    pid_alive,
    start_background,
    stop_pid,
    wait_for_port,
)
from airflow_provider_staged.materialized.workflow.airflow_scheduler import fetch_token

# (name, command after ``python -m``): the scheduler and triggerer would serve task logs on
# every interface, so they skip that and ``log-server`` serves them on loopback.
COMPONENTS = {
    "api-server": ("airflow", "api-server"),
    "scheduler": ("airflow", "scheduler", "--skip-serve-logs"),
    "dag-processor": ("airflow", "dag-processor"),
    "triggerer": ("airflow", "triggerer", "--skip-serve-logs"),
    "log-server": ("airflow_provider_staged.local.log_server",),
}
HEALTHY_PARTS = ("metadatabase", "scheduler", "dag_processor", "triggerer")
HEALTH_PATH = "/api/v2/monitor/health"

SCHEDULER_IDLE_SLEEP_SECONDS = 0.5
# What every refresh task imports before its work starts, ~1.2 s of each task here (mostly
# pyspark's Spark Connect client with pandas, pyarrow and grpc): imported once by the forkserver
# the LocalExecutor's workers are forked from, each task process starts with them. Airflow's
# task runner is here because forkserver workers no longer inherit it from the scheduler.
# Third-party and Airflow modules only: the provider's own code and the DAG file are still
# imported by every task, so a task runs the provider installed when it starts. The forkserver
# (~250 MB, shared copy-on-write with the workers) starts with the first task, which waits
# for it once. Forking after these imports is safe: they start no gRPC channel or JVM.
TASK_PRELOAD = (
    "airflow.executors.local_executor",
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "airflow.dag_processing.dagbag",
    "pyspark.sql.connect.session",
    "pyarrow.parquet",
    "hmsclient",
)


def api_token(info: AirflowInfo, user: str = "admin") -> str:
    """A fresh API token of ``info``'s Airflow, logged in as ``user``."""
    return fetch_token(info.endpoint, *info.credentials(user))


def ensure_passwords(home: Path) -> Path:
    """Generate a password for each of :data:`USERS` once per home, readable by its owner only.

    Written before the api-server starts (which would otherwise generate and print them), so a
    caller knows the credentials without reading logs; later starts keep them.
    """
    path = passwords_file(home)
    passwords = json.loads(path.read_text()) if path.exists() else {}
    missing = [user for user in USERS if user not in passwords]
    if missing:
        passwords.update({user: secrets.token_urlsafe(12) for user in missing})
        path.touch(mode=0o600)
        path.write_text(json.dumps(passwords) + "\n")
    return path


def loopback_hostname() -> str:
    """``[core] hostname_callable`` of the local Airflow: task logs are fetched from
    ``http://<hostname>:<log server port>``, and the log server listens on loopback only."""
    return "127.0.0.1"


def airflow_env(
    home: Path, port: int, dags_folder: Path, jwt_secret: str, log_port: int | None = None
) -> dict[str, str]:
    """Environment of every Airflow process (and of ``airflow`` CLI calls) for this instance."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW__")}
    log_port = log_port or free_port()
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="2",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        # The scheduler's task runners report to the execution API: on a non-default port every
        # task fails with "connection refused" unless this points at our api-server.
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        # Real logins: users with roles, their passwords in a file of this home.
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{u}:{r}" for u, r in USERS.items()),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords_file(home)),
        # The scheduler signs task tokens and the api-server checks them: one shared secret.
        AIRFLOW__API_AUTH__JWT_SECRET=jwt_secret,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__HOST="127.0.0.1",
        # Signs the log server's tokens: the api-server and the log server must agree.
        AIRFLOW__API__SECRET_KEY=jwt_secret,
        # One loopback log server (log_server.py) for task and trigger logs, on a free port
        # rather than 8793/8794, so that several local Airflows can run side by side.
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(log_port),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(log_port),
        AIRFLOW__CORE__HOSTNAME_CALLABLE=f"{__name__}.loopback_hostname",
        AIRFLOW__API__WORKERS="1",
        # New or changed definition files must show up within seconds, not minutes.
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="2",
        AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL="1",
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="5",
        # A parse that changes a DAG stores it at most this often (default 30 s): CREATE OR ALTER
        # and ALTER ... SET/AS waited ~30 s for Airflow to show the new definition.
        AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL="2",
        AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD="10",
        # A dropped table's DAG vanishes from the factory file's parse, and only the stale scan
        # (default every 60 s) retires it: `staged mt drop` waited ~50 s for it.
        AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL="5",
        AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES="1",
        AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL="0",
        # A triggered refresh waits for the scheduler's next loop; an idle scheduler sleeps this
        # long between loops (default 1 s: on average 0.5 s of every trigger's latency). A busy
        # scheduler never sleeps, so this only costs idle loops: 0.2 s took 12% of a core while
        # idle (3% at 1 s) for ~0.1 s less, so half the default, not less.
        AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=str(SCHEDULER_IDLE_SLEEP_SECONDS),
        # The LocalExecutor's workers come from a forkserver that imported TASK_PRELOAD once
        # (and every task process is forked from a worker), instead of from the scheduler:
        # see TASK_PRELOAD. Only the scheduler: the other components keep the default (fork).
        AIRFLOW__SCHEDULER__MP_START_METHOD="forkserver",
        AIRFLOW__CORE__MP_FORKSERVER_PRELOAD=",".join(TASK_PRELOAD),
    )
    return env


def _log_file(home: Path, component: str) -> Path:
    return home / "logs" / f"{component}.log"


def start_airflow(
    home: Path,
    dags_folder: Path | None = None,
    port: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> AirflowInfo:
    """Start the :data:`COMPONENTS` under ``home`` unless they already run.

    ``extra_env`` reaches every process, so tasks too (e.g. ``STAGED_HOME`` to find the metastore).
    """
    home = home.resolve()
    running = airflow_status(home)
    if running is not None:
        return running
    home.mkdir(parents=True, exist_ok=True)
    dags_folder = (dags_folder or home / "dags").resolve()
    dags_folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    env = {**airflow_env(home, port, dags_folder, secrets.token_hex(32)), **(extra_env or {})}
    ensure_passwords(home)
    _migrate(home, env)
    pids: dict[str, int] = {}
    try:
        for component, (module, *args) in COMPONENTS.items():
            command = [sys.executable, "-m", module, *args]
            if component == "log-server":
                command.append(env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])
            pids[component] = start_background(
                command, airflow_pid_file(home, component), _log_file(home, component), env, home
            )
        wait_for_port(port, pids["api-server"], timeout, _log_file(home, "api-server"))
        info = AirflowInfo(str(home), port, str(dags_folder), pids, env)
        wait_for_port(info.log_server_port, pids["log-server"], timeout, _log_file(home, "log-server"))
        wait_for_health(info, timeout)
        register_scheduler_connection(info)
    except BaseException:
        for pid in pids.values():
            stop_pid(pid)
        raise
    airflow_state_file(home).write_text(json.dumps(asdict(info)))
    return info


def register_scheduler_connection(info: AirflowInfo) -> None:
    """Give refresh tasks the REST login that auto-suspend pauses their DAG with, as the admin.

    A task holds only an execution-API token, which cannot pause a DAG; without this connection
    auto-suspend could not act on the local Airflow. Stored in Airflow's database (through the
    REST API), not in the state file, which is not private.
    """
    from airflow_provider_staged.materialized.workflow.auto_suspend import SCHEDULER_CONN_ID

    user, password = info.credentials("admin")
    body = {"connection_id": SCHEDULER_CONN_ID, "conn_type": "http", "host": info.endpoint,
            "login": user, "password": password}
    headers = {"Authorization": f"Bearer {api_token(info)}"}
    connections = f"{info.endpoint}/api/v2/connections"
    response = httpx.post(connections, json=body, headers=headers, timeout=60)
    if response.status_code == 409:  # a restart of the same home: the password is the same
        response = httpx.patch(f"{connections}/{SCHEDULER_CONN_ID}", json=body, headers=headers, timeout=60)
    if response.status_code >= 400:
        raise ServiceError(
            f"cannot register connection {SCHEDULER_CONN_ID} in the local Airflow: "
            f"HTTP {response.status_code} {response.text[:300]}"
        )


def _migrate(home: Path, env: dict[str, str]) -> None:
    """``airflow db migrate``, skipped (about 10 s) when this Airflow version migrated ``home``."""
    from importlib.metadata import version

    done = home / f".migrated-{version('apache-airflow')}"
    if done.exists() and (home / "airflow.db").exists():
        return
    log_file = _log_file(home, "db-migrate")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "wb") as log:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, check=False,
        )
    if result.returncode != 0:
        tail = log_file.read_text(errors="replace")[-3000:]
        raise ServiceError(f"airflow db migrate failed ({result.returncode}); log:\n{tail}")
    done.touch()


def wait_for_health(info: AirflowInfo, timeout: float) -> None:
    """Until the metadatabase, scheduler, dag-processor and triggerer all report healthy."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        for component, pid in info.pids.items():
            if not pid_alive(pid):
                tail = _log_file(Path(info.home), component).read_text(errors="replace")[-3000:]
                raise ServiceError(f"airflow {component} (pid {pid}) exited; log:\n{tail}")
        try:
            health = httpx.get(info.endpoint + HEALTH_PATH, timeout=5).json()
            last = json.dumps(health)
            if all(
                (health.get(part) or {}).get("status") == "healthy"
                for part in HEALTHY_PARTS
            ):
                return
        except (httpx.HTTPError, ValueError) as err:
            last = str(err)
        time.sleep(1)
    raise ServiceError(f"Airflow at {info.endpoint} not healthy within {timeout:.0f}s: {last}")


def stop_airflow(home: Path) -> bool:
    """Stop every process recorded under ``home`` (by pid, process group); return whether any ran."""
    home = home.resolve()
    airflow_state_file(home).unlink(missing_ok=True)
    stopped = False
    # Reverse order: stop the scheduler and dag-processor before the API they report to.
    for component in reversed(list(COMPONENTS)):
        pid = read_pid(airflow_pid_file(home, component))
        if pid is not None:
            stop_pid(pid)
            stopped = True
        airflow_pid_file(home, component).unlink(missing_ok=True)
    return stopped


def run_dag(info: AirflowInfo, dag_id: str, timeout: float = 900) -> dict[str, Any]:
    """Wait until ``dag_id`` is parsed, unpause it, trigger a run and wait for it to end.

    For DAGs without a schedule (the examples): unpausing one with a schedule would also start
    its scheduled runs. Returns the run as the REST API shows it.
    """
    started = time.monotonic()
    deadline = started + timeout
    with httpx.Client(base_url=info.endpoint + "/api/v2", timeout=60,
                      headers={"Authorization": f"Bearer {api_token(info)}"}) as api:
        # A DAG file is parsed within seconds (refresh_interval 2 s), the first time a bit later.
        while api.get(f"/dags/{dag_id}").status_code == 404:
            if time.monotonic() > min(deadline, started + 60):
                raise ServiceError(f"no DAG {dag_id!r} in {info.dags_folder} (or it does not import: "
                                   f"see {info.endpoint}/dags)")
            time.sleep(1)
        api.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        run = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None}).raise_for_status().json()
        while run["state"] not in ("success", "failed"):
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"run {run['dag_run_id']} of {dag_id} still {run['state']} after {timeout:.0f}s"
                )
            time.sleep(2)
            run = api.get(f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}").raise_for_status().json()
    return run
