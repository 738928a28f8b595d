"""``staged mt create`` refuses a definition that does not fit its query before anything exists.

The command runs as a user runs it (a process of its own, its own Spark session), against the
real metastore; Airflow is an address where nothing listens, so that whatever gets past the check
fails at the first contact with Airflow, after the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

STAGED = Path(sys.executable).with_name("staged")
DEAD_AIRFLOW = "http://127.0.0.1:9"


def test_create_checks_the_definition_against_sparks_analysis(spark, metastore, tmp_path: Path) -> None:
    db = "mtcheck_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.src USING parquet AS SELECT id, CAST(id AS STRING) AS ds FROM range(3)")
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STAGED_"))}
    env |= {"STAGED_HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def create(query: str, partitioned_by: str, *options: str,
               metastore_uri: str | None = metastore.uri) -> subprocess.CompletedProcess[str]:
        source = tmp_path / "t.sql"
        source.write_text(f"CREATE MATERIALIZED TABLE {db}.t\nPARTITIONED BY ({partitioned_by})\n"
                          f"FRESHNESS = INTERVAL '1' DAY\nAS {query};\n")
        metastore_option = [] if metastore_uri is None else ["--metastore-uri", metastore_uri]
        command = [str(STAGED), "mt", "--endpoint", DEAD_AIRFLOW, "--definitions-dir", str(definitions),
                   *metastore_option, "--username", "u", "--password", "p", "create", str(source), *options]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    unreachable = create(f"SELECT id, ds FROM {db}.src", "ds", metastore_uri="thrift://127.0.0.1:9")
    assert unreachable.returncode == 1
    assert unreachable.stderr.splitlines() == [
        "error: cannot reach the Hive Metastore at thrift://127.0.0.1:9: Could not connect to any of "
        "[('127.0.0.1', 9)]"], unreachable.stderr

    bad_partition = create(f"SELECT id, ds FROM {db}.src", "day")
    assert bad_partition.returncode == 1, bad_partition.stdout + bad_partition.stderr
    assert (f"{db}.t not created: " in bad_partition.stderr
            and "Partition column 'day' not defined in the query's schema. Available columns: ['id', 'ds']"
            in bad_partition.stderr), bad_partition.stderr
    assert "Traceback" not in bad_partition.stderr

    missing_source = create(f"SELECT id, ds FROM {db}.nowhere", "ds")
    assert missing_source.returncode == 1
    assert "Spark cannot analyse its query" in missing_source.stderr
    assert f"`{db}`.`nowhere` cannot be found" in missing_source.stderr, missing_source.stderr

    assert list(definitions.iterdir()) == []  # nothing was installed
    assert not spark.catalog.tableExists(f"{db}.t")

    # Without a metastore (none configured, no local one) the check is skipped, and said so.
    unchecked = create(f"SELECT id, ds FROM {db}.src", "day", metastore_uri=None)
    assert unchecked.returncode == 1 and "127.0.0.1:9" in unchecked.stderr, unchecked.stderr
    assert "not checked against its query: no metastore configured" in unchecked.stderr

    # A fitting definition passes the check and fails only at Airflow; so does an unchecked one.
    for passed in (create(f"SELECT id, ds FROM {db}.src", "ds"),
                   create(f"SELECT id, ds FROM {db}.src", "day", "--no-check")):
        assert passed.returncode == 1
        assert "not created" not in passed.stderr and "127.0.0.1:9" in passed.stderr, passed.stderr
