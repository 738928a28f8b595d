"""When a micro-batch's commit may skip the replay checks: the run journaled its previous batch."""

from __future__ import annotations

from airflow_provider_staged.settings import StagedSettings
from airflow_provider_staged.sink.api import WriteRef
from airflow_provider_staged.sink.recovery import ran_previous_batch
from airflow_provider_staged.staging.journal import AttemptRecord


def test_only_a_run_past_its_first_batch_skips_the_replay_checks(tmp_path):
    settings = StagedSettings("thrift://127.0.0.1:9083", str(tmp_path / "wh"), str(tmp_path / "journal"))
    settings.journal.create(AttemptRecord("q1-b4-r1", "hive_append", "db.t", "create_or_replace", "file:/x"))

    def skips(write_id: str, batch_id: int, query_id: str = "q1", streaming: bool = True) -> bool:
        return ran_previous_batch(settings, WriteRef(write_id, query_id, batch_id, streaming))

    assert skips("q1-b5-r1", 5)  # run r1 journaled batch 4: batch 5 is new to every run
    assert not skips("q1-b5-r2", 5)  # a restarted run's first batch may be a replay
    assert not skips("q1-b4-r2", 4)  # the replay of batch 4 itself
    assert not skips("q1-b6-r1", 6)  # batch 5 of r1 not journaled (e.g. dropped as a replay)
    assert not skips("q2-b5-r1", 5, query_id="q2")  # another query
    assert not skips("q1-b0-r1", 0)
    assert not skips("q1-b5-r1", 5, streaming=False)
    assert not skips("w123", 5)  # a write id not of the streaming form
