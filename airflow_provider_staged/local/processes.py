"""Start, find and stop background processes by pid file (no Airflow or Spark imports)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from airflow_provider_staged.staging.errors import ServiceError
from airflow_provider_staged.staging.owner import pid_alive


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def start_background(
    command: Sequence[str],
    pid_file: Path,
    log_file: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``command`` detached in its own session, logging to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    return process.pid


def wait_for_port(port: int, pid: int, timeout: float, log_file: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if not pid_alive(pid):
            tail = log_file.read_text(errors="replace")[-3000:] if log_file.exists() else ""
            raise ServiceError(f"process {pid} exited before port {port} opened; log:\n{tail}")
        time.sleep(0.25)
    raise ServiceError(f"port {port} did not open within {timeout:.0f}s (pid {pid}, log {log_file})")


def group_alive(pgid: int) -> bool:
    """Whether a process of process group ``pgid`` still runs (zombies do not count)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
    return False


def stop_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM the process group of ``pid``, then SIGKILL it if any of it lingers.

    The whole group, not only its leader: a member that outlives the leader (e.g. a worker
    that ignores SIGTERM while the scheduler that forked it exits) would be left running.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not pid_alive(pid) and not group_alive(pid):
                return
            time.sleep(0.1)


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants that run now."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root.pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """``(address, port)`` of every TCP socket that ``pid`` or a descendant listens on."""
    import psutil

    found = set()
    for member in process_tree(pid):
        try:
            connections = psutil.Process(member).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found.update((c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN)
    return sorted(found)
