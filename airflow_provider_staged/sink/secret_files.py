"""Secrets for Spark's Python workers, in 0600 files that live only while a write runs (pure).

Why a file: Spark's Python workers (the writers on executors, and the commit, which runs in a
fresh worker too) get neither the driver's objects nor its environment. A local-mode worker is
forked from a daemon that the JVM started with the environment the JVM had at ITS start (plus
``spark.executorEnv.*``), so a variable the driver sets later never reaches it, and executor
env confs are shown in Spark's UI and event log. Anything in the write's options or the pickled
sink is in Spark's plan, and a staged build journals its sink. So the sink's pickle names a
file instead: ``<staged home>/secrets/<host>-<pid>-<random>``, mode 0600 in a 0700 directory,
created by the driver for one write and deleted when it ends. A driver that died (SIGKILL)
cannot delete its files: the next one created on that host deletes those of dead processes.
Where the file is not readable (a cluster without a shared filesystem, a recovery long after
the write) the sink looks its connection up again instead (e.g. the Airflow connection).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

from airflow_provider_staged.staging.owner import pid_alive

SECRETS_DIR = "secrets"


def secrets_dir(journal_dir: str) -> Path:
    """Where a staged home keeps its secret files: beside its journal (never in it)."""
    return Path(os.path.abspath(journal_dir)).parent / SECRETS_DIR


def _sweep_dead(directory: Path, host: str) -> None:
    """Delete the secret files that drivers on this host left when they died."""
    for path in directory.glob(f"{host}-*-*"):
        pid = path.name[len(host) + 1:].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def secret_file(journal_dir: str, secret: str) -> Iterator[str]:
    """A 0600 file holding ``secret`` while the block runs; its path."""
    directory = secrets_dir(journal_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    host = socket.gethostname().replace("-", "_")
    _sweep_dead(directory, host)
    path = directory / f"{host}-{os.getpid()}-{secrets.token_hex(8)}"
    # O_EXCL with the mode at creation: the secret is never readable by others, not even briefly.
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(secret)
        yield str(path)
    finally:
        path.unlink(missing_ok=True)


def read_secret(path: str) -> str | None:
    """The secret in ``path``, or None when the file is gone (its write ended) or unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
