"""A throwaway PostgreSQL server (initdb in a directory, loopback only) for tests and benchmarks.

Run as root, the server runs as ``nobody`` (PostgreSQL refuses to run as root) from a
directory under ``/tmp`` that it owns. It listens on 127.0.0.1 only, on a free port, with its
unix socket inside its own directory, and requires a password over TCP, so the credential
path of the JDBC staged tables is exercised for real.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from airflow_provider_staged.services.processes import (
    free_port,
    pid_alive,
    start_background,
    stop_pid,
    wait_for_port,
)

SUPERUSER = "staged"
RUN_AS = "nobody"


@dataclass(frozen=True)
class PostgresServer:
    """Where a PostgreSQL server listens and how to log in; ``pid`` is None for an external one."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str = "postgres"
    pid: int | None = None
    base_dir: str | None = None

    def conninfo(self) -> str:
        """A libpq connection string (for psycopg)."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.database
        )

    def airflow_uri(self) -> str:
        """The value of an ``AIRFLOW_CONN_<ID>`` variable for a postgres connection to this server."""
        credentials = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}"
        return f"postgres://{credentials}@{self.host}:{self.port}/{quote(self.database, safe='')}"


def postgres_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` (Debian), or the directory of ``initdb`` on PATH."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda path: int(path.parts[-3])
    )
    if candidates:
        return candidates[-1].parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise FileNotFoundError("PostgreSQL server binaries not found: install the Debian package 'postgresql'")


def _as_server_user(command: list[str]) -> list[str]:
    """Drop root: PostgreSQL refuses to run as root."""
    if os.geteuid() != 0:
        return command
    user = pwd.getpwnam(RUN_AS)
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--", *command]


def _give_to_server_user(*paths: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam(RUN_AS)
        for path in paths:
            os.chown(path, user.pw_uid, user.pw_gid)


def _init_cluster(bin_dir: Path, base: Path) -> str:
    """initdb ``base/data`` with a random superuser password, owned by the server user; return it."""
    sockets, password_file = base / "sockets", base / "pwfile"
    sockets.mkdir()
    password = secrets.token_urlsafe(16)
    password_file.write_text(password + "\n")
    _give_to_server_user(base, sockets, password_file)
    initdb = [
        str(bin_dir / "initdb"),
        "-D",
        str(base / "data"),
        "-U",
        SUPERUSER,
        f"--pwfile={password_file}",
        "--auth-local=trust",
        "--auth-host=scram-sha-256",
        "-E",
        "UTF8",
        "--no-locale",
        "--no-sync",
    ]
    done = subprocess.run(_as_server_user(initdb), capture_output=True, text=True, cwd=base)
    password_file.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return password


def start_postgres(port: int | None = None, durable: bool = False) -> PostgresServer:
    """initdb a fresh cluster in a new directory under /tmp and start it; stop it with ``stop_postgres``.

    ``durable=False`` turns fsync off (tests); benchmarks keep PostgreSQL's defaults.
    """
    bin_dir = postgres_bin_dir()
    # Under /tmp, not pytest's 0700 root-owned tmp dirs, so that the server user can reach it.
    base = Path(tempfile.mkdtemp(prefix="staged-pg-"))
    port = port or free_port()
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        "unix_socket_directories": str(base / "sockets"),
        "max_connections": "100",
        "fsync": "on" if durable else "off",
        "synchronous_commit": "on" if durable else "off",
        "full_page_writes": "on" if durable else "off",
    }
    command = [str(bin_dir / "postgres"), "-D", str(base / "data")]
    for key, value in settings.items():
        command += ["-c", f"{key}={value}"]
    log_file = base / "postgres.log"
    try:
        password = _init_cluster(bin_dir, base)
        log_file.touch()
        _give_to_server_user(log_file)
        pid = start_background(_as_server_user(command), base / "postgres.pid", log_file, cwd=base)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    server = PostgresServer("127.0.0.1", port, SUPERUSER, password, pid=pid, base_dir=str(base))
    try:
        wait_for_port(port, pid, timeout=60, log_file=log_file)
    except BaseException:
        stop_postgres(server)
        raise
    return server


def stop_postgres(server: PostgresServer, timeout: float = 30.0) -> None:
    """Fast shutdown (SIGINT) of a server that ``start_postgres`` started, then remove its directory."""
    if server.pid is None:
        return
    # SIGTERM is PostgreSQL's "smart" shutdown, which waits for clients to disconnect.
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while pid_alive(server.pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(server.pid, os.WNOHANG)
        time.sleep(0.1)
    if pid_alive(server.pid):
        stop_pid(server.pid)
    if server.base_dir:
        shutil.rmtree(server.base_dir, ignore_errors=True)


def server_from_dsn(dsn: str) -> PostgresServer:
    """An external server from a libpq DSN or URI (``STAGED_TEST_POSTGRES_DSN``)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return PostgresServer(
        host=str(params.get("host") or "127.0.0.1"),
        port=int(params.get("port") or 5432),
        user=str(params.get("user") or "postgres"),
        password=str(params.get("password") or ""),
        database=str(params.get("dbname") or "postgres"),
    )
