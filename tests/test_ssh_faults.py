"""Faults over a real sshd: a dropped connection mid-run, a killed runner, a corrupted pull."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.boards.inventory import load_targets
from harness.boards.transports.ssh import SshTransport
from harness.campaign.orchestrator import Campaign
from harness.campaign.plan import build_plan
from harness.campaign.pull import verify_checksums
from harness.config.experiment import load_experiment
from harness.results.loader import load_result_set
from tests.helpers import REPO, wait_for, without_columns
from tests.sshd import SshServer, sshd_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sshd_unavailable() is not None, reason=sshd_unavailable() or "")]

THREE_RUNS = """\
name: faults
files:
  data: {create: 8M}
cache: none
rounds: 3
steps:
  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 3}
"""


@pytest.fixture()
def board(sshd: SshServer, tmp_path: Path) -> Iterator[Path]:
    workdir = Path("/var/tmp/harness-ssh-tests") / uuid.uuid4().hex[:8]
    sshd.write_target(tmp_path / "targets", "board", workdir=str(workdir))
    yield tmp_path / "targets"
    shutil.rmtree(workdir, ignore_errors=True)


def _start_campaign(tmp_path: Path, targets: Path, text: str = THREE_RUNS) -> subprocess.Popen[str]:
    exp = tmp_path / "faults.yaml"
    exp.write_text(text)
    return subprocess.Popen([sys.executable, "-m", "harness", "run", str(exp), "--targets-dir", str(targets),
                             "--target", "board", "--results", str(tmp_path / "results")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=without_columns(os.environ))


def _wait_for_run(results: Path, proc: subprocess.Popen[str], index: int) -> dict:
    """Block until run ``index`` of the set is running on the board; return the manifest."""

    def running() -> dict | None:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the campaign ended before run {index} started: {out} {err}")
        (incomplete,) = results.glob("*.incomplete")  # none yet: ValueError, "not yet"
        manifest = json.loads((incomplete / "manifest.json").read_text())  # caught mid-write: ValueError too
        return manifest if manifest["runs"][index]["status"] == "running" else None

    return wait_for(f"the manifest to say run {index} is running", running, timeout=300)


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_dropped_connection_mid_run_completes_and_is_pulled(board: Path, sshd: SshServer, tmp_path: Path) -> None:
    proc = _start_campaign(tmp_path, board)
    try:
        _wait_for_run(tmp_path / "results", proc, 1)
        assert sshd.drop_connections()  # the sshd child serving the controller dies, the runner does not
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 0, out + err
    assert "connection lost" in out and "reconnected after" in out
    (path,) = list((tmp_path / "results").iterdir())
    rs = load_result_set(path)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok"] * 3
    fio = rs.table("fio")
    assert set(fio["run_id"]) == {r["run_id"] for r in rs.manifest["runs"]} and (fio["read_iops"] > 0).all()


def test_killed_runner_is_a_failed_run_with_its_log(board: Path, tmp_path: Path) -> None:
    proc = _start_campaign(tmp_path, board)
    try:
        manifest = _wait_for_run(tmp_path / "results", proc, 0)
        os.kill(manifest["runs"][0]["runner_pid"], signal.SIGKILL)  # the board is this machine
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 1, out + err
    (path,) = list((tmp_path / "results").iterdir())
    rs = load_result_set(path)
    runs = rs.manifest["runs"]
    assert [r["status"] for r in runs] == ["failed", "ok", "ok"]
    assert runs[0]["error"].startswith("runner died without DONE")
    assert (path / "raw" / "board" / runs[0]["run_id"] / "runner.log").exists()


class Messages:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def target_started(self, target: str, total: int) -> None: ...
    def run_started(self, target: str, run: object) -> None: ...
    def run_finished(self, target: str, run: object, status: str, error: str | None) -> None: ...

    def message(self, text: str) -> None:
        self.lines.append(text)


def test_corrupted_pull_is_detected_and_pulled_again(board: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real_get = SshTransport.get
    corrupted: list[Path] = []

    def get_flipping_one_byte_once(self: SshTransport, remote: str, local: Path) -> None:
        real_get(self, remote, local)
        target = Path(local) / "run.json"
        if not corrupted and target.exists():
            data = bytearray(target.read_bytes())
            data[len(data) // 2] ^= 0x01
            target.write_bytes(bytes(data))
            corrupted.append(target)

    monkeypatch.setattr(SshTransport, "get", get_flipping_one_byte_once)
    exp = tmp_path / "one.yaml"
    exp.write_text(THREE_RUNS.replace("rounds: 3", "rounds: 1").replace("runtime_s: 3", "runtime_s: 1"))
    loaded = load_experiment(exp)
    messages = Messages()
    campaign = Campaign(build_plan(loaded), [load_targets(board)["board"]], tmp_path / "results", progress=messages)
    result = campaign.run()
    assert corrupted, "the pull was never corrupted"
    assert result.complete and result.statuses == {"ok": 1}
    assert any("checksum mismatch" in line and "pulling again" in line for line in messages.lines), messages.lines
    verify_checksums(corrupted[0].parent)  # what is kept is the good copy
