"""Named crash points on the commit path of sink writes (tests only): a process that reaches the
point named by ``STAGED_SINK_FAULT`` dies there with its process group, as a machine would."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "STAGED_SINK_FAULT"
FAULT_PGID_ENV = "STAGED_SINK_FAULT_PGID"


def fault_point(name: str) -> None:
    """Die here, like a machine crash, when ``STAGED_SINK_FAULT`` is ``name`` (tests only)."""
    if os.environ.get(FAULT_ENV) == name:
        os.killpg(int(os.environ.get(FAULT_PGID_ENV) or os.getpgid(0)), signal.SIGKILL)
