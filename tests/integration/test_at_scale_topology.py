"""docker/'s at-scale topology: the compose file checked, validated, and run natively on loopback.

There is no Docker engine on CI, so the topology test starts what ``docker/docker-compose.yml``
describes on 127.0.0.1 and free ports, from that file's own commands and environment (service
addresses become loopback ports, container paths temporary directories):

- PostgreSQL (``tests/fixtures/postgres_server.py``) with the databases of the ``postgres``
  service (``POSTGRES_DB`` and ``docker/init-airflow-db.sql``);
- the ``secrets`` service's script, which generates the secrets every Airflow process shares;
- the ``metastore-schema`` and ``metastore`` commands: the Hive Metastore on PostgreSQL;
- a Spark standalone master and worker (``tests/fixtures/spark_standalone.py``);
- Airflow (``local/airflow_server.py``: api-server, scheduler, dag-processor, triggerer) with the
  environment of the compose file's Airflow services: LocalExecutor on PostgreSQL, the shared
  secrets (their ``_CMD`` commands run here, as Airflow would run them), the connections, the
  cluster as the refresh tasks' Spark master; the DAGs folder is the project's ``dags/``, as the
  image ships it, plus the spark-submit test DAG.

Then one CTAS through spark-submit (the Spark provider's hook) and one materialized-table
refresh, each triggered through the REST API, and the committed rows are read back from the
files the metastore points at.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import psutil
import psycopg
import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.discovery.embedded import AirflowInfo, MetastoreInfo
from airflow_provider_staged.local.airflow_server import fetch_token, start_airflow, stop_airflow
from airflow_provider_staged.local.processes import free_port, start_background, stop_pid, wait_for_port
from tests.fixtures.postgres_server import PostgresServer, start_postgres, stop_postgres
from tests.fixtures.spark_standalone import StandaloneCluster, start_cluster, stop_cluster
from tests.integration.staged_helpers import table_location
from tests.integration.test_mt_workflow_e2e import RUN_TIMEOUT
from tests.integration.test_mt_workflow_e2e import Rest as WorkflowRest
from tests.integration.test_spark_submit import master_apps

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
AIRFLOW_SERVICES = ("airflow-migrate", "airflow-api-server", "airflow-scheduler",
                    "airflow-dag-processor", "airflow-triggerer")
LONG_RUNNING = ("postgres", "metastore", "spark-master", "spark-worker", *AIRFLOW_SERVICES[1:])
SHARED_SECRETS = ("AIRFLOW__API_AUTH__JWT_SECRET_CMD", "AIRFLOW__API__SECRET_KEY_CMD",
                  "AIRFLOW__CORE__FERNET_KEY_CMD", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD",
                  "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC_CMD")
DOCKER_COMPOSE_VERSION = "1.29.2"

# What dags/example_staged_ctas.py builds as raw.orders: dags/materialized/orders_daily.sql reads it.
ORDERS_SQL = (
    "SELECT id AS order_id, CAST(date_add(DATE'2024-01-01', CAST(id % 7 AS INT)) AS STRING) AS ds, "
    "CAST(id % 97 AS DECIMAL(10, 2)) AS amount FROM range(10000)"
)
REFRESHED_DS = "2024-01-03"  # id % 7 == 2


def compose() -> dict[str, Any]:
    """The compose file as compose reads it (YAML anchors and merge keys resolved)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    return {name: spec["condition"] for name, spec in service.get("depends_on", {}).items()}


# -- the compose file, by construction ------------------------------------------------------------


def test_airflow_services_share_one_environment_and_its_secrets() -> None:
    found = services()
    base = found["airflow-api-server"]["environment"]
    for name in AIRFLOW_SERVICES:
        env = dict(found[name]["environment"])
        env.pop("SPARK_LOCAL_IP", None)  # the scheduler runs the Spark drivers: its own address
        assert env == base, name
    assert set(SHARED_SECRETS) <= set(base)
    # Every secret comes from the volume the `secrets` service fills; none is written here.
    for key in SHARED_SECRETS:
        assert "/run/staged-secrets/" in base[key], key
    assert not any(key in base for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY"))
    # Tasks' Spark drivers run in the scheduler container; executors reach them by its name.
    spark_conf = json.loads(base["AIRFLOW_CONN_STAGED_DEFAULT"])["extra"]["spark_conf"]
    assert spark_conf["spark.driver.host"] == found["airflow-scheduler"]["hostname"]


def test_services_start_in_order_and_are_watched() -> None:
    found = services()
    built = [name for name, service in found.items() if "build" in service]
    assert built == ["secrets"]  # one image, built once; the others reuse it by name
    image = found["secrets"]["image"]
    assert all(found[name]["image"] == image for name in found if name != "postgres")
    assert depends_on(found["postgres"]) == {"secrets": "service_completed_successfully"}
    assert depends_on(found["metastore-schema"]) == {"postgres": "service_healthy"}
    assert depends_on(found["metastore"]) == {"metastore-schema": "service_completed_successfully"}
    assert depends_on(found["airflow-migrate"]) == {"postgres": "service_healthy"}
    assert depends_on(found["airflow-api-server"]) == {"airflow-migrate": "service_completed_successfully"}
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        assert depends_on(found[name]) == {
            "airflow-migrate": "service_completed_successfully",
            "airflow-api-server": "service_healthy",
            "metastore": "service_healthy",
            "spark-master": "service_healthy",
        }, name
    for name in LONG_RUNNING:
        assert found[name]["restart"] == "unless-stopped", name
    for name in set(LONG_RUNNING) - {"spark-worker"}:
        assert found[name]["healthcheck"]["test"][0] == "CMD", name
    assert "pgdata:/var/lib/postgresql/data" in found["postgres"]["volumes"]
    # Published: the UI and REST API only, on the host's loopback. Inside its container the
    # metastore must listen beyond loopback for the other containers to reach it.
    assert {name: found[name]["ports"] for name in found if "ports" in found[name]} == {
        "airflow-api-server": ["127.0.0.1:8080:8080"]
    }
    assert "--host 0.0.0.0" in found["metastore"]["command"]


def compose_tool() -> Path:
    """``docker-compose`` (the Python implementation) in a cached throwaway venv, outside the
    project's: it pins PyYAML<6, which Airflow cannot use; ``config`` needs no Docker engine."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    venv = cache / "airflow-provider-staged" / f"docker-compose-{DOCKER_COMPOSE_VERSION}"
    tool = venv / "bin" / "docker-compose"
    if tool.exists():
        return tool
    shutil.rmtree(venv, ignore_errors=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for command in (
        [sys.executable, "-m", "venv", str(venv)],
        # Its own requirements but PyYAML 6 (5.x does not build on Python 3.11 without Cython 2).
        [*pip, "--no-deps", f"docker-compose=={DOCKER_COMPOSE_VERSION}"],
        [*pip, "docker>=5,<8", "dockerpty>=0.4.1,<1", "docopt>=0.6.1,<1", "jsonschema>=2.5.1,<4",
         "python-dotenv>=0.13,<1", "requests>=2.20,<3", "texttable>=0.9,<2", "websocket-client>=0.32,<1",
         "distro>=1.5,<2", "PyYAML>=6,<7"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}{done.stderr}"
    return tool


def test_docker_compose_validates_the_file(tmp_path: Path) -> None:
    tool = compose_tool()
    done = subprocess.run([str(tool), "-f", str(COMPOSE_FILE), "config", "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # The validator is strict: a misspelled key is refused.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("healthcheck:", "healthchek:", 1))
    done = subprocess.run([str(tool), "-f", str(broken), "config", "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "healthchek" in done.stderr


# -- the same topology, natively ------------------------------------------------------------------


@dataclass
class Loopback:
    """Maps the compose network onto this machine: ``service:port`` addresses to 127.0.0.1 and
    free ports, host names and "every interface" to 127.0.0.1, container paths to directories
    under ``root``."""

    root: Path
    addresses: dict[str, int] = field(default_factory=dict)
    hosts: tuple[str, ...] = ("airflow-scheduler", "0.0.0.0")
    paths: tuple[str, ...] = (
        "/run/staged-secrets",
        "/run/staged-auth",
        "/warehouse",
        "/var/lib/staged-metastore",
        "/opt/airflow/dags",
    )

    def path(self, container_path: str) -> Path:
        return self.root / container_path.strip("/").replace("/", "_")

    def value(self, text: str) -> str:
        """A compose value here (``$$`` is compose's escape of ``$``)."""
        text = str(text).replace("$$", "$")
        for address, port in self.addresses.items():
            text = text.replace(address, f"127.0.0.1:{port}")
        for container_path in self.paths:
            text = text.replace(container_path, str(self.path(container_path)))
        return "127.0.0.1" if text in self.hosts else text

    def connection(self, text: str) -> str:
        """An ``AIRFLOW_CONN_*`` JSON value: its host and port to the loopback address."""
        conn = json.loads(self.value(text))
        scheme, _, host = conn["host"].rpartition("://")
        conn["port"] = self.addresses[f"{host}:{conn['port']}"]
        conn["host"] = f"{scheme}://127.0.0.1" if scheme else "127.0.0.1"
        spark_conf = conn.get("extra", {}).get("spark_conf", {})
        spark_conf.update({key: self.value(value) for key, value in spark_conf.items()})
        return json.dumps(conn)

    def env(self, environment: Mapping[str, Any]) -> dict[str, str]:
        return {key: self.value(value) for key, value in environment.items()}

    def command(self, command: str, port: int | None = None) -> list[str]:
        """A compose command here: ``python`` is this interpreter, ``--port`` the given one."""
        args = [self.value(arg) for arg in shlex.split(command)]
        if args[0] == "python":
            args[0] = sys.executable
        if port is not None:
            args[args.index("--port") + 1] = str(port)
        return args


def tool_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment with this interpreter's bin directory first (``python``, ``airflow``)."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, **extra}


def run_checked(command: list[str], env: Mapping[str, str]) -> str:
    done = subprocess.run(command, env=dict(env), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def airflow_env(found: dict[str, dict[str, Any]], loop: Loopback) -> dict[str, str]:
    """The scheduler's environment here; ``*_CMD`` secrets resolved by running their commands
    (the local Airflow sets some of these keys itself, and a plain value wins over ``_CMD``)."""
    env: dict[str, str] = {}
    for key, value in found["airflow-scheduler"]["environment"].items():
        if key.startswith("AIRFLOW_CONN_"):
            env[key] = loop.connection(value)
        elif key.endswith("_CMD"):
            env[key.removesuffix("_CMD")] = run_checked(loop.command(value), tool_env({})).strip()
        else:
            env[key] = loop.value(value)
    return env


def create_databases(postgres: PostgresServer, found: dict[str, dict[str, Any]]) -> None:
    """What the postgres image does on first start: ``POSTGRES_DB`` and the init scripts."""
    init_sql = (DOCKER / "init-airflow-db.sql").read_text()
    with psycopg.connect(postgres.conninfo(), autocommit=True) as db:
        db.execute(f"CREATE DATABASE {found['postgres']['environment']['POSTGRES_DB']}")
        db.execute(init_sql)


@dataclass
class Topology:
    postgres: PostgresServer
    metastore: MetastoreInfo
    cluster: StandaloneCluster
    airflow: AirflowInfo
    token: str
    admin_password: str

    def database(self, name: str) -> psycopg.Connection:
        return psycopg.connect(
            host=self.postgres.host, port=self.postgres.port, user=self.postgres.user,
            password=self.postgres.password, dbname=name,
        )


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    found = services()
    root = tmp_path_factory.mktemp("at-scale")
    loop = Loopback(root)
    for container_path in loop.paths:
        loop.path(container_path).mkdir()
    # Spark's two JVMs boot while PostgreSQL and the metastore come up.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        cluster_started = pool.submit(start_cluster, root / "spark", 1, "1g", 240)

        def stop_started_cluster() -> None:
            if cluster_started.exception() is None:
                stop_cluster(cluster_started.result())

        cleanups: list[Callable[[], None]] = [stop_started_cluster]
        try:
            postgres = start_postgres()
            cleanups.append(lambda: stop_postgres(postgres))
            loop.addresses["postgres:5432"] = postgres.port
            create_databases(postgres, found)
            # The secrets script keeps what exists: the database password is this server's.
            secrets_dir = loop.path("/run/staged-secrets")
            (secrets_dir / "postgres_password").write_text(postgres.password + "\n")
            run_checked(loop.command(shlex.join(found["secrets"]["command"])), tool_env({}))

            metastore_env = tool_env(loop.env(found["metastore"]["environment"]))
            schema_command = loop.command(found["metastore-schema"]["command"])
            created = run_checked(schema_command, metastore_env)
            assert "hive_locks" in created, created
            # A restarted one-shot service changes nothing.
            assert "none (all present)" in run_checked(schema_command, metastore_env)
            home = loop.path("/var/lib/staged-metastore")
            port = loop.addresses["metastore:9083"] = free_port()
            log_file = home / "logs" / "metastore.log"
            pid = start_background(loop.command(found["metastore"]["command"], port),
                                   home / "metastore.pid", log_file, metastore_env, home)
            cleanups.append(lambda: stop_pid(pid))
            wait_for_port(port, pid, 180, log_file)
            metastore = MetastoreInfo("127.0.0.1", port, pid, str(loop.path("/warehouse")), str(home))

            cluster = cluster_started.result()
            loop.addresses["spark-master:7077"] = cluster.port
            yield from _with_airflow(found, loop, postgres, metastore, cluster, cleanups)
        finally:
            for cleanup in reversed(cleanups):
                cleanup()


def _with_airflow(
    found: dict[str, dict[str, Any]],
    loop: Loopback,
    postgres: PostgresServer,
    metastore: MetastoreInfo,
    cluster: StandaloneCluster,
    cleanups: list[Callable[[], None]],
) -> Iterator[Topology]:
    port = loop.addresses["airflow-api-server:8080"] = free_port()
    env = airflow_env(found, loop)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://")
    home = loop.root / "airflow"
    dags = loop.path("/opt/airflow/dags")
    shutil.copytree(REPO / "dags", dags, dirs_exist_ok=True)  # what the image ships
    shutil.copy(REPO / "tests" / "dags" / "staged_test_dags.py", dags)
    env |= {
        # The spark-submit test DAG builds raw.orders on the cluster.
        "STAGED_TEST_TARGET": "raw.orders",
        "STAGED_TEST_SQL": ORDERS_SQL,
        "STAGED_TEST_PURPOSE": "create",
        "STAGED_TEST_SPARK_CONN_ID": "spark_default",
        "STAGED_TEST_SPARK_CONF": json.dumps({"spark.ui.enabled": "false"}),
    }
    cleanups.append(lambda: stop_airflow(home))
    airflow = start_airflow(home, dags, port=port, extra_env=env, timeout=400)
    # Airflow's (writable) passwords file holds the secret the README points `staged mt` users to.
    password = (loop.path("/run/staged-secrets") / "airflow_admin_password").read_text().strip()
    passwords = json.loads((loop.path("/run/staged-auth") / "simple_auth_manager_passwords.json").read_text())
    assert passwords == {"admin": password}
    token = fetch_token(airflow.endpoint, "admin", password)
    yield Topology(postgres, metastore, cluster, airflow, token, password)


class Rest(WorkflowRest):
    """REST API v2 as the compose file's ``admin`` (password from the secrets volume)."""

    def __init__(self, topology: Topology) -> None:
        self.http = httpx.Client(
            base_url=topology.airflow.endpoint + "/api/v2",
            headers={"Authorization": f"Bearer {topology.token}"},
            timeout=120,
        )

    def run(self, dag_id: str, conf: dict[str, Any] | None = None) -> dict[str, Any]:
        """Trigger ``dag_id`` once it is parsed, unpause it, and wait until the run ends."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while self.dag(dag_id).status_code != 200:
            assert time.monotonic() < deadline, f"DAG {dag_id} not parsed within {RUN_TIMEOUT}s"
            time.sleep(1)
        run = self.http.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        run_id = run.raise_for_status().json()["dag_run_id"]
        self.http.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        return self.wait_for_run(dag_id, run_id)


def parquet_rows(location: str) -> list[dict[str, Any]]:
    """The rows of the Parquet files at ``location`` (a reader's view, without Spark)."""
    return pq.read_table(urlparse(location).path).to_pylist()


@pytest.mark.slow
def test_ctas_and_refresh_on_the_at_scale_topology(topology: Topology) -> None:
    rest = Rest(topology)
    created = run_checked(
        [str(Path(sys.executable).parent / "staged"), "create-database", "raw", "analytics"],
        topology.airflow.env,
    )
    assert "database raw: created" in created, created

    run = rest.run("staged_spark_submit")
    assert run["state"] == "success", run

    orders = parquet_rows(table_location(topology.metastore, "raw.orders") or "")
    assert len(orders) == 10000
    assert sum(row["amount"] for row in orders) == sum(Decimal(i % 97) for i in range(10000))

    refresh = {"isPeriodic": False, "staticPartitions": {"ds": REFRESHED_DS}}
    run = rest.run("mt__analytics__orders_daily", refresh)
    assert run["state"] == "success", run

    with MetastoreClient(topology.metastore.uri) as client:
        partition = client.thrift.get_partition("analytics", "orders_daily", [REFRESHED_DS])
    rows = parquet_rows(partition.sd.location)
    ids = [i for i in range(10000) if i % 7 == 2]
    assert [(row["orders"], row["revenue"]) for row in rows] == [
        (len(ids), sum(Decimal(i % 97) for i in ids))
    ]

    # Where it all happened: the metastore's tables and locks in PostgreSQL, Airflow's runs in
    # PostgreSQL, the Spark applications on the standalone cluster.
    with topology.database("metastore") as db:
        tables = db.execute(
            'SELECT d."NAME", t."TBL_NAME" FROM "TBLS" t JOIN "DBS" d ON t."DB_ID" = d."DB_ID"'
        ).fetchall()
        next_lock = db.execute("SELECT nl_next FROM next_lock_id").fetchone()
        held = db.execute("SELECT count(*) FROM hive_locks").fetchone()
    assert {("raw", "orders"), ("analytics", "orders_daily")} <= set(tables)
    assert next_lock is not None and next_lock[0] > 1 and held == (0,)  # locks taken and released
    with topology.database("airflow") as db:
        states = db.execute(
            "SELECT dag_id, state FROM dag_run WHERE run_type = 'manual' ORDER BY dag_id"
        ).fetchall()
    assert states == [("mt__analytics__orders_daily", "success"), ("staged_spark_submit", "success")]
    apps = {app["name"] for app in master_apps(topology.cluster)["completedapps"]}
    assert {"staged-write", "staged"} <= apps, apps

    # The Materialized tables page (in the api-server) and `staged mt` (in any Airflow container)
    # read the catalog and reach the API from the compose environment alone.
    response = httpx.get(
        f"{topology.airflow.endpoint}/materialized-tables/api/tables",
        timeout=120,
        headers={"Authorization": f"Bearer {topology.token}"},
    )
    page = response.raise_for_status().json()
    assert page["catalog_error"] is None, page["catalog_error"]
    assert {row["table"]: row["table_exists"] for row in page["tables"]} == {"analytics.orders_daily": True}
    staged = str(Path(sys.executable).parent / "staged")
    described = run_checked(
        [staged, "mt", "describe", "analytics.orders_daily", "--output", "json"],
        {**topology.airflow.env, "STAGED_AIRFLOW_PASSWORD": topology.admin_password},
    )
    assert json.loads(described)["partitions"] == f"ds={REFRESHED_DS}", described

    # The metastore's server: loopback only here, the lock reaper on, Derby's test mode off, and
    # the database password on no command line.
    server = psutil.Process(topology.metastore.pid)
    command_line = " ".join(server.cmdline())
    assert "hive.compactor.initiator.on=true" in command_line and "hive.txn.timeout=" in command_line
    assert "hive.in.test" not in command_line and topology.postgres.password not in command_line
    listening = [c.laddr.ip for c in server.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    addresses = [ipaddress.ip_address(ip) for ip in listening]  # Java may bind ::ffff:127.0.0.1
    assert addresses and all(
        (getattr(address, "ipv4_mapped", None) or address).is_loopback for address in addresses
    ), listening
