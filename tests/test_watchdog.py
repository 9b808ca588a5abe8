"""The controller's watchdog: a runner that does not finish within run_timeout_s is stopped, its run failed
with the reason, and the campaign goes on; nothing it started is left running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from tests.helpers import run_campaign

HANGS = """\
name: watchdog
files:
  data: {create: 8M}
cache: none
rounds: 2
run_timeout_s: 3
steps:
  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 30}
"""


def _fio_processes(path: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("fio") and path in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.slow  # a campaign
def test_a_run_past_its_time_limit_is_stopped_and_failed(tmp_path: Path) -> None:
    exp = tmp_path / "watchdog.yaml"
    exp.write_text(HANGS)
    scratch = f"/var/tmp/harness-tests/watchdog-{os.getpid()}"
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"), "--scratch", scratch, timeout=300)
    assert "no DONE after 3 s: stopping the runner" in done.stdout + done.stderr
    (path,) = (tmp_path / "results").iterdir()
    rs = load_result_set(path)
    runs = rs.manifest["runs"]
    # both rounds ran (the first stopped run did not end the campaign), both failed with the reason
    assert [r["status"] for r in runs] == ["failed", "failed"]
    for run in runs:
        assert run["error"].startswith("the run did not finish within 3 s (run_timeout_s) and was stopped")
    # the runs table carries the campaign's verdict, not the stopped runner's own (it recorded itself interrupted)
    table = rs.table("runs")
    assert list(table["status"]) == ["failed", "failed"]
    assert all(error.startswith("the run did not finish within 3 s") for error in table["error"])
    # well before fio's 30 s: the runner and its fio were stopped, not waited for
    assert not _fio_processes(scratch)
    raw = [p for p in (path / "raw" / "local").iterdir()]
    assert len(raw) == 2 and all((p / "runner.log").exists() for p in raw)
