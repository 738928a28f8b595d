"""Commit groups (``staging.groups``): all members published or none, on both journals, and the
decisions reconcile takes for a group cut short before, at and after its decision."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_staged.staging import groups
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import (
    JournaledStagedTable,
    abort_attempt,
    commit_written,
    run_group,
)
from airflow_provider_staged.staging.errors import CommitConflictError, StagingError
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, AttemptState
from airflow_provider_staged.staging.kinds import register
from airflow_provider_staged.staging.owner import ProcessRef
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.settings import StagedSettings


@register
class PointerTable(JournaledStagedTable):
    """A kind whose catalog is one file per target naming its current data directory."""

    kind = "test_group_pointer"

    def __init__(
        self, target: str, journal: AttemptJournal, root: Path, attempt_id: str | None = None
    ) -> None:
        super().__init__(target, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, attempt_id=attempt_id)
        self.root = root

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> PointerTable:
        return cls(record.target, settings.journal, Path(record.catalog["root"]), record.attempt_id)

    def pointer(self) -> Path:
        return self.root / "catalog" / self.target

    def target_exists(self) -> bool:
        return True

    def staging_location(self) -> str:
        return str(self.root / "data" / self.attempt_id)

    def write_spec(self) -> dict[str, Any]:
        return {"location": self.staging_location()}

    def catalog_ref(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    @contextlib.contextmanager
    def catalog_transaction(self, exclusive: bool = True) -> Iterator[None]:
        yield None

    def load_current(self, txn: Any) -> str | None:
        return self.pointer().read_text() if self.pointer().exists() else None

    def create_target(self, txn: Any, record: AttemptRecord, manifest: Any) -> None:
        self.pointer().parent.mkdir(parents=True, exist_ok=True)
        self.pointer().write_text(record.location)

    def swap(self, txn: Any, current: Any, record: AttemptRecord, manifest: Any) -> str:
        self.create_target(txn, record, manifest)
        return current

    def is_published(self, record: AttemptRecord) -> bool:
        return self.load_current(None) == record.location

    def discard(self, record: AttemptRecord) -> None:
        with contextlib.suppress(FileNotFoundError):
            Path(record.location, "rows").unlink()


@pytest.fixture(params=["files", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> StagedSettings:
    if request.param == "files":
        return StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "wh"), str(tmp_path / "journal"))
    postgres = request.getfixturevalue("postgres")
    return StagedSettings("thrift://127.0.0.1:9", str(tmp_path / "wh"), str(tmp_path / "journal"),
                          journal_url=postgres.url(), journal_schema="g_" + uuid.uuid4().hex[:12])


def _write(staged: JournaledStagedTable, spec: dict[str, Any]) -> dict[str, Any]:
    Path(spec["location"]).mkdir(parents=True)
    Path(spec["location"], "rows").write_text(staged.target)
    return {"location": spec["location"], "format": "none"}


def _members(settings: StagedSettings, root: Path, *targets: str) -> list[PointerTable]:
    return [PointerTable(target, settings.journal, root) for target in targets]


def _published(members: list[PointerTable]) -> list[bool]:
    return [m.is_published(m.journal.require(m.attempt_id)) for m in members]


def _written_group(settings: StagedSettings, members: list[PointerTable]) -> str:
    """A group whose members are all WRITTEN, undecided: where a process dies before deciding."""
    group = groups.begin_group(settings.journal, [(m.attempt_id, m.target) for m in members])
    for staged in members:
        staged.group = group
        staged.begin()
        staged.written(_write(staged, staged.write_spec()))
    return group


def test_a_group_publishes_every_member(settings: StagedSettings, tmp_path: Path) -> None:
    members = _members(settings, tmp_path, "db.a", "db.b")
    manifests, window = run_group(members, _write, 600)
    assert len(manifests) == 2 and window >= 0
    assert _published(members) == [True, True]
    group = settings.journal.require(members[0].journal.require(members[0].attempt_id).group or "")
    assert group.kind == groups.GROUP_KIND and group.state is AttemptState.COMMITTED
    assert groups.members_of(group) == [m.attempt_id for m in members]


def test_a_failing_member_aborts_the_group_and_every_member(settings: StagedSettings, tmp_path: Path) -> None:
    members = _members(settings, tmp_path, "db.a", "db.b")

    def write(staged: JournaledStagedTable, spec: dict[str, Any]) -> dict[str, Any]:
        if staged is members[1]:
            raise RuntimeError("the second INSERT failed")
        return _write(staged, spec)

    with pytest.raises(RuntimeError, match="second INSERT"):
        run_group(members, write, 600)
    first = settings.journal.require(members[0].attempt_id)
    assert first.state is AttemptState.ABORTED and not Path(first.location, "rows").exists()
    assert settings.journal.require(first.group or "").state is AttemptState.ABORTED
    assert _published(members[:1]) == [False] and not members[1].pointer().exists()


def test_reconcile_rolls_a_decided_group_forward(settings: StagedSettings, tmp_path: Path) -> None:
    members = _members(settings, tmp_path, "db.a", "db.b", "db.c")
    group = _written_group(settings, members)
    groups.decide(settings.journal, group)
    commit_written(members[0])  # the process dies after the first member's commit
    actions = {a.target: a.action for a in reconcile(settings)}
    rolled = "committed (its group was decided)"
    assert actions == {"db.b": rolled, "db.c": rolled}
    assert _published(members) == [True, True, True]
    with pytest.raises(CommitConflictError, match="was decided"):
        abort_attempt(members[1])  # a decided group's member is never aborted


def test_reconcile_aborts_a_group_whose_process_died_undecided(
    settings: StagedSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = ProcessRef.current()
    dead = ProcessRef(me.namespace, me.pid, me.started - 1000)  # this pid, another process's start
    monkeypatch.setattr(ProcessRef, "current", classmethod(lambda cls: dead))
    members = _members(settings, tmp_path, "db.a", "db.b")
    group = _written_group(settings, members)
    actions = sorted(a.action for a in reconcile(settings))
    assert actions == ["aborted", "aborted", "aborted"]
    assert settings.journal.require(group).state is AttemptState.ABORTED
    assert _published(members) == [False, False]
    assert all(settings.journal.require(m.attempt_id).state is AttemptState.ABORTED for m in members)


def test_reconcile_leaves_an_undecided_group_of_a_live_process(
    settings: StagedSettings, tmp_path: Path
) -> None:
    members = _members(settings, tmp_path, "db.a", "db.b")
    _written_group(settings, members)
    assert {a.action for a in reconcile(settings)} == {"left running"}


def test_an_aborted_member_aborts_its_group_so_it_is_never_decided(
    settings: StagedSettings, tmp_path: Path
) -> None:
    members = _members(settings, tmp_path, "db.a", "db.b")
    group = _written_group(settings, members)
    abort_attempt(members[1], "killed")
    with pytest.raises(CommitConflictError):
        groups.decide(settings.journal, group)
    assert settings.journal.require(group).state is AttemptState.ABORTED
    assert {a.action for a in reconcile(settings)} == {"aborted"}  # the other member follows
    assert _published(members) == [False, False]


def test_a_commit_failing_after_the_decision_is_committed_by_reconcile(
    settings: StagedSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = _members(settings, tmp_path, "db.a", "db.b")
    calls = []

    def unreachable(self: PointerTable, txn: Any, record: AttemptRecord, manifest: Any) -> None:
        calls.append(self.target)
        raise StagingError("catalog unreachable")  # a verdict: the catalog is unchanged

    monkeypatch.setattr(PointerTable, "create_target", unreachable)
    with pytest.raises(StagingError, match="decided but 2 commit"):
        run_group(members, _write, 600)
    assert calls == ["db.a", "db.b"]  # decided: the second is tried although the first failed
    monkeypatch.undo()
    assert {a.action for a in reconcile(settings)} == {"committed (its group was decided)"}
    assert _published(members) == [True, True]
