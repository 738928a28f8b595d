"""A Spark standalone cluster (one master, one worker) run from the pyspark wheel, on loopback."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_staged.services.metastore import spark_home
from airflow_provider_staged.services.processes import (
    free_port,
    pid_alive,
    start_background,
    stop_pid,
)

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class StandaloneCluster:
    """Where the master listens and which processes to stop."""

    port: int
    webui_port: int
    master_pid: int
    worker_pid: int
    home: str

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"


def cluster_env() -> dict[str, str]:
    """Environment of the daemons: loopback only, and executors run this interpreter's Python."""
    return dict(
        os.environ,
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        # The master's REST submission server binds a fixed port (6066): clusters would collide.
        SPARK_MASTER_OPTS=f"{os.environ.get('SPARK_MASTER_OPTS', '')} -Dspark.master.rest.enabled=false",
        # The daemons only coordinate: C1-only JIT and a serial GC spare CPU on a small machine.
        SPARK_DAEMON_JAVA_OPTS=f"{os.environ.get('SPARK_DAEMON_JAVA_OPTS', '')} "
        "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    )


def _spark_class(*args: str) -> list[str]:
    return [str(spark_home() / "bin" / "spark-class"), *args]


def alive_workers(webui_url: str) -> int:
    """How many ALIVE workers the master's JSON status page lists (0 while it is not up)."""
    try:
        with urllib.request.urlopen(f"{webui_url}/json/", timeout=2) as response:
            status = json.load(response)
    except (OSError, urllib.error.URLError, ValueError):
        return 0
    return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")


def start_cluster(
    home: Path, cores: int = 1, memory: str = "1g", timeout: float = 120.0
) -> StandaloneCluster:
    """Start a master and one worker with logs, pids and work dirs under ``home``; wait until ALIVE."""
    home = home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    env = cluster_env()
    port, webui_port, worker_ui_port = free_port(), free_port(), free_port()
    master_cmd = _spark_class(
        MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui_port)
    )
    worker_cmd = _spark_class(
        WORKER_CLASS,
        f"spark://{HOST}:{port}",
        "--host", HOST,
        "--webui-port", str(worker_ui_port),
        "--cores", str(cores),
        "--memory", memory,
        # Executors' scratch and logs; the default is inside SPARK_HOME (the venv).
        "--work-dir", str(home / "work"),
    )  # fmt: skip
    # Both JVMs boot at once (the worker retries registering until the master is up):
    # on a busy 2-core machine that halves the start-up time.
    master_pid = start_background(master_cmd, home / "master.pid", home / "logs" / "master.log", env, home)
    worker_pid: int | None = None
    try:
        worker_pid = start_background(
            worker_cmd, home / "worker.pid", home / "logs" / "worker.log", env, home
        )
        cluster = StandaloneCluster(port, webui_port, master_pid, worker_pid, str(home))
        _wait_for_worker(cluster, timeout)
    except BaseException:
        for pid in (worker_pid, master_pid):
            if pid is not None:
                stop_pid(pid)
        raise
    return cluster


def _wait_for_worker(cluster: StandaloneCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive_workers(cluster.webui_url) > 0:
            return
        for name, pid in (("master", cluster.master_pid), ("worker", cluster.worker_pid)):
            if not pid_alive(pid):
                log_file = Path(cluster.home) / "logs" / f"{name}.log"
                tail = log_file.read_text(errors="replace")[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Spark {name} (pid {pid}) exited; log:\n{tail}")
        time.sleep(0.5)
    raise TimeoutError(
        f"no ALIVE worker at {cluster.webui_url} within {timeout:.0f}s (logs in {cluster.home})"
    )


def stop_cluster(cluster: StandaloneCluster) -> None:
    """Stop the worker (and the executors it started, its process group), then the master."""
    stop_pid(cluster.worker_pid)
    stop_pid(cluster.master_pid)
