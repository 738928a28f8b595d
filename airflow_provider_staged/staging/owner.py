"""The process that drives an attempt without an Airflow task (``staged sql``, the CLI, a script).

Reconcile asks Airflow whether a task's attempt can still finish; for an attempt without a task
only its heartbeat TTL said so, so a killed client's attempt stayed open for the whole TTL. The
owner lets reconcile see at once that the process is gone, but only where its answer is certain:
the same machine (boot) and the same PID namespace as the process that asks, and the same process
start time (a pid can be reused). Anywhere else the answer is "unknown" and the TTL still decides.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path


def _namespace() -> str | None:
    """This host, its boot and its PID namespace: where a pid names the same process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pids = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux: pids are never compared
        return None
    return f"{socket.gethostname()}/{boot}/{pids}"


@dataclass(frozen=True)
class ProcessRef:
    namespace: str | None
    pid: int
    started: float  # the process's start time (seconds since the epoch)

    @classmethod
    def current(cls) -> ProcessRef:
        import psutil  # on use: the CLI and `staged sql` start without it

        return cls(_namespace(), os.getpid(), psutil.Process().create_time())

    def gone(self) -> bool:
        """Whether the process certainly no longer runs (False when that cannot be known here)."""
        if self.namespace is None or self.namespace != _namespace():
            return False
        import psutil

        try:
            return psutil.Process(self.pid).create_time() != self.started
        except psutil.NoSuchProcess:
            return True


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs on this machine (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(FileNotFoundError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True
