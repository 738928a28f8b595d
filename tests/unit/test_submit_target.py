"""Where a spark-submit job's Python and driver address come from (pure logic of SubmitTarget)."""

from __future__ import annotations

import sys

import pytest

from airflow_provider_staged.engine.runners import SubmitTarget
from airflow_provider_staged.engine.session import jars_conf


@pytest.mark.parametrize(
    ("master", "deploy_mode", "extra", "expected"),
    [
        # Everything on this host: this worker's interpreter for the driver and the executors.
        ("local[2]", "client", {}, {"spark.pyspark.python": sys.executable,
                                    "spark.pyspark.driver.python": sys.executable}),
        ("spark://127.0.0.1:7077", "client", {}, {"spark.pyspark.python": sys.executable,
                                                  "spark.pyspark.driver.python": sys.executable}),
        # Executors elsewhere: only what the connection says; the driver is still here.
        ("spark://spark-master:7077", "client", {}, {"spark.pyspark.driver.python": sys.executable}),
        ("yarn", "client", {"pyspark_python": "/opt/py/bin/python"},
         {"spark.pyspark.python": "/opt/py/bin/python", "spark.pyspark.driver.python": sys.executable}),
        # Cluster mode: nothing of this worker's paths.
        ("k8s://https://api:6443", "cluster", {}, {}),
        ("yarn", "cluster", {"pyspark_python": "./env/bin/py", "pyspark_driver_python": "./env/bin/py"},
         {"spark.pyspark.python": "./env/bin/py", "spark.pyspark.driver.python": "./env/bin/py"}),
    ],
)
def test_python_comes_from_the_connection_unless_everything_runs_here(master, deploy_mode, extra, expected):
    target = SubmitTarget(master, deploy_mode, extra)
    assert target.python_conf() == expected


def test_only_a_local_or_loopback_client_driver_is_on_this_host():
    assert SubmitTarget("local[*]", "client", {}).on_this_host
    assert SubmitTarget("spark://localhost:7077", "client", {}).on_this_host
    assert not SubmitTarget("spark://127.0.0.1:7077", "cluster", {}).on_this_host
    assert not SubmitTarget("spark://10.0.0.5:7077", "client", {}).on_this_host


def test_jars_go_on_the_class_path_on_this_host_and_are_shipped_elsewhere(tmp_path, monkeypatch):
    jdbc = tmp_path / "postgresql.jar"
    jdbc.write_bytes(b"")
    monkeypatch.setenv("STAGED_JDBC_JAR", str(jdbc))
    monkeypatch.setenv("STAGED_JVM_DIR", str(tmp_path / "no-jvm"))
    # Copied per application (and left behind by a killed driver) when given as spark.jars.
    assert jars_conf(on_this_host=True) == {
        "spark.driver.extraClassPath": str(jdbc), "spark.executor.extraClassPath": str(jdbc)}
    assert jars_conf(on_this_host=False) == {"spark.jars": str(jdbc)}
    monkeypatch.setenv("STAGED_JDBC_JAR", str(tmp_path / "missing.jar"))
    assert jars_conf(on_this_host=True) == {}
