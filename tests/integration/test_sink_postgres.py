"""The built-in PostgreSQL sink in batch writes and a stream's pruned journal, on a real PostgreSQL
and the session's Spark."""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from pyspark.sql.readwriter import DataFrameWriter

from airflow_provider_staged.sink.api import WriterContext, check_committer_idempotent, commit_write
from airflow_provider_staged.sink.postgres import PostgresSink
from airflow_provider_staged.sink.runtime import stage_batch, write_batch
from airflow_provider_staged.sink.secret_files import secrets_dir
from airflow_provider_staged.sink.staged import COMMITTABLES_FILE, SinkStagedTable
from airflow_provider_staged.sink.tasks import write_task
from airflow_provider_staged.staging.journal import AttemptState, TaskRef
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.staging.pruning import prune_journal
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.staging.versions import DEFAULT_GRACE_SECONDS
from tests.integration.staged_helpers import stream_all_files


@pytest.fixture
def settings(metastore, tmp_path):
    return StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))


@pytest.fixture
def target(postgres_conn_id):
    return f"jdbc://{postgres_conn_id}/public.s_{uuid.uuid4().hex[:8]}"


def read(postgres, target):
    table = target.rsplit("/", 1)[1]
    with psycopg.connect(postgres.conninfo()) as conn:
        rows = sorted(conn.execute(f"SELECT id, label FROM {table}").fetchall())
        staged = conn.execute(
            "SELECT count(*) FROM pg_class WHERE starts_with(relname, %s)", (table.split(".")[1] + "__s",)
        ).fetchone()[0]
    return rows, staged


def test_append_then_overwrite_in_one_transaction_each(spark, postgres, settings, target):
    sink = PostgresSink(target, settings)
    write_batch(spark.sql("SELECT id, concat('a', id) AS label FROM range(5)").repartition(2), sink)
    write_batch(spark.sql("SELECT id, concat('a', id) AS label FROM range(5, 8)"), sink)
    assert read(postgres, target) == ([(i, f"a{i}") for i in range(8)], 0)
    overwrite = PostgresSink(target, settings, "overwrite")
    write_batch(spark.sql("SELECT id, 'b' AS label FROM range(2)"), overwrite)
    assert read(postgres, target) == ([(0, "b"), (1, "b")], 0)
    states = {(r.kind, r.state) for r in settings.journal.records()}
    assert states == {("jdbc_append", AttemptState.COMMITTED)}


def test_committer_idempotency_and_replay(spark, postgres, settings, target):
    sink = PostgresSink(target, settings)
    data = spark.sql("SELECT id, 'x' AS label FROM range(4)")
    context = WriterContext("q7-b3-r1", "q7", 3, "append", data.schema.json(), streaming=True)
    committed = write_task(sink, context, iter(data.toArrow().to_batches()))
    # A failed attempt of the same task staged its rows too: never published, swept.
    failed = replace(context, attempt_number=1, task_attempt_id=9)
    write_task(sink, failed, iter(data.toArrow().to_batches()))
    check_committer_idempotent(sink, committed, lambda: read(postgres, target))
    assert read(postgres, target) == ([(i, "x") for i in range(4)], 0)
    replay = replace(context, write_id="q7-b3-r2")
    again = write_task(sink, replay, iter(data.toArrow().to_batches()))
    assert not commit_write(sink, replay, again)
    assert read(postgres, target) == ([(i, "x") for i in range(4)], 0)


def test_bad_target_is_refused_naming_it(settings):
    with pytest.raises(ValueError, match=r"'jdbc://x/a\.b\.c'"):
        PostgresSink("jdbc://x/a.b.c", settings)
    with pytest.raises(ValueError, match="'merge'"):
        PostgresSink("jdbc://x/public.t", settings, mode="merge", connection=object())


def _files_with(directory: Path, secret: bytes) -> list[str]:
    return [str(path) for path in directory.rglob("*") if path.is_file() and secret in path.read_bytes()]


def test_password_is_in_no_journal_attempt_dir_option_or_log(spark, postgres, settings, target, monkeypatch,
                                                               caplog):
    """A batch write and a staged build (journal kind ``sink``, settled by reconcile from the
    journal alone) commit, and the password is nowhere: the pickled sink in Spark's write options,
    the journal, the attempt directory, the logs; the workers' secret file is gone afterwards."""
    secret = postgres.password.encode()
    options: list[str] = []
    spark_option = DataFrameWriter.option

    def spy(writer: DataFrameWriter, key: str, value: object) -> DataFrameWriter:
        if key == "sink":
            options.append(str(value))
        return spark_option(writer, key, value)

    monkeypatch.setattr(DataFrameWriter, "option", spy)
    caplog.set_level(logging.DEBUG)
    sink = PostgresSink(target, settings)
    write_batch(spark.sql("SELECT id, concat('a', id) AS label FROM range(4)").repartition(2), sink)
    task = TaskRef("sink_dag", "build", "run-1", 1)
    staged = SinkStagedTable(sink, settings.journal, settings.journal_dir, task=task)
    staged.begin()
    stage_batch(spark.sql("SELECT id, 'b' AS label FROM range(4, 6)"), sink,
                os.path.join(staged.location, COMMITTABLES_FILE))
    staged.written(Manifest(location=staged.location, format="sink"))
    journal = Path(settings.journal_dir)
    assert (Path(staged.location) / COMMITTABLES_FILE).is_file()
    leaks = _files_with(journal, secret) + _files_with(Path(staged.location), secret)
    # Recovery: reconcile rebuilds the sink from the journal (no password there) and commits.
    actions = reconcile(settings, lambda task: "success")
    assert [a.action for a in actions] == ["committed"]
    assert read(postgres, target) == ([(i, f"a{i}") for i in range(4)] + [(4, "b"), (5, "b")], 0)
    assert len(options) == 2 and all(secret not in base64.b64decode(o) and secret not in o.encode()
                                     for o in options)
    assert leaks == [] and _files_with(journal, secret) == []
    assert not any(secrets_dir(settings.journal_dir).iterdir()), "a secret file outlived its write"
    assert postgres.password not in caplog.text


def test_a_pruned_streams_replay_is_still_dropped(spark, postgres, settings, target, tmp_path):
    """A stream of four micro-batches, then the journal pruning of the maintenance pass (every
    ended record of the target, past the grace period): no record of the target is left, and
    the replay of the last micro-batch (its commit removed from Spark's checkpoint) is still
    dropped, because PostgreSQL itself records the stream's last batch."""
    sink = PostgresSink(target, settings)
    source, checkpoint = tmp_path / "source", str(tmp_path / "checkpoint")
    for n in range(4):  # one file each: one micro-batch each (maxFilesPerTrigger)
        rows = spark.sql(f"SELECT id, concat('p', id) AS label FROM range({10 * n}, {10 * n + 3})")
        rows.coalesce(1).write.mode("append").parquet(str(source))

    stream_all_files(spark, "id BIGINT, label STRING", source, sink, checkpoint)
    expected = ([(i, f"p{i}") for n in range(4) for i in range(10 * n, 10 * n + 3)], 0)
    assert read(postgres, target) == expected
    appends = [r.attempt_id for r in settings.journal.records() if r.kind == "jdbc_append"]
    assert len(appends) == 4, appends
    later = time.time() + DEFAULT_GRACE_SECONDS + 1
    assert sorted(prune_journal(settings, keep_last=0, now=later)) == sorted(appends)
    assert not [r for r in settings.journal.records() if r.kind == "jdbc_append"]

    for name in ("3", ".3.crc"):  # a crash after the sink's commit of batch 3, before Spark's
        os.remove(os.path.join(checkpoint, "commits", name))
    stream_all_files(spark, "id BIGINT, label STRING", source, sink, checkpoint)
    assert os.path.exists(os.path.join(checkpoint, "commits", "3"))  # Spark ran batch 3 again
    assert read(postgres, target) == expected  # the replay was dropped, its staged table too
    # Dropped before any attempt began: the target's own record of batch 3 answered.
    assert not [r for r in settings.journal.records() if r.kind == "jdbc_append"]
