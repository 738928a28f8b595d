"""The PostgreSQL sink keeps its password out of every pickle: secret files, fallback lookup."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_staged.catalogs.postgres_connections import PostgresConnection
from airflow_provider_staged.sink import postgres
from airflow_provider_staged.sink.postgres import PostgresSink
from airflow_provider_staged.sink.secret_files import read_secret, secret_file, secrets_dir
from airflow_provider_staged.sink.staged import SinkStagedTable
from airflow_provider_staged.sink.tasks import decode_sink, encode_sink
from airflow_provider_staged.staging.settings import StagedSettings

PASSWORD = "pw-3f9c1e-never-shipped"
CONNECTION = PostgresConnection("127.0.0.1", 5433, "db", "alice", PASSWORD)


@pytest.fixture
def sink(tmp_path: Path) -> PostgresSink:
    home = tmp_path / "home"
    settings = StagedSettings("thrift://127.0.0.1:1", str(tmp_path / "wh"), str(home / "journal"))
    return PostgresSink("jdbc://pg_conn/public.t", settings, connection=CONNECTION)


def _no_lookup(conn_id: str) -> PostgresConnection:
    raise AssertionError(f"looked connection {conn_id!r} up although the secret file was there")


def _contains_password(text: str | bytes) -> bool:
    return PASSWORD.encode() in (text.encode() if isinstance(text, str) else text)


def test_pickled_sink_has_no_password_and_looks_the_connection_up(sink, monkeypatch):
    encoded = encode_sink(sink)
    assert not _contains_password(encoded)
    assert not _contains_password(base64.b64decode(encoded))
    assert not _contains_password(repr(sink.connection)) and not _contains_password(repr(sink))
    looked_up = []

    def lookup(conn_id: str) -> PostgresConnection:
        looked_up.append(conn_id)
        return PostgresConnection("db.example", 5432, "db", "alice", "from-airflow")

    monkeypatch.setattr(postgres, "postgres_connection", lookup)
    restored = decode_sink(encoded)
    assert restored.connection.password == "from-airflow" and looked_up == ["pg_conn"]
    assert restored.connection.host == "db.example"  # the connection as it is now, not as recorded
    assert sink.connection.password == PASSWORD  # the driver's sink keeps its own


def test_shipped_sink_reads_the_secret_file_only_while_the_write_runs(sink, tmp_path, monkeypatch):
    monkeypatch.setattr(postgres, "postgres_connection", _no_lookup)
    with sink.shipping() as shipped:
        path = Path(shipped.secret_file)
        assert path.parent == tmp_path / "home" / "secrets"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        encoded = encode_sink(shipped)
        assert not _contains_password(encoded)
        assert not _contains_password(base64.b64decode(encoded))
        worker = decode_sink(encoded)  # what a Spark Python worker gets
        assert worker.connection == CONNECTION
    assert not path.exists(), "the secret file outlived the write"
    monkeypatch.setattr(postgres, "postgres_connection", lambda conn_id: CONNECTION)
    assert decode_sink(encoded).connection == CONNECTION  # after the write: the lookup


def test_the_sink_kind_journals_no_password(sink):
    staged = SinkStagedTable(sink, sink.settings.journal, sink.settings.journal_dir)
    assert not _contains_password(str(staged.catalog_ref()))
    assert not _contains_password(base64.b64decode(staged.catalog_ref()["sink"]))


def test_secret_file_is_deleted_on_failure_and_files_of_dead_drivers_are_swept(tmp_path):
    journal = str(tmp_path / "journal")
    with pytest.raises(RuntimeError), secret_file(journal, "x") as path:
        assert read_secret(path) == "x"
        raise RuntimeError("the write failed")
    assert read_secret(path) is None and not Path(path).exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with secret_file(journal, "y") as mine:
        host = Path(mine).name.split("-", 1)[0]
        left = secrets_dir(journal) / f"{host}-{dead.pid}-0123abcd"  # a SIGKILLed driver's file
        left.write_text("old")
        alive = secrets_dir(journal) / f"{host}-{os.getpid()}-4567cdef"  # a running write's file
        alive.write_text("live")
        with secret_file(journal, "z"):
            assert not left.exists(), "a dead driver's secret file was kept"
            assert alive.exists() and Path(mine).exists(), "a running write's secret file was deleted"
        alive.unlink()
