"""Per-process collectors together, as an experiment's ``collect:`` combines them: the counters reader and the
thread sampler follow the same step process. (Each had its own tests; together, every run of a step died in
``on_spawn`` with an IndexError, because the counters reader in the running list has an argv of another shape.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.parsers import parse
from runner.collectors.run import Collectors
from tests.helpers import build_native_tools

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")


def test_counters_and_threads_follow_the_same_step_process(tmp_path: Path) -> None:
    native = build_native_tools()
    specs = [{"kind": "counters", "period_ms": 20}, {"kind": "threads", "period_ms": 5}]
    collectors = Collectors(specs, str(native), str(tmp_path), None)
    collectors.start_global()
    try:
        # a step's process: python with a second thread, alive long enough for a few reads of both
        proc = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                                 "t = threading.Thread(target=time.sleep, args=(0.3,)); t.start(); t.join()"])
        collectors.on_spawn(proc.pid)
        collectors.on_spawn(proc.pid + 1_000_000)  # a second spawn of the step (a child): nothing new starts
        assert proc.wait(timeout=60) == 0
    finally:
        errors = collectors.stop_all()
    assert errors == []
    samples = parse("sampler-threads", (tmp_path / "threads.txt").read_bytes())
    counters = parse("counters", (tmp_path / "counters.txt").read_bytes())
    assert {row["tid"] for row in samples} >= {proc.pid}  # the sampler followed the step, not the fake child
    assert proc.pid in {row["tid"] for row in counters if row.get("kind", "thread") == "thread"}
