"""A local Hive Metastore Thrift server on Derby, run from the jars the pyspark wheel ships.

It listens on 127.0.0.1 only: Hive 2.3 has no bind-host option, so the server is started by a
small launcher (``java/LoopbackMetaStore.java``, compiled once with the JDK's ``javac``) that
does what ``HiveMetaStore.main`` does, on a loopback socket.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from airflow_provider_staged.discovery.embedded import (
    MetastoreInfo,
    metastore_pid_file,
    metastore_state_file,
    metastore_status,
    read_pid,
    staged_home,
)
from airflow_provider_staged.engine.session import s3_jars
from airflow_provider_staged.local.processes import (
    ServiceError,
    free_port,
    start_background,
    stop_pid,
    wait_for_port,
)
from airflow_provider_staged.storage.s3 import S3Options


def spark_home() -> Path:
    """``SPARK_HOME``, or the pyspark package directory, which holds Spark's jars."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def derby_conf(home: Path) -> dict[str, str]:
    """The embedded backing database: Derby under ``home``.

    The lock API (metastore.locks) needs the transaction tables: on Derby, Hive 2.3 creates them
    only in its test mode (on PostgreSQL see ``local/metastore_postgres.py``). Derby reads
    have no snapshot, so the store makes table reads and partition listings wait for a write
    that is under way (``java/SnapshotReadsStore.java``).
    """
    return {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
        "hive.in.test": "true",
        "hive.metastore.rawstore.impl": f"{JAVA_PACKAGE}.SnapshotReadsStore",
    }


JAVA_SOURCES = sorted(Path(__file__).with_name("java").glob("*.java"))
# The launcher alone: Hive's own server on a loopback socket, none of the embedded default's
# speed-ups (a stock metastore).
LAUNCHER_SOURCES = [Path(__file__).with_name("java") / "LoopbackMetaStore.java"]
JAVA_PACKAGE = "org.apache.hadoop.hive.metastore"
LAUNCHER_CLASS = f"{JAVA_PACKAGE}.LoopbackMetaStore"
# hive.txn.timeout: a lock whose holder died blocks the table's commits this long. Live holders
# heartbeat every locks.HEARTBEAT_SECONDS, so anything above twice that is safe.
DEFAULT_LOCK_EXPIRY_SECONDS = 60


def jdk_tool(name: str) -> str | None:
    """``name`` from ``$JAVA_HOME/bin``, else from ``PATH``."""
    return shutil.which(name, path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin")) or shutil.which(name)


def launcher_classes(java_sources: Sequence[Path] = JAVA_SOURCES) -> Path:
    """The compiled loopback launcher (with the embedded default's store and alter handler unless
    ``java_sources`` says otherwise), built once per sources and Spark jars into a user cache."""
    jars = spark_home() / "jars"
    sources = b"".join(source.read_bytes() for source in java_sources)
    digest = hashlib.sha256(sources + str(jars.resolve()).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-provider-staged"
    target = cache / f"metastore-launcher-{digest}"
    if target.is_dir():
        return target
    javac = jdk_tool("javac")
    if javac is None:
        raise ServiceError(
            "javac not found: the local metastore listens on 127.0.0.1 through a launcher compiled "
            "with a JDK; install one (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"
        )
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="launcher-", dir=cache))
    result = subprocess.run(
        [javac, "-nowarn", "-d", str(build), "-cp", f"{jars}/*", *map(str, java_sources)],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(build, ignore_errors=True)
        raise ServiceError(f"javac failed to compile {java_sources}: {result.stderr[-2000:]}")
    try:
        build.rename(target)  # atomic; a concurrent build that got there first is kept
    except OSError:
        shutil.rmtree(build, ignore_errors=True)
    return target


def metastore_command(
    port: int,
    home: Path,
    warehouse: Path,
    database: Mapping[str, str] | None = None,
    classpath: Sequence[Path] = (),
    loopback: bool = True,
    lock_timeout_seconds: int = DEFAULT_LOCK_EXPIRY_SECONDS,
    stock: bool = False,
) -> list[str]:
    """The server's command line; ``database`` (hiveconf settings) replaces the embedded Derby,
    ``classpath`` adds e.g. a JDBC driver or a directory holding a ``hive-site.xml``;
    ``loopback=False`` listens on every interface (Hive's own main, e.g. in a container);
    ``lock_timeout_seconds``: how long a table lock outlives its dead holder.

    ``stock`` (needs ``database``): Hive's own defaults, as a team's metastore runs them — only
    what creating the schema without schematool needs (pyspark ships no schematool scripts) and
    the connection pool among pyspark's jars; none of the project's Java, no lock expiry, column
    type changes checked (``hive.metastore.disallow.incompatible.col.type.changes`` true)."""
    if stock and database is None:
        raise ValueError("a stock metastore needs a database (the embedded Derby is never stock)")
    java = jdk_tool("java") or "java"
    launcher = loopback or database is None
    batched_alter = launcher and not stock
    settings = {
        # One batched read of the old partitions in alter_partitions (java/BatchedAlterHandler.java).
        **({"hive.metastore.alter.impl": f"{JAVA_PACKAGE}.BatchedAlterHandler"} if batched_alter else {}),
        **(derby_conf(home) if database is None else database),
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": warehouse.as_uri(),
        # Hive's default BoneCP pool is not among the jars pyspark ships; HikariCP is.
        "datanucleus.connectionPoolingType": "HikariCP",
        # It checks and makes table and database directories: S3A for s3a:// ones (its keys
        # come from the environment, Hadoop's default credential chain).
        **S3Options.from_env().hadoop_conf(),
    }
    if not stock:
        settings.update({
            # A replace may change column types; the data is new files, not a rewrite.
            "hive.metastore.disallow.incompatible.col.type.changes": "false",
            "hive.metastore.event.db.notification.api.auth": "false",
            # A committer killed while holding a table lock loses it after hive.txn.timeout: Hive
            # 2.3 times locks out only in the housekeeping thread that the compactor initiator
            # starts, first after reaper.start, then every reaper.interval.
            "hive.txn.timeout": f"{lock_timeout_seconds}s",
            "hive.compactor.initiator.on": "true",
            "hive.timedout.txn.reaper.start": "5s",
            "hive.timedout.txn.reaper.interval": "5s",
        })
    sources = LAUNCHER_SOURCES if stock else JAVA_SOURCES
    return [
        java,
        "-Xmx512m",
        # Without this the Hive jars die looking for a log4j async context class.
        "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.selector.ClassLoaderContextSelector",
        f"-Dderby.system.home={home}",
        "-cp",
        os.pathsep.join([
            *([str(launcher_classes(sources))] if launcher else []),
            f"{spark_home() / 'jars'}/*",
            *map(str, s3_jars()),
            *map(str, classpath),
        ]),
        # HiveMetaStore's main on a 127.0.0.1 socket, or Hive's own on every interface.
        LAUNCHER_CLASS if loopback else "org.apache.hadoop.hive.metastore.HiveMetaStore",
        "-p",
        str(port),
        *[arg for key, value in settings.items() for arg in ("--hiveconf", f"{key}={value}")],
    ]


def start_metastore(
    home: Path | None = None,
    port: int | None = None,
    database: Mapping[str, str] | None = None,
    classpath: Sequence[Path] = (),
    lock_timeout_seconds: int = DEFAULT_LOCK_EXPIRY_SECONDS,
    stock: bool = False,
) -> MetastoreInfo:
    """Start the metastore unless one recorded under ``home`` is running; return its info.

    ``database``, ``classpath``, ``lock_timeout_seconds`` and ``stock``: see
    :func:`metastore_command` (default: Derby under ``home``).
    """
    home = (home or staged_home()).resolve()
    running = metastore_status(home)
    if running is not None:
        return running
    port = port or free_port()

    def command(warehouse: Path) -> list[str]:
        return metastore_command(
            port, home, warehouse, database, classpath, lock_timeout_seconds=lock_timeout_seconds, stock=stock
        )

    return launch_metastore(home, port, command)


def launch_metastore(home: Path, port: int, command: Callable[[Path], list[str]]) -> MetastoreInfo:
    """Run ``command(warehouse)`` in the background (logs, pid, state and the warehouse under
    ``home``) and wait until it serves table locks on ``port``; return its info."""
    home.mkdir(parents=True, exist_ok=True)
    warehouse = home / "warehouse"
    warehouse.mkdir(exist_ok=True)
    log_file = home / "logs" / "metastore.log"
    pid_file = home / "metastore.pid"
    env = dict(os.environ, HADOOP_USER_NAME=os.environ.get("HADOOP_USER_NAME", "staged"))
    pid = start_background(command(warehouse), pid_file, log_file, env, home)
    try:
        wait_for_port(port, pid, timeout=120, log_file=log_file)
        _wait_for_lock_tables(f"thrift://127.0.0.1:{port}", deadline=time.monotonic() + 60)
    except BaseException:
        stop_pid(pid)
        raise
    info = MetastoreInfo("127.0.0.1", port, pid, str(warehouse), str(home))
    metastore_state_file(home).write_text(json.dumps(asdict(info)))
    return info


def _wait_for_lock_tables(uri: str, deadline: float) -> None:
    """Wait until a table lock can be taken: the server listens before its transaction tables
    are filled (on Derby it makes them at start-up), and a lock taken meanwhile fails with
    "no record found in next_lock_id"."""
    from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
    from airflow_provider_staged.catalogs.metastore.locks import MetastoreLockError

    while True:
        try:
            with MetastoreClient(uri) as client, client.locked("staged_start", "lock_tables_ready"):
                return
        except MetastoreLockError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def stop_metastore(home: Path | None = None) -> bool:
    """Stop the metastore recorded under ``home``; return whether one was running."""
    home = (home or staged_home()).resolve()
    pid = read_pid(metastore_pid_file(home))
    metastore_state_file(home).unlink(missing_ok=True)
    if pid is None:
        return False
    stop_pid(pid)
    metastore_pid_file(home).unlink(missing_ok=True)
    return True
