"""What a killed run left running is found by its mark and stopped, within its scope only: a run reaps its own
target's runs of its set, never another target of the same set sharing this machine (two test boards on
loopback ran fio in parallel, and one board's next run SIGKILLed the other's fio)."""

from __future__ import annotations

import os
import subprocess
import sys

from runner import reap


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
