"""The runner a run's manifest entry records, and how it is stopped: never by its pid alone.

The entry keeps the runner's pid with its identity on the target (``runner_identity``: start time and boot id,
read there just after it started; ``harness/boards/transports/procid.py``) and the run's spec path, which its
command line contains. Whether it still runs, and every signal it is sent, is decided on the target against both:
once the pid names another process (the runner died and the number was reused, the board rebooted), that process
is left alone and the run is judged by what the runner left (its DONE and run.json, or none).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.boards.session import TargetSession
from harness.boards.transports.base import Transport
from harness.boards.transports.procid import OTHER, SAME, VANISHED
from harness.results.manifest import RunEntry

INTERRUPT_GRACE_S = 20.0


@dataclass(frozen=True)
class RecordedRunner:
    pid: int
    identity: str | None  # None: an entry an older harness wrote (the marker alone identifies the runner)
    marker: str  # the run's spec path: in the runner's command line

    @classmethod
    def started(cls, transport: Transport, pid: int, marker: str) -> RecordedRunner:
        """Identified on the target at once; one already ended is recorded as such (nothing matches it)."""
        return cls(pid, transport.identify(pid) or VANISHED, marker)

    @classmethod
    def from_entry(cls, entry: RunEntry, marker: str) -> RecordedRunner | None:
        pid = entry.get("runner_pid")
        return cls(int(pid), entry.get("runner_identity"), marker) if pid else None

    def fields(self) -> dict[str, Any]:
        """What the manifest entry records of it."""
        return {"runner_pid": self.pid, "runner_identity": self.identity}

    def state(self, transport: Transport) -> str:
        """SAME (it still runs), GONE, or OTHER (another process has its pid now)."""
        return transport.check(self.pid, self.identity, self.marker)

    def alive(self, transport: Transport) -> bool:
        return self.state(transport) == SAME

    def signal(self, transport: Transport, signum: int) -> str:
        """``signum`` to it if it is still the recorded runner (checked on the target, in the same command)."""
        return transport.signal_recorded(self.pid, signum, self.identity, self.marker)

    def replaced(self) -> str:
        return f"the recorded runner is gone and pid {self.pid} is now another process: left alone"


def lost_reason(transport: Transport, runner: RecordedRunner | None) -> str:
    """Why an adopted run's runner is not waited for: gone, or its pid another process's now."""
    if runner is not None and runner.state(transport) == OTHER:
        return runner.replaced()
    return "the recorded runner is gone without DONE"


def stop_runner(session: TargetSession, runner: RecordedRunner, why: str, say: Callable[[str], None]) -> None:
    """SIGTERM (the runner cleans up and writes its record), SIGKILL after INTERRUPT_GRACE_S; each only while the
    pid still names the recorded runner."""
    transport = session.transport
    say(f"{session.target.name}: {why}: stopping the runner (pid {runner.pid})")
    if runner.signal(transport, signal.SIGTERM) == OTHER:
        say(f"{session.target.name}: {runner.replaced()}")
        return
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while runner.alive(transport) and time.monotonic() < deadline:
        time.sleep(0.1)
    runner.signal(transport, signal.SIGKILL)
