"""A campaign with a run perturbed on purpose: two busy processes this test starts (at a higher priority than the
step, stopped by pid) hold both CPUs during the first run only. The controller is paused at named phases
(HARNESS_PAUSE_AT, harness/campaign/stopping.py) so the load covers exactly that run: no sleeps, no timing luck.

What a user relies on: the run is marked perturbed with the foreign-CPU reason and kept in the tables; with
``--retry-perturbed 1`` it is measured again at the end of its round, as a new run of the same cell and cache
condition; report.md lists it; the summaries, figures and metric samples leave it out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.figures.report import fio_summary
from harness.results.loader import load_result_set
from harness.results.metrics import METRICS
from harness.results.samples import samples
from tests.helpers import REPO, STARTED, private_base, private_targets_dir, slow_only, wait_for, without_columns

pytestmark = pytest.mark.slow

# foreign CPU only (the reason is then one known line); the runqueue and steal of this shared VM are its own
EXPERIMENT = """\
name: perturbed
files:
  data: {create: 8M}
rounds: 2
collect: [blockstat]
validity: {max_foreign_cpu_pct: 10, max_runqueue_pct: null, max_steal_pct: null}
steps:
  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 1}
"""


def _burn() -> list[subprocess.Popen[bytes]]:
    def raise_priority() -> None:
        os.nice(-10)  # above the step's priority: another user's job that wins every CPU it wants

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=raise_priority)
            for _ in range(os.cpu_count() or 2)]


def _stop(burners: list[subprocess.Popen[bytes]]) -> None:
    for proc in burners:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def _pauses(lines: list[str], phase: str) -> int:
    return sum(f"paused at {phase}" in line for line in lines)


def test_a_perturbed_run_is_marked_measured_again_and_left_out(tmp_path: Path) -> None:
    slow_only("runs a campaign")
    exp, results, release = tmp_path / "perturbed.yaml", tmp_path / "results", tmp_path / "release"
    exp.write_text(EXPERIMENT)
    lines: list[str] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(exp), "--results", str(results), "--retry-perturbed", "1",
         "--scratch", str(private_base() / f"scratch-{tmp_path.name}"), "--targets-dir", str(private_targets_dir())],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**without_columns(os.environ), "HARNESS_PAUSE_AT": "preflight,between-runs",
             "HARNESS_PAUSE_RELEASE": str(release)})
    STARTED.append(proc)  # conftest stops it if this test fails midway
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    burners: list[subprocess.Popen[bytes]] = []
    try:
        wait_for("the pause after preflight", lambda: _pauses(lines, "preflight") >= 1, timeout=300)
        burners = _burn()  # run 1 is measured under the load...
        release.touch()
        wait_for("the pause after run 1", lambda: _pauses(lines, "between-runs") >= 1, timeout=300)
        _stop(burners)  # ... and nothing after it
        seen = 1
        while proc.poll() is None:  # the retry of run 1, run 2 (and a retry of it if this machine's load says so)
            release.touch()
            wait_for(f"pause {seen + 1} between runs or the end",
                     lambda n=seen: proc.poll() is not None or _pauses(lines, "between-runs") > n, timeout=300)
            seen += 1
    finally:
        _stop(burners)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.returncode == 0, "".join(lines)[-3000:]  # perturbed runs are ok runs: the campaign succeeded

    (path,) = results.iterdir()
    manifest = json.loads((path / "manifest.json").read_text())
    entries = {run["run_id"]: run for run in manifest["runs"]}
    first, retry, second = "0001-fio-cold-r1", "0001-fio-cold-r1-retry1", "0002-fio-cold-r2"
    assert list(entries)[:3] == [first, second, retry]  # the retry is added to the plan
    assert all(entries[run]["retry_of"] == second for run in list(entries)[3:])  # run 2, if perturbed by others
    assert entries[first]["perturbed"] is True
    assert entries[first]["perturbed_reason"].startswith("foreign CPU "), entries[first]
    assert "% > 10 %: other processes held" in entries[first]["perturbed_reason"]
    assert "-retry2" not in "".join(entries)  # --retry-perturbed 1: once at most

    rs = load_result_set(path)
    runs = rs.table("runs").set_index("run_id")
    assert runs.loc[retry, "retry_of"] == first and runs.loc[retry, "status"] == "ok"
    same = ["step", "cache", "round", "repeat", "variant"]
    assert runs.loc[retry, same].tolist() == runs.loc[first, same].tolist()  # same cell, same cache condition
    # at the end of its round: after run 1, before run 2 (round 2)
    assert runs.loc[first, "started_wall"] < runs.loc[retry, "started_wall"] < runs.loc[second, "started_wall"]
    # the load made the difference (measured, not assumed: this machine may have other load of its own)
    assert runs.loc[first, "foreign_cpu_pct"] > runs.loc[retry, "foreign_cpu_pct"]
    assert runs.loc[first, "foreign_cpu_pct"] > runs.loc[second, "foreign_cpu_pct"]
    assert bool(runs.loc[first, "perturbed"]) and runs.loc[first, "status"] == "ok"  # kept in the tables, marked

    usable = [run for run in (retry, second) if not runs.loc[run, "perturbed"]]
    assert first not in set(samples(rs, METRICS["fio_read_mbps"])["run_id"])
    assert sorted(samples(rs, METRICS["fio_read_mbps"])["run_id"]) == sorted(usable)
    ladder = fio_summary(rs)  # the report's and `harness run`'s fio ladder: empty (no columns) when no run is usable,
    # which happens when this machine's own load perturbed the retry and run 2 as well
    assert (0 if ladder.empty else ladder["n"].sum()) == len(usable)
    report = (path / "report.md").read_text()
    assert f"- `{first}` perturbed: foreign CPU " in report
    assert "left out of the summaries and figures" in report
    printed = "".join(lines)
    assert f"{first}: perturbed: foreign CPU" in printed
    assert "round 1: measuring 1 perturbed run(s) again (retry 1 of 1)" in printed
