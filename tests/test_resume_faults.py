"""--resume after a controller killed with SIGKILL: the run it left running is adopted without harm. A pid the
manifest recorded that names another process now is left alone; nothing is written to a data file while an adopted
run may still be measuring it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from tests.helpers import (
    REPO,
    STARTED,
    Controller,
    private_targets_dir,
    run_campaign,
    slow_only,
    wait_for,
    without_columns,
)

pytestmark = [pytest.mark.slow, pytest.mark.fault]


def _killed_mid_run(tmp_path: Path, runtime_s: float, extra_yaml: str = "") -> tuple[Controller, dict]:
    """A campaign SIGKILLed while its first run runs (paused just after the runner started): its manifest."""
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "run", runtime_s=runtime_s, release=release, extra_yaml=extra_yaml)
    code, _out, _err = ctl.stop(signal.SIGKILL)  # no clean-up of any kind: the runner runs on, detached
    assert code == -signal.SIGKILL
    (path,) = list(ctl.results.iterdir())
    manifest = json.loads((path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["running", "pending"]
    return ctl, manifest


class Resumed:
    """``harness run --resume SET`` in its own process, paused at each ``phase`` until ``release`` exists."""

    def __init__(self, ctl: Controller, set_id: str, phase: str, release: Path) -> None:
        slow_only("runs a campaign")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", "--resume", set_id, "--results", str(ctl.results),
             "--targets-dir", str(private_targets_dir())], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            env={**without_columns(os.environ), "HARNESS_PAUSE_AT": phase, "HARNESS_PAUSE_RELEASE": str(release)})
        STARTED.append(self.proc)
        self.lines: list[str] = []
        self.out: list[str] = []
        self.readers = [threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True),
                        threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True)]
        for reader in self.readers:
            reader.start()

    def paused(self, phase: str, nth: int) -> None:
        wait_for(f"pause {nth} at {phase}", lambda: sum(f"paused at {phase}" in x for x in self.lines) >= nth, 300)

    def finish(self) -> tuple[int, str]:
        try:
            self.proc.wait(timeout=300)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for reader in self.readers:
            reader.join(10)
        return self.proc.returncode, "".join(self.out) + "".join(self.lines)


def test_resume_writes_no_data_file_while_the_adopted_run_measures(tmp_path: Path) -> None:
    """--resume used to re-create the set's data file (32 MiB of writes) first, while the run it was about to adopt
    still read it: writes inside that run's measurement. Now the adopted run is waited for first: when it has
    ended (its pull), the data file is still the one it read, untouched; the run left is measured after."""
    ctl, manifest = _killed_mid_run(tmp_path, runtime_s=8)
    runner_pid = manifest["runs"][0]["runner_pid"]
    data = ctl.scratch / "data.bin"
    before = data.stat()
    assert Path(f"/proc/{runner_pid}").exists(), "the adopted run must still be running when the set resumes"
    release = tmp_path / "resume-go"
    resumed = Resumed(ctl, manifest["set_id"], "pull", release)
    resumed.paused("pull", 1)  # the adopted run has ended and is being pulled; nothing else has happened yet
    after = data.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size), \
        "the data file was re-created or written while the adopted run was live"
    release.touch()
    resumed.paused("pull", 2)
    release.touch()
    code, said = resumed.finish()
    assert code == 0, said
    (final,) = list(ctl.results.iterdir())
    rs = load_result_set(final)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]
    assert rs.manifest["runs"][0]["runner_pid"] == runner_pid  # adopted: waited for and pulled, not run again
    assert not list(ctl.scratch.glob("data.bin*")), "the data file was left in scratch"


def test_resume_leaves_alone_a_process_that_took_the_recorded_runner_pid(tmp_path: Path) -> None:
    """The controller and the runner are SIGKILLed and the pid is reused (a board reboot; here an unrelated sleeper
    written into the record). --resume used to wait for that process under the watchdog, then SIGTERM and SIGKILL
    it and fail the run. Now it is left alone: the run, gone without DONE, is measured again, and its entry and a
    message say that the recorded runner is gone and pid N is another process's now."""
    ctl, manifest = _killed_mid_run(tmp_path, runtime_s=1, extra_yaml="run_timeout_s: 30\n")
    (path,) = list(ctl.results.iterdir())
    runner_pid = manifest["runs"][0]["runner_pid"]
    os.kill(runner_pid, signal.SIGKILL)
    wait_for("the runner to be gone", lambda: not Path(f"/proc/{runner_pid}").exists(), 30)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        manifest["runs"][0]["runner_pid"] = sleeper.pid  # its identity stays the dead runner's
        (path / "manifest.json").write_text(json.dumps(manifest, indent=1))
        done = run_campaign("--resume", manifest["set_id"], "--results", str(ctl.results))
        assert sleeper.poll() is None, "--resume stopped the process that took the recorded runner pid"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(ctl.results.iterdir())
    runs = load_result_set(final).manifest["runs"]
    assert [r["status"] for r in runs] == ["ok", "ok"]
    reason = f"the recorded runner is gone and pid {sleeper.pid} is now another process: left alone"
    assert runs[0]["adopted"] == f"{reason}; measured again"
    assert reason in " ".join(done.stdout.split())
    assert runs[0]["runner_pid"] != sleeper.pid  # measured again: a runner of its own


def test_a_resume_that_only_adopts_makes_no_data_file_and_removes_the_killed_controllers(tmp_path: Path) -> None:
    """The controller is killed during the set's last run: --resume only has to wait for it. No data file is made
    (nothing is left to measure), and the one the killed controller made is removed at the end, as its own would
    have been."""
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "run", runtime_s=3, release=release)
    ctl.release_at("run", 1, release)
    wait_for("the last run's runner to start", lambda: sum("paused at run" in x for x in ctl.lines) >= 2, 300)
    code, _out, _err = ctl.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    (path,) = list(ctl.results.iterdir())
    manifest = json.loads((path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["ok", "running"]
    assert (ctl.scratch / "data.bin").exists()  # the killed controller could not remove it
    done = run_campaign("--resume", manifest["set_id"], "--results", str(ctl.results))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "creating data" not in done.stdout
    (final,) = list(ctl.results.iterdir())
    rs = load_result_set(final)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]
    assert rs.manifest["runs"][1]["runner_pid"] == manifest["runs"][1]["runner_pid"]  # adopted, not run again
    assert not list(ctl.scratch.glob("data.bin*")), "the killed controller's data file was left in scratch"
