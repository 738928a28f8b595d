"""``staged up`` → ``staged mt create/list/describe/refresh`` and ``staged sql`` without flags →
``staged down``.

The real CLI in subprocesses against the real stack it starts (metastore, the gateway, Airflow
with a triggerer and log server; the refresh task's Spark work on the gateway). Which processes
belong to the stack is read from the process table: every process whose environment names this
test's STAGED_HOME (children inherit it). What they listen on is read from /proc/net/tcp{,6},
mapping socket inodes to those processes, independently of the product's own psutil-based listing.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pexpect
import pytest

REPO = Path(__file__).resolve().parents[2]
STAGED = Path(sys.executable).with_name("staged")
FIRST_PROMPT_SECONDS = 5.0
DEFINITION = """\
CREATE MATERIALIZED TABLE stack.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
AS SELECT CAST(date_add(DATE'2024-01-01', CAST(id % 3 AS INT)) AS STRING) AS ds, count(*) AS orders
FROM range(30) GROUP BY 1;
"""


def stack_pids(home: Path) -> set[int]:
    """Every running process whose environment has ``STAGED_HOME=<home>`` or whose working
    directory is inside ``home`` (where the stack starts its servers): setproctitle, which
    Airflow's servers call, overwrites what /proc/<pid>/environ shows."""
    marker = f"STAGED_HOME={home}".encode() + b"\0"
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = Path(os.readlink(entry / "cwd"))
                if marker in (entry / "environ").read_bytes() + b"\0" or cwd.is_relative_to(home):
                    pids.add(int(entry.name))
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                continue
    return pids


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    # /proc/net/tcp{,6} print each 32-bit word of the address in host (little-endian) order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of the listening TCP sockets that ``pids`` hold."""
    sockets = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                address, port = fields[1].split(":")
                sockets[fields[9]] = (_address(address), int(port, 16))
    found = []
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        for link in links:
            inode = link[len("socket:["):-1] if link.startswith("socket:[") else None
            if inode in sockets:
                address, port = sockets[inode]
                found.append((pid, str(address), port))
    return found


def beyond_loopback(found: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    def loopback(text: str) -> bool:
        address = ipaddress.ip_address(text)
        mapped = getattr(address, "ipv4_mapped", None)
        return address.is_loopback or (mapped is not None and mapped.is_loopback)

    return [entry for entry in found if not loopback(entry[1])]


class Sampler(threading.Thread):
    """Collects the stack's listening sockets every half second (tasks and Spark come and go)."""

    def __init__(self, home: Path) -> None:
        super().__init__(daemon=True)
        self.home, self.seen, self.stopped = home, set(), threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.seen.update(listening(stack_pids(self.home)))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("local-stack").resolve()
    yield home
    # Whatever the test's outcome: nothing of this stack may outlive it.
    subprocess.run([str(STAGED), "down"], env=_env(home), cwd=REPO, capture_output=True, timeout=120)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STAGED_"))}
    return env | {"STAGED_HOME": str(home), "COLUMNS": "80"}


def staged(home: Path, *args: str, code: int = 0, timeout: float = 600) -> str:
    result = subprocess.run([str(STAGED), *args], env=_env(home), cwd=REPO, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == code, f"staged {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result.stdout


def test_up_mt_without_flags_down_leaves_nothing(home: Path, tmp_path: Path) -> None:
    assert stack_pids(home) == set()
    started = time.monotonic()
    staged(home, "up")
    up_seconds = time.monotonic() - started
    status = json.loads(staged(home, "status", "--output", "json"))
    airflow = status["airflow"]
    assert set(airflow["pids"]) == {"api-server", "scheduler", "dag-processor", "triggerer", "log-server"}
    assert status["metastore"]["uri"].startswith("thrift://127.0.0.1:")
    # Warm by default: the gateway runs, and the stack's refreshes are set to run on it.
    gateway = status["gateway"]
    assert gateway["url"].startswith("sc://localhost:") and status["refresh_engine"] == "connect"
    assert f"refreshes   engine connect: on the gateway {gateway['url']}" in staged(home, "status")
    ui = airflow["ui"].rstrip("/")

    # Every component is healthy (the triggerer too: the UI's Home page shows it green).
    health = httpx.get(f"{ui}/api/v2/monitor/health", timeout=30).json()
    assert {part: health[part]["status"] for part in ("metadatabase", "scheduler", "dag_processor",
                                                      "triggerer")} == dict.fromkeys(
        ("metadatabase", "scheduler", "dag_processor", "triggerer"), "healthy")

    # Real logins: the admin may trigger, the viewer only read; the passwords are in the home.
    passwords = json.loads(Path(airflow["login"]["passwords_file"]).read_text())
    assert Path(airflow["login"]["passwords_file"]).stat().st_mode & 0o077 == 0
    tokens = {user: httpx.post(f"{ui}/auth/token", json={"username": user, "password": passwords[user]},
                               timeout=30).json()["access_token"] for user in ("admin", "viewer")}
    assert httpx.post(f"{ui}/auth/token", json={"username": "admin", "password": "wrong"},
                      timeout=30).status_code == 401

    sampler = Sampler(home)
    sampler.start()
    try:
        staged(home, "create-database", "stack")
        source = tmp_path / "orders_daily.sql"
        source.write_text(DEFINITION)
        assert "created Airflow DAG mt__stack__orders_daily" in staged(home, "mt", "create", str(source))
        # The definition went to $STAGED_HOME/materialized, not into the repository's dags/.
        assert (home / "materialized" / "stack__orders_daily.sql").read_text() == DEFINITION
        listed = json.loads(staged(home, "mt", "list", "--output", "json"))
        assert [(t["table"], t["dag"]) for t in listed] == [("stack.orders_daily", "mt__stack__orders_daily")]
        described = json.loads(staged(home, "mt", "describe", "stack.orders_daily", "--output", "json"))
        assert described["freshness"] == "INTERVAL '1' DAY" and described["paused"] == "False"

        api = f"{ui}/api/v2/dags"
        viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        # One definitions folder is served, the one `staged mt list` read: the repository's example is
        # not (the DAG file that served the user's table would have served it), so it cannot run
        # and fail before its source exists.
        assert httpx.get(f"{api}/mt__analytics__orders_daily", headers=viewer, timeout=30).status_code == 404
        refused = httpx.post(f"{api}/mt__stack__orders_daily/dagRuns", headers=viewer, timeout=30,
                             json={"logical_date": None, "conf": {}})
        assert refused.status_code == 403
        # Refresh tasks can auto-suspend their DAG: the stack registered the admin's REST login.
        connection = httpx.get(f"{ui}/api/v2/connections/staged_workflow_scheduler", headers=admin,
                               timeout=30).json()
        assert (connection["host"], connection["login"]) == (ui, "admin")

        out = staged(home, "mt", "refresh", "stack.orders_daily", "--partition", "ds=2024-01-02",
                     "--wait", "600")
        run_id = out.split("run ", 1)[1].split()[0]
        assert f"run {run_id}: success" in out
        run = httpx.get(f"{api}/mt__stack__orders_daily/dagRuns/{run_id}", headers=admin, timeout=30).json()
        assert run["conf"]["staticPartitions"] == {"ds": "2024-01-02"}
        shown = json.loads(staged(home, "show", "stack.orders_daily", "--output", "json"))
        # One word for version: the partition's is the one `staged versions` calls current.
        kept = json.loads(staged(home, "versions", "stack.orders_daily", "--output", "json"))
        (current,) = [v["version"] for v in kept
                      if v["status"] == "current" and v["partition"] == "ds=2024-01-02"]
        assert {"partition": "ds=2024-01-02", "rows": 1, "version": current} in shown["partitions"]
        assert {"ds": "2024-01-02", "orders": 10} in shown["rows"]
        # The refresh ran on the stack's gateway: its task log names the engine and the server.
        task_log = (home / "airflow" / "logs" / "dag_id=mt__stack__orders_daily" / f"run_id={run_id}"
                    / "task_id=refresh" / "attempt=1.log").read_text()
        assert "refresh engine connect (from [staged] refresh_engine)" in task_log
        assert f"connecting to Spark Connect server {gateway['url']}" in task_log

        first_prompt = sql_client_on_the_gateway(home, gateway["url"])
    finally:
        sampler.stopped.set()
        sampler.join()

    # Loopback only, for everything the stack ran: servers, task processes, Spark.
    seen = sampler.seen | set(listening(stack_pids(home)))
    ports = {port for _, _, port in seen}
    assert int(ui.rsplit(":", 1)[1]) in ports and int(status["metastore"]["uri"].rsplit(":", 1)[1]) in ports
    assert beyond_loopback(sorted(seen)) == []

    before_down = stack_pids(home)
    assert int(gateway["url"].rsplit(":", 1)[1]) in ports
    assert set(airflow["pids"].values()) | {status["metastore"]["pid"], gateway["pid"]} <= before_down
    assert "stopped: airflow, gateway, metastore" in staged(home, "down")
    left = stack_pids(home)
    assert left == set(), [Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left]
    assert staged(home, "status", code=1).count("not running") == 3
    print(f"staged up: {up_seconds:.1f}s; staged sql's first prompt: {first_prompt:.2f}s "
          f"(load {os.getloadavg()[0]:.1f})")


def sql_client_on_the_gateway(home: Path, gateway_url: str) -> float:
    """``staged sql`` without flags: on the stack's gateway, its first prompt within
    :data:`FIRST_PROMPT_SECONDS` of the process start (scaled by the load beyond the cores),
    naming the current database (after USE too). Returns the seconds to the first prompt."""
    # A real terminal type; no cursor-position requests (pexpect does not answer them).
    env = _env(home) | {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    started = time.monotonic()
    child = pexpect.spawn(str(STAGED), ["sql"], env=env, cwd=str(REPO), encoding="utf-8", timeout=120,
                          dimensions=(50, 160))
    try:
        child.expect_exact("staged:default>")
        seconds = time.monotonic() - started
        assert f"on the gateway {gateway_url}" in child.before
        child.send("USE stack;\r")
        child.expect_exact("succeeded")
        child.expect_exact("staged:stack>")
        child.send("SELECT orders FROM orders_daily WHERE ds = '2024-01-02';\r")
        child.expect(r"\|\s+10\s+\|")
        child.expect_exact("staged:stack>")
        child.send("exit;\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    # The target is for a machine with a core to spare; a loaded one (the suite's other worker,
    # other sessions) stretches every wall time by its runnable processes per core.
    load = os.getloadavg()[0]
    limit = FIRST_PROMPT_SECONDS * max(1.0, load / (os.cpu_count() or 1))
    assert seconds <= limit, f"first prompt after {seconds:.2f} s (load {load:.1f}: limit {limit:.1f} s)"
    return seconds
