"""Where a spark-submit job's Python and driver address come from (pure logic of SubmitTarget)."""

from __future__ import annotations

import sys

import pytest

from airflow_provider_staged.engine.runners import SubmitTarget


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
