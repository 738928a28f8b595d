"""The Spark JVM's output reaches Python logging at Spark's own level, never as stderr errors."""

import logging
import os

import pytest

from airflow_provider_staged.engine.session import _forward_jvm_output, jvm_log

JVM_OUTPUT = """\
WARNING: Using incubator modules: jdk.incubator.vector
25/11/23 04:52:44 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
25/11/23 04:52:45 INFO SparkContext: Running Spark version 4.2.0
25/11/23 04:52:46 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)
org.apache.spark.SparkRuntimeException: injected refresh failure
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.raiseError(QueryExecutionErrors.scala:1)
Caused by: java.lang.IllegalStateException: boom
Setting default log level to "WARN".
"""


def test_levels_follow_spark_and_stack_traces_keep_theirs(caplog: pytest.LogCaptureFixture) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, JVM_OUTPUT.encode())
    os.close(write_end)
    with caplog.at_level(logging.DEBUG, logger=jvm_log.name):
        _forward_jvm_output(read_end)
    assert [(r.levelname, r.getMessage()[:40]) for r in caplog.records] == [
        ("INFO", "WARNING: Using incubator modules: jdk.in"),
        ("WARNING", "NativeCodeLoader: Unable to load native-"),
        ("INFO", "Using Spark's default log4j profile: org"),
        ("INFO", "SparkContext: Running Spark version 4.2."),
        ("ERROR", "Executor: Exception in task 0.0 in stage"),
        ("ERROR", "org.apache.spark.SparkRuntimeException: "),
        ("ERROR", "\tat org.apache.spark.sql.errors.QueryExe"),
        ("ERROR", "Caused by: java.lang.IllegalStateExcepti"),
        ("INFO", 'Setting default log level to "WARN".'),
    ]
