"""Board leases, on the local transport and over a real sshd: one campaign per board at a time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.boards.inventory import load_target
from harness.boards.lease import acquire, break_lease, show
from harness.boards.transports.local import LocalTransport
from harness.boards.transports.ssh import SshTransport
from harness.errors import TargetError
from tests.helpers import REPO, run_cli, wait_for
from tests.sshd import SshServer

EXPERIMENT = "name: leased\nfiles:\n  data: {create: 1M}\nsteps:\n  - read: {file: data}\n"


@pytest.fixture()
def workdir() -> Iterator[str]:
    path = Path("/var/tmp/harness-lease-tests") / uuid.uuid4().hex[:8]
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def board(tmp_path: Path, workdir: str) -> Path:
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "board.yaml").write_text(f"platform: linux\ntransport: local\nworkdir: {workdir}\nlease: true\n")
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    return targets


def _take(workdir: str, campaign: str, **kwargs: object):  # noqa: ANN202
    return acquire(LocalTransport(), target_name="board", python=sys.executable, workdir=workdir, campaign=campaign,
                   **kwargs)


@pytest.mark.slow
def test_second_campaign_fails_saying_who_holds_the_board(board: Path, tmp_path: Path, workdir: str) -> None:
    lease = _take(workdir, "first-campaign")
    try:
        done = run_cli("run", str(tmp_path / "exp.yaml"), "--target", "board", "--targets-dir", str(board),
                       "--results", str(tmp_path / "r"), "--lease-wait", "0")
        assert done.returncode == 1
        assert "target board is leased by" in done.stderr and "campaign first-campaign" in done.stderr
        assert "harness lease show board" in done.stderr
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # no set was started
        shown = run_cli("lease", "show", "board", "--targets-dir", str(board))
        assert "leased by" in shown.stdout and "first-campaign" in shown.stdout and "holder running" in shown.stdout
    finally:
        lease.release()
    assert "free" in run_cli("lease", "show", "board", "--targets-dir", str(board)).stdout
    assert not list(Path(workdir, ".lease").glob("holder.*"))  # answers are removed once read


@pytest.mark.slow
def test_second_campaign_waits_for_the_lease_then_runs(board: Path, tmp_path: Path, workdir: str) -> None:
    lease = _take(workdir, "first-campaign")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(tmp_path / "exp.yaml"), "--target", "board",
                             "--targets-dir", str(board), "--results", str(tmp_path / "r"), "--lease-wait", "600"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()

    def told_to_wait() -> bool:
        assert proc.poll() is None, "".join(lines) + proc.stderr.read()  # type: ignore[union-attr]
        return any("waiting up to" in line for line in lines)

    try:
        wait_for("the second controller to say it is waiting for the lease", told_to_wait)
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
        lease.release()
        proc.wait(timeout=300)
        reader.join(timeout=60)
        out, err = "".join(lines), proc.stderr.read()  # type: ignore[union-attr]
    finally:
        lease.release()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert "waiting up to 600 s for the lease held by" in out and "first-campaign" in out
    assert show(LocalTransport(), sys.executable, workdir)["lease"] is None  # released at the end


def test_expired_lease_is_taken_over_and_old_release_leaves_it(workdir: str) -> None:
    first = _take(workdir, "hung", ttl_s=1.0)
    first._stop.set()  # no more heartbeats ...
    os.kill(first.holder_pid, signal.SIGSTOP)  # ... and a holder that hangs instead of letting go
    try:
        wait_for("the hung holder's lease to expire",
                 lambda: show(LocalTransport(), sys.executable, workdir).get("expired"), interval=0.1)
        second = _take(workdir, "second", wait_s=0)
        try:
            state = show(LocalTransport(), sys.executable, workdir)
            assert state["lease"]["campaign"] == "second" and state["holder_alive"]
            first.release()  # the old owner's release must not remove the new lease
            state = show(LocalTransport(), sys.executable, workdir)
            assert state["lease"]["campaign"] == "second" and state["holder_alive"]
        finally:
            second.release()
    finally:
        try:
            os.kill(first.holder_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert show(LocalTransport(), sys.executable, workdir)["lease"] is None


def test_dead_holder_frees_the_board(workdir: str) -> None:
    first = _take(workdir, "crashed")
    first._stop.set()
    os.kill(first.holder_pid, signal.SIGKILL)  # the kernel drops the flock with the process
    second = _take(workdir, "next", wait_s=0)
    second.release()


def test_lease_break_frees_a_held_board(board: Path, workdir: str) -> None:
    lease = _take(workdir, "stuck")
    try:
        broken = run_cli("lease", "break", "board", "--targets-dir", str(board))
        assert broken.returncode == 0 and "broke the lease of" in broken.stdout and "stuck" in broken.stdout
        assert show(LocalTransport(), sys.executable, workdir)["lease"] is None
        again = _take(workdir, "after", wait_s=0)
        again.release()
    finally:
        lease.release()
    assert "no lease to break" in run_cli("lease", "break", "board", "--targets-dir", str(board)).stdout


@pytest.mark.slow
def test_lease_over_ssh_blocks_a_second_controller(sshd: SshServer, tmp_path: Path, workdir: str) -> None:
    targets = tmp_path / "targets"
    sshd.write_target(targets, "remote", workdir=workdir)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    target = load_target(targets / "remote.yaml")
    transport = SshTransport(target)
    lease = acquire(transport, target_name="remote", python="python3", workdir=workdir, campaign="ssh-holder")
    try:
        with pytest.raises(TargetError, match="leased by .*campaign ssh-holder"):
            acquire(SshTransport(target), target_name="remote", python="python3", workdir=workdir, campaign="x",
                    wait_s=0)
        done = run_cli("deploy", "remote", "--targets-dir", str(targets), "--lease-wait", "0")
        assert done.returncode == 1 and "target remote is leased by" in done.stderr
        shown = run_cli("lease", "show", "remote", "--targets-dir", str(targets))
        assert "ssh-holder" in shown.stdout and "holder running" in shown.stdout
    finally:
        lease.release()
        transport.close()
    done = run_cli("run", str(tmp_path / "exp.yaml"), "--target", "remote", "--targets-dir", str(targets),
                   "--results", str(tmp_path / "r"), "--lease-wait", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "free" in run_cli("lease", "show", "remote", "--targets-dir", str(targets)).stdout


def test_a_campaign_is_told_when_its_lease_is_lost(workdir: str) -> None:
    told: list[str] = []
    lost = threading.Event()

    def on_event(text: str) -> None:
        told.append(text)
        lost.set()

    lease = _take(workdir, "mine", ttl_s=1.0, on_wait=on_event)
    try:
        break_lease(LocalTransport(), sys.executable, workdir)  # someone forces the board free
        assert lost.wait(60), "the heartbeat never noticed"
        assert "LEASE LOST" in told[0]
    finally:
        lease.release()


@pytest.mark.slow
def test_the_local_machine_takes_no_lease_unless_asked(tmp_path: Path, workdir: str) -> None:
    from harness.boards.inventory import load_target, wants_lease

    (tmp_path / "targets").mkdir()
    path = tmp_path / "targets" / "plain.yaml"
    path.write_text(f"platform: linux\ntransport: local\nworkdir: {workdir}\n")
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    lease = _take(workdir, "someone-else")
    try:  # a plain local target ignores the lease (side-by-side test campaigns); lease: true honours it
        done = run_cli("run", str(tmp_path / "exp.yaml"), "--target", "plain", "--targets-dir", str(path.parent),
                       "--results", str(tmp_path / "r"), "--lease-wait", "0")
        assert done.returncode == 0, done.stdout + done.stderr
        assert wants_lease(load_target(path)) is False
    finally:
        lease.release()


def test_lease_show_says_when_the_holders_controller_is_dead(board: Path, workdir: str) -> None:
    """A controller killed with SIGKILL cannot release its lease; the holder keeps it until it expires.
    `lease show` says so, and how to free the board now."""
    take = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from harness.boards.lease import acquire; "
            "from harness.boards.transports.local import LocalTransport; "
            f"acquire(LocalTransport(), target_name='board', python=sys.executable, workdir={workdir!r}, "
            "campaign='killed'); print('taken', flush=True); time.sleep(600)")
    controller = subprocess.Popen([sys.executable, "-c", take], stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout is not None and controller.stdout.readline().strip() == "taken"
        alive = run_cli("lease", "show", "board", "--targets-dir", str(board)).stdout
        assert f"its controller (pid {controller.pid}) is running" in " ".join(alive.split())
        controller.kill()
        controller.wait()
        shown = " ".join(run_cli("lease", "show", "board", "--targets-dir", str(board)).stdout.split())
        assert "campaign killed" in shown and f"controller (pid {controller.pid} on this host) is NOT running" in shown
        assert "harness lease break" in shown
    finally:
        if controller.poll() is None:
            controller.kill()
        run_cli("lease", "break", "board", "--targets-dir", str(board))
    assert show(LocalTransport(), sys.executable, workdir)["lease"] is None
