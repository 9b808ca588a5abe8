"""One run's lifecycle on the controller, without a campaign: the spec carries the runner contract, a pulled run.json
of another contract major version fails its run with one line naming both versions, and the states only move
along their transitions. A LocalTransport and a run directory made by hand stand in for a runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.boards.platforms import PLATFORMS
from harness.boards.session import TargetSession
from harness.boards.transports.local import LocalTransport
from harness.campaign.context import CampaignContext, QuietProgress
from harness.campaign.lifecycle import RunLifecycle, RunState
from harness.campaign.orchestrator import new_writer
from harness.campaign.plan import build_plan
from harness.campaign.pull import verify_checksums
from harness.campaign.spec import build_spec
from harness.config.experiment import load_experiment
from harness.config.target import Target
from harness.results.store import ResultSetWriter
from runner.contract import CONTRACT_VERSION
from runner.util import write_checksums
from tests.helpers import REPO, wait_for

EXPERIMENT = """\
name: unit
files:
  data: {create: 1M}
cache: none
steps:
  - read: {file: data, pattern: seq}
"""


class Said(QuietProgress):
    def __init__(self) -> None:
        self.finished: list[tuple[str, str | None]] = []

    def run_finished(self, target: str, run: object, status: str, error: str | None) -> None:
        self.finished.append((status, error))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[CampaignContext, TargetSession, ResultSetWriter]:
    (tmp_path / "unit.yaml").write_text(EXPERIMENT)
    target = Target(name="local", workdir=str(tmp_path / "work"))
    ctx = CampaignContext(build_plan(load_experiment(tmp_path / "unit.yaml")), [target], Said())
    session = TargetSession(target, LocalTransport(target), PLATFORMS["linux"], str(REPO), str(tmp_path / "bin"))
    return ctx, session, new_writer(ctx, tmp_path / "results")


def _finished_run(lifecycle: RunLifecycle, record: dict[str, object]) -> Path:
    """The run directory a runner leaves: run.json, SHA256SUMS over it (as runner/util.py writes them) and DONE."""
    remote = Path(lifecycle.remote_dir)
    remote.mkdir(parents=True)
    (remote / "run.json").write_text(json.dumps({"run_id": lifecycle.run.run_id, "error": None, **record}))
    (remote / "runner.log").write_text("ran\n")
    write_checksums(str(remote))
    (remote / "DONE").write_text(f"{record.get('status')}\n")
    return remote


def _entry(writer: ResultSetWriter, run_id: str) -> dict[str, object]:
    return next(r for r in writer.manifest["runs"] if r["run_id"] == run_id)


def test_the_spec_says_the_contract(setup: tuple[CampaignContext, TargetSession, ResultSetWriter]) -> None:
    ctx, session, _writer = setup
    run = ctx.plan.runs[0]
    assert build_spec(ctx, session, run, {"data": "/x/data.bin"}, "/x/run")["contract"] == CONTRACT_VERSION


@pytest.mark.parametrize("contract", ["9.0", None])
def test_a_run_record_of_another_contract_fails_its_run(
        setup: tuple[CampaignContext, TargetSession, ResultSetWriter], contract: str | None) -> None:
    ctx, session, writer = setup
    run = ctx.plan.runs[0]
    lifecycle = RunLifecycle.adopt(ctx, session, writer, run)  # started; its runner is gone and wrote DONE
    remote = _finished_run(lifecycle, {"status": "ok"} if contract is None else {"status": "ok", "contract": contract})
    assert lifecycle.finish_adopted()
    assert lifecycle.state is RunState.RECORDED
    entry = _entry(writer, run.run_id)
    shown = contract or "0.0"
    assert entry["status"] == "failed"
    error = str(entry["error"])
    assert len(error.splitlines()) == 1 and shown in error and f"contract {CONTRACT_VERSION.split('.')[0]}." in error
    assert ctx.progress.finished == [("failed", error)]  # type: ignore[attr-defined]
    local = writer.raw_dir("local", run.run_id)
    # kept for a look, never read as a record (the runs table takes the manifest's status)
    assert not (local / "run.json").exists() and (local / "run.json.refused").exists()
    assert not remote.exists()  # pulled: gone from the target like any pulled run
    verify_checksums(local)  # SHA256SUMS names the refused record under its new name: the directory still verifies
    assert "  run.json.refused\n" in (local / "SHA256SUMS").read_text()


def test_a_run_record_of_the_same_major_is_taken(
        setup: tuple[CampaignContext, TargetSession, ResultSetWriter]) -> None:
    ctx, session, writer = setup
    run = ctx.plan.runs[0]
    lifecycle = RunLifecycle.adopt(ctx, session, writer, run)
    major = CONTRACT_VERSION.split(".")[0]
    _finished_run(lifecycle, {"status": "failed", "error": "step failed: x", "contract": f"{major}.99"})
    assert lifecycle.finish_adopted()
    assert (_entry(writer, run.run_id)["status"], _entry(writer, run.run_id)["error"]) == ("failed", "step failed: x")
    assert (writer.raw_dir("local", run.run_id) / "run.json").exists()


def test_an_adopted_run_without_done_is_measured_again(
        setup: tuple[CampaignContext, TargetSession, ResultSetWriter]) -> None:
    ctx, session, writer = setup
    lifecycle = RunLifecycle.adopt(ctx, session, writer, ctx.plan.runs[0])
    assert not lifecycle.finish_adopted()
    assert lifecycle.state is RunState.DIED and _entry(writer, ctx.plan.runs[0].run_id)["status"] == "pending"


def test_states_move_only_along_their_transitions(
        setup: tuple[CampaignContext, TargetSession, ResultSetWriter]) -> None:
    ctx, session, writer = setup
    lifecycle = RunLifecycle(ctx, session, writer, ctx.plan.runs[0])
    assert lifecycle.state is RunState.PLANNED
    with pytest.raises(RuntimeError, match="no transition planned -> pulled"):
        lifecycle.pull()


def _detached_sleep(*args: str) -> int:
    """A process that is not our child (as a runner started detached is not the controller's): it is reaped when
    it dies, so a stop is seen at once rather than after a zombie's grace period. ``args`` end up in its command
    line (a runner's has its spec path)."""
    sleeper = "import sys, time; time.sleep(600)"
    out = subprocess.run(["sh", "-c", 'python3 -c "$0" "$@" >/dev/null 2>&1 & echo $!', sleeper, *args],
                         capture_output=True, text=True)
    return int(out.stdout.strip())


def _identity(pid: int) -> str:
    """What a runner is recorded with besides its pid: its start time (field 22 of /proc/PID/stat) and the boot id."""
    start = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    return f"{start}@{Path('/proc/sys/kernel/random/boot_id').read_text().strip()}"


def _gone_at(pid: int) -> float:
    """The monotonic time at which the process is gone (polled every 10 ms)."""
    while Path(f"/proc/{pid}").exists():
        time.sleep(0.01)
    return time.monotonic()


@pytest.mark.parametrize(("limit_s", "started_ago_s"), [(2, None), (60, 58.0)])
def test_an_adopted_run_still_running_past_its_limit_is_stopped_and_failed(
        tmp_path: Path, limit_s: int, started_ago_s: float | None) -> None:
    """--resume adopts a runner a dead controller left running: the watchdog still holds, with the limit of the spec
    on the target, counted from when the runner was started (from the adoption for a manifest without it)."""
    (tmp_path / "unit.yaml").write_text(EXPERIMENT + f"run_timeout_s: {limit_s}\n")
    target = Target(name="local", workdir=str(tmp_path / "work"))
    ctx = CampaignContext(build_plan(load_experiment(tmp_path / "unit.yaml")), [target], Said())
    session = TargetSession(target, LocalTransport(target), PLATFORMS["linux"], str(REPO), str(tmp_path / "bin"))
    writer = new_writer(ctx, tmp_path / "results")
    run = ctx.plan.runs[0]
    remote = Path(session.workdir) / "runs" / ctx.set_id / run.run_id
    hung = _detached_sleep(str(remote / "spec.json"))  # stands in for a runner that never writes DONE
    try:
        started = None if started_ago_s is None else round(time.time() - started_ago_s, 3)
        writer.update_run(run.run_id, target="local", status="running", runner_pid=hung,
                          runner_identity=_identity(hung), runner_started=started)
        lifecycle = RunLifecycle.adopt(ctx, session, writer, run)
        assert Path(lifecycle.remote_dir) == remote
        remote.mkdir(parents=True)
        (remote / "spec.json").write_text(json.dumps(build_spec(ctx, session, run, {"data": "/x"}, str(remote))))
        began, stopped_at = time.monotonic(), []
        watcher = threading.Thread(target=lambda: stopped_at.append(_gone_at(hung)), daemon=True)
        watcher.start()
        assert lifecycle.finish_adopted()
        watcher.join(timeout=10)
        assert stopped_at, "the watchdog left the runner running"
        waited = stopped_at[0] - began
    finally:
        if Path(f"/proc/{hung}").exists():
            os.kill(hung, signal.SIGKILL)
    assert lifecycle.state is RunState.RECORDED
    entry = _entry(writer, run.run_id)
    assert entry["status"] == "failed"
    assert str(entry["error"]).startswith(f"the run did not finish within {limit_s} s (run_timeout_s) and was stopped")
    if started_ago_s is None:
        assert waited >= limit_s - 0.1  # no start recorded: the whole limit, from the adoption
    else:
        assert waited < 30  # 2 s were left of the 60 when it was adopted: not the whole limit again


@pytest.mark.fault
@pytest.mark.parametrize("record", ["identity", "older-manifest"])
def test_an_adopted_runner_whose_pid_is_another_process_now_is_left_alone(tmp_path: Path, record: str) -> None:
    """The runner and its controller were killed and the pid was reused (a board reboot): --resume used to wait
    for the unrelated process under the watchdog, then SIGTERM and SIGKILL it. Now it is left alone, and the run,
    gone without DONE, is measured again with one line saying why. With an identity in the record, even a process
    whose command line has the run's spec path is told apart (by its start time); an older manifest's record
    (a pid alone) by that marker."""
    (tmp_path / "unit.yaml").write_text(EXPERIMENT + "run_timeout_s: 1\n")
    target = Target(name="local", workdir=str(tmp_path / "work"))
    ctx = CampaignContext(build_plan(load_experiment(tmp_path / "unit.yaml")), [target], Said())
    session = TargetSession(target, LocalTransport(target), PLATFORMS["linux"], str(REPO), str(tmp_path / "bin"))
    writer = new_writer(ctx, tmp_path / "results")
    run = ctx.plan.runs[0]
    spec_path = str(Path(session.workdir) / "runs" / ctx.set_id / run.run_id / "spec.json")
    runner = _detached_sleep(spec_path)
    identity = _identity(runner)
    os.kill(runner, signal.SIGKILL)
    wait_for("the runner to be gone", lambda: not Path(f"/proc/{runner}").exists(), 10)
    # the pid now names an unrelated process: one started after the runner (written into the record, as reuse),
    # ticks later, as a real reuse is (a start time counts 10 ms ticks: one forked in the runner's would be it)
    time.sleep(2 / os.sysconf("SC_CLK_TCK"))
    reused = _detached_sleep(spec_path) if record == "identity" else _detached_sleep()
    try:
        fields = {"runner_identity": identity} if record == "identity" else {}
        writer.update_run(run.run_id, target="local", status="running", runner_pid=reused,
                          runner_started=round(time.time() - 60, 3), **fields)
        lifecycle = RunLifecycle.adopt(ctx, session, writer, run)
        Path(lifecycle.remote_dir).mkdir(parents=True)
        Path(spec_path).write_text(json.dumps(build_spec(ctx, session, run, {"data": "/x"}, lifecycle.remote_dir)))
        assert not lifecycle.finish_adopted()  # measured again
        assert Path(f"/proc/{reused}").exists(), "the process that took the recorded pid was stopped"
        assert Path(f"/proc/{reused}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"  # not a zombie either
    finally:
        if Path(f"/proc/{reused}").exists():
            os.kill(reused, signal.SIGKILL)
    entry = _entry(writer, run.run_id)
    assert entry["status"] == "running" and lifecycle.state is RunState.DIED  # the new measurement records it
    said = f"the recorded runner is gone and pid {reused} is now another process: left alone"
    assert entry["adopted"] == f"{said}; measured again"
