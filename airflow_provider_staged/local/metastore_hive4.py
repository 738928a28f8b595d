"""A stock Hive 4 standalone metastore on PostgreSQL: the tests' second stock metastore.

Run as a team runs it: the release's binary distribution (the ``hive4`` profile of
jvm/pom.xml: Maven Central's ``hive-standalone-metastore-server`` ``bin`` tarball, unpacked once
into a user cache) with the Hadoop client jars it needs beside it; the schema created by
Hive's schematool; the distribution's ``conf/metastore-site.xml`` and Hive's defaults otherwise.
Hive 4 binds one address itself (``hive.metastore.thrift.bind.host``): no loopback launcher.
The database password reaches schematool and the server in a ``hive-site.xml`` only its owner
can read (``metastore_postgres.server_settings``), never on a command line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psycopg

from airflow_provider_staged.discovery.embedded import MetastoreInfo, metastore_status
from airflow_provider_staged.engine.session import jvm_dir
from airflow_provider_staged.local.metastore import jdk_tool, launch_metastore
from airflow_provider_staged.local.metastore_postgres import MetastoreDatabase, server_settings
from airflow_provider_staged.local.processes import ServiceError, free_port
from airflow_provider_staged.storage.s3 import S3Options

PROFILE = "hive4"
SCHEMA_TOOL_CLASS = "org.apache.hadoop.hive.metastore.tools.schematool.MetastoreSchemaTool"
SERVER_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"


def distribution() -> Path:
    """The unpacked Hive 4 metastore distribution (``bin/ conf/ lib/ scripts/``), unpacked once
    per tarball into a user cache."""
    tarballs = sorted((jvm_dir() / PROFILE).glob("hive-standalone-metastore-server-*-bin.tar.gz"))
    if not tarballs:
        raise ServiceError(
            f"no Hive 4 metastore tarball in {jvm_dir() / PROFILE}: run scripts/setup.sh with "
            "STAGED_SETUP_TESTS=1 (jvm/pom.xml profile hive4)"
        )
    tarball = tarballs[-1]
    digest = hashlib.sha256(f"{tarball.resolve()}:{tarball.stat().st_size}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-provider-staged"
    target = cache / f"hive4-metastore-{digest}"
    if not target.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix="hive4-", dir=cache))
        with tarfile.open(tarball) as archive:
            archive.extractall(build, filter="data")
        (top,) = build.iterdir()  # apache-hive-metastore-<version>-bin/
        with contextlib.suppress(OSError):  # atomic; a concurrent unpack that got there first is kept
            top.rename(target)
        shutil.rmtree(build, ignore_errors=True)
    return target


def java_command(main_class: str, conf_dir: Path, classpath: Sequence[Path] = ()) -> list[str]:
    """``java`` running ``main_class`` of the distribution with ``conf_dir`` (hive-site.xml) first."""
    dist = distribution()
    return [
        jdk_tool("java") or "java",
        "-Xmx512m",
        # As for Hive 2.3: without it log4j looks for the async context's LMAX disruptor.
        "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.selector.ClassLoaderContextSelector",
        "-cp",
        os.pathsep.join(
            [
                str(conf_dir),
                str(dist / "conf"),
                f"{dist / 'lib'}/*",
                f"{jvm_dir() / PROFILE}/*",
                *map(str, classpath),
            ]
        ),
        main_class,
    ]


def has_schema(database: MetastoreDatabase) -> bool:
    """Whether schematool already created the metastore's schema in ``database``."""
    with psycopg.connect(database.conninfo()) as db:
        return db.execute("SELECT to_regclass('\"VERSION\"') IS NOT NULL").fetchone()[0]


def init_schema(database: MetastoreDatabase, conf_dir: Path) -> None:
    """``schematool -dbType postgres -initSchema`` (its password from ``conf_dir/hive-site.xml``)."""
    command = [
        *java_command(SCHEMA_TOOL_CLASS, conf_dir),
        "-dbType",
        "postgres",
        "-initSchema",
        "-url",
        database.jdbc_url,
        "-driver",
        "org.postgresql.Driver",
        "-userName",
        database.user,
    ]
    # schematool finds scripts/metastore/upgrade/postgres under METASTORE_HOME.
    env = dict(os.environ, METASTORE_HOME=str(distribution()))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise ServiceError(f"Hive 4 schematool -initSchema failed ({done.returncode}): {done.stdout[-2000:]}")


def start_hive4_metastore(database: MetastoreDatabase, home: Path, port: int | None = None) -> MetastoreInfo:
    """Create the schema with schematool unless present, then start the server on 127.0.0.1 in
    the background (state, logs and the warehouse under ``home``, as ``start_metastore``)."""
    home = home.resolve()
    running = metastore_status(home)
    if running is not None:
        return running
    settings, classpath = server_settings(database, home)
    conf_dir, *jars = classpath
    if not has_schema(database):
        init_schema(database, conf_dir)
    port = port or free_port()

    def command(warehouse: Path) -> list[str]:
        settings.update(
            {
                "hive.metastore.thrift.bind.host": "127.0.0.1",
                "hive.metastore.warehouse.dir": warehouse.as_uri(),
                # S3A (the profile's, of Hive's own Hadoop) for s3a:// locations: endpoints and
                # path style here, the keys from the environment (Hadoop's credential chain).
                **S3Options.from_env().hadoop_conf(),
            }
        )
        return [
            *java_command(SERVER_CLASS, conf_dir, jars),
            "-p",
            str(port),
            *[arg for key, value in settings.items() for arg in ("--hiveconf", f"{key}={value}")],
        ]

    return launch_metastore(home, port, command)
