"""Whose emulation state a runner's repair may undo: only a dead owner's.

Every runner repairs first what dead runners left (their cgroups, read_ahead_kb). An owner was alive only while its
command line named its run, which holds for a runner but not for anything else using the emulation (a benchmark, a
test): their live cgroups were removed and their processes killed by the next runner on the machine. The owner is
now told by its pid and start time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.emulation import repair, state
from runner.util import start_time


def test_a_live_owner_whose_command_line_does_not_name_its_run_is_alive() -> None:
    mine = state.owner("run-not-in-my-command-line")
    assert mine["pid"] == os.getpid() and mine["start"] == start_time(os.getpid())
    assert state.owner_alive(mine)


def test_another_process_at_the_owners_pid_is_not_the_owner() -> None:
    assert not state.owner_alive(dict(state.owner("r"), start="1"))  # same pid, started at another tick


def test_a_dead_owner_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    recorded = {"pid": child.pid, "start": start_time(child.pid), "run_id": "r"}
    child.wait()
    assert not state.owner_alive(recorded)


def test_an_older_runners_state_without_a_start_time_is_told_by_its_command_line() -> None:
    assert not state.owner_alive({"pid": os.getpid(), "run_id": "no-such-run-in-the-command-line"})
    first_word = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
    assert state.owner_alive({"pid": os.getpid(), "run_id": first_word})


def test_repair_leaves_a_live_non_runner_owners_cgroups_and_removes_a_dead_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_EMULATE_STATE", str(tmp_path))
    live_cgroup, dead_cgroup = tmp_path / "cg-live", tmp_path / "cg-dead"  # plain directories stand in
    live_cgroup.mkdir()
    dead_cgroup.mkdir()
    state.save_state(dict(state.owner("bench"), cgroups=[str(live_cgroup)]), state.run_state_path(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = {"pid": child.pid, "start": start_time(child.pid), "run_id": "gone", "cgroups": [str(dead_cgroup)]}
    child.wait()
    state.save_state(dead, state.run_state_path(child.pid))
    done = repair.repair_dead_runs()
    assert [d["from_pid"] for d in done] == [child.pid]
    assert live_cgroup.is_dir() and Path(state.run_state_path(os.getpid())).exists()
    assert json.loads(Path(state.run_state_path(os.getpid())).read_text())["run_id"] == "bench"
