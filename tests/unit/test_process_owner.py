"""An attempt's owning process (``staging.owner``): gone only where that is certain."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import psutil

from airflow_provider_staged.staging.journal import AttemptRecord
from airflow_provider_staged.staging.owner import ProcessRef


def test_this_process_is_not_gone_and_an_ended_one_is() -> None:
    assert not ProcessRef.current().gone()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        owner = replace(ProcessRef.current(), pid=child.pid, started=psutil.Process(child.pid).create_time())
        assert not owner.gone()
    finally:
        child.kill()
        child.wait()
    assert owner.gone()


def test_a_reused_pid_is_another_process() -> None:
    current = ProcessRef.current()
    assert replace(current, started=current.started - 60).gone()


def test_another_host_or_namespace_is_never_judged() -> None:
    current = ProcessRef.current()
    assert not replace(current, namespace="elsewhere/boot/pid:[1]", pid=2**22 + 7).gone()
    assert not replace(current, namespace=None, pid=2**22 + 7).gone()


def test_the_owner_survives_the_journal_format() -> None:
    record = AttemptRecord("a1", "hive", "db.t", "create", "/tmp/x", owner=ProcessRef.current())
    assert AttemptRecord.from_json(record.to_json()).owner == record.owner
    assert AttemptRecord.from_json(replace(record, owner=None).to_json()).owner is None


def test_a_record_from_a_newer_version_is_read() -> None:
    record = AttemptRecord("a1", "hive", "db.t", "create", "/tmp/x")
    newer = record.to_json().replace('"attempt_id"', '"field_of_a_later_version": 1,\n "attempt_id"', 1)
    assert AttemptRecord.from_json(newer) == record
