"""What a killed run left running is found by its mark and stopped, within its scope only: a run reaps its own
target's runs of its set, never another target of the same set sharing this machine (two test boards on
loopback ran fio in parallel, and one board's next run SIGKILLed the other's fio)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runner import reap
from runner.collectors.run import Collectors
from runner.run_context import RunContext
from runner.steps.base import StepFailed
from tests.helpers import wait_for


def _marked(mark: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, reap.MARK: mark})


def test_a_reap_stays_inside_its_target_and_set() -> None:
    set_id = f"reap-test-{os.getpid()}"
    a, b, other = _marked(f"{set_id}/board-a/0001-fio"), _marked(f"{set_id}/board-b/0001-fio"), \
        _marked(f"another-{set_id}/board-a/0001-fio")
    try:
        # board-a's next run: its own earlier run is stopped; board-b's run and another set's are not touched
        result = reap.reap(f"{set_id}/board-a", keep_mark=f"{set_id}/board-a/0002-read")
        assert [p["pid"] for p in result["stopped"]] == [a.pid] and result["left"] == []
        assert a.wait(10) == -9
        assert b.poll() is None and other.poll() is None
        # the whole set is one scope too (what a test asks after a campaign: anything of the set still running?)
        assert [pid for pid, _comm, _mark in reap.strays(set_id)] == [b.pid]
    finally:
        for proc in (a, b, other):
            proc.kill()
            proc.wait()


# a step process that forks a child which leaves its process group and session, as fio's job processes do; the
# child says its pid once it has left (the parent printing it right after the fork raced the child's setsid: under
# load the test saw the child still in the leader's session)
LEADER_AND_SETSID_CHILD = """
import os, sys, time
child = os.fork()
if child == 0:
    os.setsid()
    print(os.getpid(), flush=True)
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_what_left_a_step_process_group_is_stopped_in_its_own_run(tmp_path: Path) -> None:
    """fio's job processes call setsid: once fio's leader was SIGKILLed mid-run its group was gone, the run was
    recorded while a job process read on, and only the next run's runner stopped it (its strays_stopped). Now
    stopping a step's process stops what left its group too, before the record is written, which says so."""
    ctx = RunContext({}, str(tmp_path), Collectors([], str(tmp_path / "bin"), str(tmp_path), None))
    leader = ctx.spawn([sys.executable, "-c", LEADER_AND_SETSID_CHILD], name="leader")
    child = int(wait_for("the child process", lambda: (tmp_path / "leader.stdout").read_text().strip(), 30))
    try:
        assert os.getsid(child) == child != os.getsid(leader.pid)  # outside the leader's group and session
        os.kill(leader.pid, signal.SIGKILL)
        with pytest.raises(StepFailed, match="leader exited with -9"):
            ctx.wait(leader, 30)
        ctx.cleanup()  # what the runner does before it writes run.json
        assert not _running(child), "the child that left the step's group outlived the run"
        assert [(p["pid"], p["process"]) for p in ctx.left_running["stopped"]] == [(child, "leader")]
        assert ctx.left_running["left"] == []
    finally:
        if _running(child):
            os.kill(child, signal.SIGKILL)

