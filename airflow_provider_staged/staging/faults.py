"""Named crash points on the commit path of sink writes (tests only): a process that reaches the
point named by ``STAGED_SINK_FAULT`` dies there with its process group, as a machine would.
Named pause points (tests only): a process waits there while the test acts on its host."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FAULT_ENV = "STAGED_SINK_FAULT"
FAULT_PGID_ENV = "STAGED_SINK_FAULT_PGID"
PAUSE_DIR_ENV = "STAGED_PAUSE_DIR"


def fault_point(name: str) -> None:
    """Die here, like a machine crash, when ``STAGED_SINK_FAULT`` is ``name`` (tests only)."""
    if os.environ.get(FAULT_ENV) == name:
        os.killpg(int(os.environ.get(FAULT_PGID_ENV) or os.getpgid(0)), signal.SIGKILL)


def pause_point(name: str) -> None:
    """Wait here while ``$STAGED_PAUSE_DIR/<name>`` exists (tests only).

    A test arms the point by creating that file, sees ``<name>.reached`` (this process's pid)
    appear once a process got here, acts on the host (kills it, cuts its network) and releases
    the wait by deleting the file; the next process to pass goes through.
    """
    directory = os.environ.get(PAUSE_DIR_ENV)
    if not directory:
        return
    armed = Path(directory) / name
    if not armed.exists():
        return
    (Path(directory) / f"{name}.reached").write_text(str(os.getpid()))
    while armed.exists():
        time.sleep(0.1)
