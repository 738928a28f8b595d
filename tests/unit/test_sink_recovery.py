"""When a micro-batch's commit may skip the replay checks: the run journaled its previous batch."""

from __future__ import annotations

from airflow_provider_staged.sink.api import WriteRef
from airflow_provider_staged.sink.recovery import filter_recovered, ran_previous_batch
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState
from airflow_provider_staged.staging.settings import StagedSettings


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


def test_filter_recovered_asks_the_target_only_for_a_possible_replay(tmp_path):
    settings = StagedSettings("thrift://127.0.0.1:9083", str(tmp_path / "wh"), str(tmp_path / "journal"))
    committed = AttemptRecord("q1-b3-r1", "hive_append", "db.t", "create_or_replace", "file:/x")
    settings.journal.create(committed)
    settings.journal.transition(committed.attempt_id, AttemptState.COMMITTED)
    settings.journal.create(AttemptRecord("q1-b4-r1", "hive_append", "db.t", "create_or_replace", "file:/y"))
    settings.journal.transition("q1-b4-r1", AttemptState.ABORTED)
    asked: list[str] = []
    swept: list[str] = []

    def fresh(writes: list[WriteRef], recorded: bool = False) -> list[str]:
        def target_records(write: WriteRef) -> bool:
            asked.append(write.write_id)
            return recorded

        kept = filter_recovered(settings, writes, target_records, lambda write: swept.append(write.write_id))
        return [write.write_id for write in kept]

    # This write's own commit is journaled as committed: dropped, nothing asked.
    assert fresh([WriteRef("q1-b3-r1", "q1", 3, True)]) == []
    # A batch write, and a run's batch after one it journaled: kept without asking the target.
    assert fresh([WriteRef("w1", "w1", 0, False)]) == ["w1"]
    assert fresh([WriteRef("q1-b5-r1", "q1", 5, True)]) == ["q1-b5-r1"]
    assert asked == [] and swept == []
    # A restarted run's first batch: an earlier run committed it (journal), or the target records it.
    assert fresh([WriteRef("q1-b3-r2", "q1", 3, True)]) == []
    assert fresh([WriteRef("q1-b4-r2", "q1", 4, True)]) == ["q1-b4-r2"]  # the earlier run aborted
    assert fresh([WriteRef("q1-b4-r2", "q1", 4, True)], recorded=True) == []
    assert asked == swept == ["q1-b3-r2", "q1-b4-r2", "q1-b4-r2"]
