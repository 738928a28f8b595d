"""Stopping a background process stops its whole process group (real processes, no mocks)."""

from __future__ import annotations

import time
from pathlib import Path

from airflow_provider_staged.local.processes import group_alive, pid_alive, start_background, stop_pid


def test_stop_pid_kills_a_group_member_that_ignores_sigterm(tmp_path: Path) -> None:
    member_file = tmp_path / "member.pid"
    # The leader dies on SIGTERM; its child ignores SIGTERM (kept across exec) and stays.
    script = f"(trap '' TERM; echo $BASHPID > {member_file}; exec sleep 120) & exec sleep 120"
    leader = start_background(["bash", "-c", script], tmp_path / "leader.pid", tmp_path / "log")
    deadline = time.monotonic() + 10
    while not member_file.exists() or not member_file.read_text().strip():
        assert time.monotonic() < deadline, "the group member did not start"
        time.sleep(0.05)
    member = int(member_file.read_text())
    assert group_alive(leader) and pid_alive(member)

    stop_pid(leader, timeout=1.0)

    assert not pid_alive(leader)
    assert not pid_alive(member), "a member that ignored SIGTERM outlived stop_pid"
    assert not group_alive(leader)
