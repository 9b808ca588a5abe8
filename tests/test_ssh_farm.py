"""Campaigns on several boards: in parallel (one run at a time per board), and --resume after Ctrl-C.

The second board is a network namespace with its own address reached over a veth pair (where root
and ``ip netns`` allow it), otherwise a second workdir behind the same loopback sshd.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from tests.helpers import REPO, run_cli, wait_for
from tests.sshd import NetnsBoard, SshServer, netns_unavailable, sshd_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sshd_unavailable() is not None, reason=sshd_unavailable() or "")]

TWO_STEPS = """\
name: farm
files:
  data: {create: 16M}
cache: none
rounds: 2
collect: [blockstat]
steps:
  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 2}
  - read: {file: data}
"""


@pytest.fixture()
def workdirs() -> Iterator[list[str]]:
    made: list[str] = []

    def new() -> str:
        made.append(str(Path("/var/tmp/harness-ssh-tests") / uuid.uuid4().hex[:8]))
        return made[-1]

    yield new  # type: ignore[misc]
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _runs_by_target(path: Path) -> dict[str, list[tuple[float, float]]]:
    spans: dict[str, list[tuple[float, float]]] = {}
    for record in sorted(path.glob("raw/*/*/run.json")):
        data = json.loads(record.read_text())
        spans.setdefault(record.parent.parent.name, []).append((data["started"]["wall"], data["ended"]["wall"]))
    return spans


def _check_parallel_campaign(done: subprocess.CompletedProcess[str], results: Path, names: list[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = list(results.iterdir())
    rs = load_result_set(path)
    assert rs.complete
    runs = rs.manifest["runs"]
    assert sorted({r["target"] for r in runs}) == sorted(names) and {r["status"] for r in runs} == {"ok"}
    assert len(runs) == 4 * len(names)
    for name in names:
        assert {r["run_id"] for r in runs if r["target"] == name} == {p.name for p in (path / "raw" / name).iterdir()}
    table = rs.table("runs")
    assert sorted(table["target"].unique()) == sorted(names)
    assert (table.groupby("target")["status"].apply(lambda s: (s == "ok").all())).all()
    spans = _runs_by_target(path)
    for name in names:  # one run at a time per board ...
        ordered = sorted(spans[name])
        assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:], strict=False)), ordered
    # ... and the boards at the same time: each board's runs overlap the other's campaign window
    first, second = (sorted(spans[n]) for n in names[:2])
    assert first[0][0] < second[-1][1] and second[0][0] < first[-1][1]


def test_two_boards_run_in_parallel(sshd: SshServer, tmp_path: Path, workdirs) -> None:  # noqa: ANN001
    targets = tmp_path / "targets"
    sshd.write_target(targets, "board-a", workdir=workdirs(), tags=("farm",))
    sshd.write_target(targets, "board-b", workdir=workdirs(), tags=("farm",))
    (tmp_path / "farm.yaml").write_text(TWO_STEPS)
    done = run_cli("run", str(tmp_path / "farm.yaml"), "--target", "tag:farm", "--targets-dir", str(targets),
                   "--results", str(tmp_path / "results"))
    _check_parallel_campaign(done, tmp_path / "results", ["board-a", "board-b"])


def _run_statuses(proc: subprocess.Popen[str], results: Path) -> list[str]:
    """The run statuses in the controller's manifest now; fails at once if the controller has exited. A manifest
    not there yet, or caught mid-rewrite, raises OSError/ValueError: ``wait_for`` takes that as "not yet"."""
    assert proc.poll() is None, proc.communicate()
    (incomplete,) = results.glob("*.incomplete")
    return [r["status"] for r in json.loads((incomplete / "manifest.json").read_text())["runs"]]


def _wait_first_run_running(proc: subprocess.Popen[str], results: Path) -> None:
    """Until the controller's manifest says the first run is running on the board."""
    wait_for("the manifest to say the first run is running",
             lambda: _run_statuses(proc, results)[0] == "running", timeout=300)


@pytest.fixture()
def netns_pair(tmp_path: Path) -> Iterator[tuple[SshServer, NetnsBoard]]:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    namespace = NetnsBoard(1).create()
    server = SshServer(tmp_path / "sshd-netns", address=namespace.board_addr, netns=namespace.name)
    try:
        yield server.start(), namespace
    finally:
        server.stop()
        namespace.destroy()


@pytest.fixture()
def netns_board(netns_pair: tuple[SshServer, NetnsBoard]) -> SshServer:
    return netns_pair[0]


def test_loopback_board_and_netns_board_in_parallel(sshd: SshServer, netns_board: SshServer, tmp_path: Path,
                                                    workdirs) -> None:  # noqa: ANN001
    assert netns_board.address != sshd.address
    targets = tmp_path / "targets"
    sshd.write_target(targets, "loopback", workdir=workdirs(), tags=("farm",))
    netns_board.write_target(targets, "netns", workdir=workdirs(), tags=("farm",))
    (tmp_path / "farm.yaml").write_text(TWO_STEPS)
    done = run_cli("run", str(tmp_path / "farm.yaml"), "--target", "tag:farm", "--targets-dir", str(targets),
                   "--results", str(tmp_path / "results"))
    _check_parallel_campaign(done, tmp_path / "results", ["loopback", "netns"])
    # the netns board was reached at its own address, through its own sshd
    assert f"Accepted publickey for root from {netns_board.address.rsplit('.', 1)[0]}" in \
        (netns_board.root / "sshd.log").read_text()


def test_interrupted_campaign_is_finished_by_resume(sshd: SshServer, tmp_path: Path, workdirs) -> None:  # noqa: ANN001
    targets = tmp_path / "targets"
    sshd.write_target(targets, "board", workdir=workdirs())
    sshd.write_target(targets, "other", workdir=workdirs())
    exp = tmp_path / "farm.yaml"
    exp.write_text(TWO_STEPS.replace("runtime_s: 2", "runtime_s: 3"))
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(exp), "--target", "board", "--target",
                             "other", "--targets-dir", str(targets), "--results", str(results)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the manifest to show a finished run and a running one",
                 lambda: {"ok", "running"} <= set(_run_statuses(proc, results)), timeout=300)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    (path,) = list(results.iterdir())
    before = json.loads((path / "manifest.json").read_text())["runs"]
    kept = {(r["target"], r["run_id"]) for r in before if r["status"] == "ok"}
    assert kept and len(kept) < len(before)
    digests = {key: hashlib.sha256((path / "raw" / key[0] / key[1] / "run.json").read_bytes()).hexdigest()
               for key in kept}

    resumed = run_cli("run", "--resume", path.name, "--results", str(results), "--targets-dir", str(targets))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (final,) = list(results.iterdir())
    assert final.name == path.name.removesuffix(".incomplete")
    rs = load_result_set(final)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok"] * len(before)
    assert len(rs.manifest["resumed"]) == 1
    for key, digest in digests.items():  # what was done before the interrupt is kept as it was
        assert hashlib.sha256((final / "raw" / key[0] / key[1] / "run.json").read_bytes()).hexdigest() == digest
    runs = rs.table("runs")
    assert len(runs) == len(before) and set(runs["status"]) == {"ok"}
    assert set(rs.table("fio")["run_id"]) == {r["run_id"] for r in before if r["step"] == "fio"}
    again = run_cli("run", "--resume", final.name, "--results", str(results), "--targets-dir", str(targets))
    assert again.returncode == 2 and "nothing to resume" in again.stderr


def _connected_to(address: str, port: int) -> bool:
    """True while a socket of this host is ESTABLISHED to address:port."""
    packed = int.from_bytes(bytes(int(x) for x in address.split(".")), "little")
    want = f"{packed:08X}:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == want and fields[3] == "01":
            return True
    return False


def test_pulled_cable_mid_run_is_survived(netns_pair: tuple[SshServer, NetnsBoard], tmp_path: Path,
                                          workdirs) -> None:  # noqa: ANN001
    server, namespace = netns_pair
    targets = tmp_path / "targets"
    server.write_target(targets, "board", workdir=workdirs())
    exp = tmp_path / "cable.yaml"
    exp.write_text(TWO_STEPS.replace("rounds: 2", "rounds: 1"))
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(exp), "--targets-dir", str(targets),
                             "--target", "board", "--results", str(results)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    down = False
    try:
        _wait_first_run_running(proc, results)
        subprocess.run(["ip", "link", "set", namespace.host_if, "down"], check=True)  # no RST, no FIN: silence
        down = True
        def link_given_up() -> bool:
            assert proc.poll() is None, proc.communicate()
            return not _connected_to(server.address, server.port)

        # until the controller gives the dead link up ...
        wait_for("the controller to give up its ssh connection over the dead link", link_given_up, timeout=300,
                 interval=0.2)
        subprocess.run(["ip", "link", "set", namespace.host_if, "up"], check=True)  # ... and the cable is back
        down = False
        out, err = proc.communicate(timeout=300)
    finally:
        if down:
            subprocess.run(["ip", "link", "set", namespace.host_if, "up"], check=False)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert "connection lost" in out
    (path,) = list(results.iterdir())
    rs = load_result_set(path)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]


def test_killed_controller_is_finished_by_resume_without_measuring_twice(sshd: SshServer, tmp_path: Path,
                                                                         workdirs) -> None:  # noqa: ANN001
    targets = tmp_path / "targets"
    sshd.write_target(targets, "board", workdir=workdirs())
    exp = tmp_path / "crash.yaml"
    exp.write_text(TWO_STEPS.replace("rounds: 2", "rounds: 1").replace("runtime_s: 2", "runtime_s: 4"))
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(exp), "--targets-dir", str(targets),
                             "--results", str(results), "--target", "board"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_first_run_running(proc, results)
        proc.kill()  # the controller dies hard: no cleanup, its lease holder and the runner stay on the board
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (path,) = list(results.iterdir())
    runner_pid = json.loads((path / "manifest.json").read_text())["runs"][0]["runner_pid"]
    resumed = run_cli("run", "--resume", path.name, "--results", str(results), "--targets-dir", str(targets),
                      "--lease-wait", "0")  # its own campaign's orphaned lease is taken back at once
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rs = load_result_set(results / path.name.removesuffix(".incomplete"))
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]
    # the run the dead controller started was waited for and pulled, not started again (a new start
    # records its new runner's pid)
    first = rs.manifest["runs"][0]
    assert first["runner_pid"] == runner_pid
    assert json.loads((rs.path / "raw" / "board" / first["run_id"] / "run.json").read_text())["status"] == "ok"
    assert "waiting up to" not in resumed.stdout
