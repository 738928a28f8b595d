"""Build the SparkSession that reads source tables from the Hive Metastore."""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from airflow_provider_staged.staging.errors import ServiceError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Output of the Spark JVM: Spark's log4j lines keep their own level; other lines are INFO.
jvm_log = logging.getLogger("airflow_provider_staged.engine.spark_jvm")
# Spark's default log4j2 layout: "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m".
_LOG4J_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) (.*)$")
# The lines of a stack trace that log4j writes after its record.
_CONTINUATION = re.compile(r"\s|Caused by:|Suppressed:|[\w$]+(\.[\w$]+)+(Exception|Error|Throwable)\b")
_LOG4J_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                 "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}

# Debian's libpostgresql-jdbc-java (scripts/setup.sh installs it); STAGED_JDBC_JAR overrides.
DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"


def jvm_dir() -> Path:
    """Where scripts/setup.sh copies the profiles of jvm/pom.xml (``STAGED_JVM_DIR`` overrides)."""
    return Path(os.environ.get("STAGED_JVM_DIR") or Path(sys.prefix) / "jvm")


def s3_jars() -> list[Path]:
    """S3A's jars (hadoop-aws and its AWS SDK) when installed and built for this pyspark's own
    Hadoop: hadoop-aws of another Hadoop release breaks S3A (and its class loading) in Spark."""
    import pyspark

    jars = sorted((jvm_dir() / "s3").glob("*.jar"))
    hadoop = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not hadoop:
        return []
    version = hadoop[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    return jars if any(jar.name == f"hadoop-aws-{version}.jar" for jar in jars) else []


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def master_on_this_host(master: str) -> bool:
    """A ``local`` master, or a cluster manager on loopback: its executors run on this host."""
    host = urlparse(master).hostname if "://" in master else None
    return master.startswith("local") or host in LOOPBACK_HOSTS


def jars_conf(on_this_host: bool) -> dict[str, str]:
    """The PostgreSQL JDBC driver (JDBC staged tables) and S3A with its AWS SDK (``s3a://``
    warehouses), each when installed.

    JVMs on this host put them on their class path: ``spark.jars`` would copy them (700 MB with
    the AWS SDK) into each application's temporary directory, and a killed driver leaves that
    behind. Executors elsewhere get them shipped by ``spark.jars``.
    """
    jdbc = Path(os.environ.get("STAGED_JDBC_JAR", DEFAULT_JDBC_JAR))
    jars = [jdbc] if jdbc.is_file() else []
    jars += s3_jars()
    if not jars:
        return {}
    if on_this_host:
        class_path = os.pathsep.join(map(str, jars))
        return {"spark.driver.extraClassPath": class_path, "spark.executor.extraClassPath": class_path}
    return {"spark.jars": ",".join(map(str, jars))}


def s3_conf() -> dict[str, str]:
    """S3A's settings that are not secrets, from the process's default S3 options (the secrets
    reach the JVM through its environment, or :func:`apply_s3_secrets`)."""
    from airflow_provider_staged.storage.files import s3_options
    from airflow_provider_staged.storage.s3 import SPARK_SCHEME_CONF

    hadoop = s3_options("").hadoop_conf()
    return {**SPARK_SCHEME_CONF, **{f"spark.hadoop.{key}": value for key, value in hadoop.items()}}


def apply_s3_secrets(session: SparkSession, location: str) -> None:
    """Give the running session's S3A the options (with their keys) of ``location``'s bucket,
    e.g. from an Airflow ``aws`` connection: set in its Hadoop configuration, never in a conf
    that Spark prints. A no-op for other locations and over Spark Connect."""
    from airflow_provider_staged.storage.files import s3_options
    from airflow_provider_staged.storage.s3 import S3_SCHEMES

    parsed = urlparse(location)
    context = getattr(session, "sparkContext", None)
    if parsed.scheme not in S3_SCHEMES or context is None:
        return
    hadoop = context._jsc.hadoopConfiguration()
    for key, value in s3_options(parsed.netloc).hadoop_conf(parsed.netloc, secrets=True).items():
        hadoop.set(key, value)



def spark_submit_env() -> dict[str, str]:
    """spark-submit from the pyspark wheel needs to find its own bin directory and Java."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    env = {"PATH": f"{bin_dir}:{path}" if bin_dir not in path.split(":") else path}
    env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    return env

def hive_conf(metastore_uri: str, warehouse: str) -> dict[str, str]:
    """The Spark conf that points a session or a submitted job at the metastore."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": metastore_uri,
        "spark.sql.warehouse.dir": warehouse,
        # Readers must see the committed version directory, not a cached listing.
        "spark.sql.hive.filesourcePartitionFileCacheSize": "0",
    }


@functools.cache
def check_pyspark_install() -> None:
    """Fail, naming both versions, when pyspark-client is installed at another version than pyspark.

    Both install into the one ``pyspark/`` package (the Spark provider 6 requires the client), and
    pip cannot require them to be the same version: another client's Python files overwrite
    pyspark's, which then no longer match its jars.
    """
    try:
        client = metadata.version("pyspark-client")
    except metadata.PackageNotFoundError:
        return
    spark = metadata.version("pyspark")
    if client != spark:
        fix = (f"pip install pyspark-client=={spark}" if int(spark.split(".")[0]) >= 4 else
               f"pip install 'apache-airflow-providers-apache-spark<6' (6 requires pyspark-client 4), "
               f"pip uninstall pyspark-client, pip install --force-reinstall pyspark=={spark}")
        raise ServiceError(
            f"pyspark {spark} and pyspark-client {client} write the same pyspark package and must be "
            f"the same version: {fix}"
        )


def build_session(
    metastore_uri: str,
    warehouse: str,
    master: str = "local[*]",
    app_name: str = "staged",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession bound to the metastore."""
    check_pyspark_install()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    # Python workers (data sources, UDFs) need this interpreter's packages (pyarrow, the provider).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        "spark.ui.enabled": "false",
        # The console progress bar would be a log line per update in a task log.
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
        **jars_conf(master_on_this_host(master)),
        **s3_conf(),
        **hive_conf(metastore_uri, warehouse),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    _launch_jvm({"spark.master": master, "spark.app.name": app_name, **settings})
    session = builder.enableHiveSupport().getOrCreate()
    apply_s3_secrets(session, warehouse)
    return session


def _launch_jvm(conf: Mapping[str, str]) -> None:
    """Start the process's Spark JVM (as the builder would) with its output piped to ``jvm_log``.

    The JVM would inherit this process's stderr, which an Airflow 3 task supervisor logs at
    ERROR: every Spark warning would show as a red error line in the task log.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # the JVM of an earlier session is reused
        return
    read_end, write_end = os.pipe()
    # Reading starts first: if the JVM dies at launch, its reason is logged before the error.
    threading.Thread(target=_forward_jvm_output, args=(read_end,), name="spark-jvm-output",
                     daemon=True).start()
    try:
        gateway = launch_gateway(
            SparkConf(loadDefaults=False).setAll(list(conf.items())),
            popen_kwargs={"stdout": write_end, "stderr": write_end},
        )
    finally:
        os.close(write_end)  # the JVM holds its own copy
    SparkContext._ensure_initialized(gateway=gateway)


def _forward_jvm_output(read_end: int) -> None:
    level = logging.INFO
    with open(read_end, encoding="utf-8", errors="replace") as stream:
        for line in stream:
            line = line.rstrip()
            match = _LOG4J_LINE.match(line)
            if match:
                level, line = _LOG4J_LEVELS[match.group(1)], match.group(2)
            elif not _CONTINUATION.match(line):
                level = logging.INFO  # a stack trace's lines keep the level of their record
            if line:
                jvm_log.log(level, "%s", line)
