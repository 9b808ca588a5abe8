"""A recorded pid names the recorded process only while its identity (start time, boot id) and the marker in its
command line still match: the target-side check (harness/boards/transports/procid.py) that every signal to a
recorded runner goes through, here through the local transport (the script runs in this machine's sh)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.boards.transports.local import LocalTransport
from harness.boards.transports.procid import GONE, OTHER, SAME, VANISHED
from tests.helpers import wait_for

MARKER = "/var/tmp/harness/runs/set/0001-fio/spec.json"


def _detached(*args: str) -> int:
    """A sleeper that is not this process's child (as a runner adopted by --resume is not): ``args`` in its
    command line."""
    out = subprocess.run(["sh", "-c", 'python3 -c "$0" "$@" >/dev/null 2>&1 & echo $!',
                          "import time; time.sleep(600)", *args], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    started: list[int] = []
    yield started
    for pid in started:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()


def test_the_identity_is_the_start_time_and_the_boot_id(sleepers: list[int]) -> None:
    sleepers.append(pid := _detached(MARKER))
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert LocalTransport().identify(pid) == f"{_stat(pid)[19]}@{boot}"  # field 22 of /proc/PID/stat
    assert LocalTransport().identify(2 ** 22 + 1) is None  # beyond pid_max: nothing there


def test_another_process_at_the_recorded_pid_is_told_apart_and_never_signalled(sleepers: list[int]) -> None:
    transport = LocalTransport()
    sleepers.append(runner := _detached(MARKER))
    recorded = transport.identify(runner)
    assert transport.check(runner, recorded, MARKER) == SAME
    os.kill(runner, signal.SIGKILL)
    wait_for("the runner to be gone", lambda: transport.check(runner, recorded, MARKER) == GONE, 10)
    # the recorded identity, pointing at a process with the same command line (what a reused pid can look like).
    # A start time is counted in clock ticks (10 ms): a process forked within the runner's tick would carry its very
    # identity (1 in 40 here). A real reuse needs the pid counter to wrap first, so it is always ticks later: wait
    # two ticks, as the kernel's own order of events guarantees.
    time.sleep(2 / os.sysconf("SC_CLK_TCK"))
    sleepers.append(reused := _detached(MARKER))
    assert transport.check(reused, recorded, MARKER) == OTHER
    assert transport.signal_recorded(reused, signal.SIGKILL, recorded, MARKER) == OTHER
    assert transport.check(reused, transport.identify(reused), MARKER) == SAME  # still running: not signalled
    assert transport.check(reused, VANISHED, MARKER) == OTHER  # identified only after it had ended: nothing matches


def test_a_record_without_an_identity_is_checked_by_its_marker(sleepers: list[int]) -> None:
    """What a manifest of an older harness recorded (a pid alone): the spec path in the command line decides."""
    transport = LocalTransport()
    sleepers.append(unrelated := _detached())
    assert transport.check(unrelated, None, MARKER) == OTHER
    assert transport.signal_recorded(unrelated, signal.SIGKILL, None, MARKER) == OTHER
    sleepers.append(runner := _detached(MARKER))
    assert transport.signal_recorded(runner, signal.SIGKILL, None, MARKER) == SAME
    wait_for("the signalled runner to be gone", lambda: transport.check(runner, None, MARKER) == GONE, 10)
    assert transport.check(unrelated, None, None) == SAME  # untouched


def test_a_zombie_is_gone() -> None:
    child = subprocess.Popen(["true"])
    wait_for("the child to exit", lambda: _stat(child.pid)[0] == "Z", 10)  # not reaped yet: a zombie
    try:
        assert LocalTransport().check(child.pid, None, None) == GONE
    finally:
        child.wait()
