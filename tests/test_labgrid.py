"""Boards from a real labgrid farm: a coordinator on loopback, an exporter exporting the loopback sshd board as a
NetworkService, places made and tagged with labgrid-client. Campaigns resolve ``labgrid:board=orin``, reserve and
lock the place through the coordinator's queue, run, and release it in every exit path."""

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

from harness.boards.labgrid_client import labgrid_missing
from harness.results.loader import load_result_set
from tests.helpers import REPO, run_cli, wait_for, without_columns
from tests.labgrid_farm import LabgridFarm
from tests.sshd import NetnsBoard, SshServer, netns_unavailable, sshd_unavailable

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(labgrid_missing() is not None, reason=labgrid_missing() or ""),
              pytest.mark.skipif(sshd_unavailable() is not None, reason=sshd_unavailable() or "")]

EXPERIMENT = """\
name: lgfarm
files:
  data: {create: 8M}
cache: none
rounds: 1
validity: off
targets: [labgrid:board=orin]
steps:
  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: RUNTIME}
  - read: {file: data}
"""


@pytest.fixture()
def farm(tmp_path: Path, sshd: SshServer) -> Iterator[LabgridFarm]:
    lab = LabgridFarm(tmp_path / "labgrid").start()
    try:
        lab.export("board1", address=sshd.address, port=sshd.port)
        lab.place("orin-01", "board1", board="orin")
        yield lab
    finally:
        lab.stop()


@pytest.fixture()
def workdir() -> Iterator[str]:
    path = str(Path("/var/tmp/harness-ssh-tests") / uuid.uuid4().hex[:8])
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def setup(tmp_path: Path, farm: LabgridFarm, sshd: SshServer, workdir: str) -> Path:
    """A farm target file (farm.yaml in a temporary targets folder): the farm's coordinator and how to log in;
    the address comes from the place."""
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "farm.yaml").write_text(
        f"platform: linux\nlabgrid: {{coordinator: \"{farm.address}\"}}\n"
        f"transport:\n  ssh: {{key: {sshd.client_key}, known_hosts: {sshd.known_hosts}}}\n"
        f"workdir: {workdir}\n")
    return targets


def _experiment(tmp_path: Path, runtime_s: int = 1) -> Path:
    path = tmp_path / "lg.yaml"
    path.write_text(EXPERIMENT.replace("RUNTIME", str(runtime_s)))
    return path


def _controller(tmp_path: Path, targets: Path, results: Path, user: str, *extra: str,
                env: dict[str, str] | None = None, runtime_s: int = 1) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "harness", "run", str(_experiment(tmp_path, runtime_s)),
                             "--targets-dir", str(targets), "--results", str(results), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**without_columns(os.environ), "LG_USERNAME": user, **(env or {})})


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def _statuses(results: Path) -> list[str]:
    """The run statuses in the running controller's manifest (ValueError until its set exists: "not yet")."""
    sets = list(results.glob("*.incomplete"))
    if not sets:
        raise ValueError("no set yet")
    return [r["status"] for r in json.loads((sets[0] / "manifest.json").read_text())["runs"]]


def _spans(path: Path) -> list[tuple[float, float]]:
    return sorted((d["started"]["wall"], d["ended"]["wall"])
                  for d in (json.loads(p.read_text()) for p in path.glob("raw/*/*/run.json")))


def test_campaign_on_a_tagged_place_locks_runs_and_releases(setup: Path, farm: LabgridFarm, tmp_path: Path) -> None:
    done = run_cli("run", str(_experiment(tmp_path)), "--targets-dir", str(setup),
                   "--results", str(tmp_path / "results"), env={"LG_USERNAME": "alice"})
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").iterdir()
    rs = load_result_set(path)
    assert rs.complete and {r["target"] for r in rs.manifest["runs"]} == {"orin-01"}  # named after the place
    (entry,) = rs.manifest["targets"]
    lease = entry["lease"]
    assert (lease["backend"], lease["place"], lease["coordinator"]) == ("labgrid", "orin-01", farm.address)
    assert lease["tags"] == {"board": "orin"} and lease["reservation"] and lease["locked_by"].endswith("/alice")
    assert lease["board_lock"]["backend"] == "board-lock-file"  # the second guard was taken too
    assert f"labgrid place **orin-01** (board=orin) on {farm.address}" in (path / "report.md").read_text()
    assert farm.holder("orin-01") is None  # released at the end
    assert "Reservation" not in farm.client("reservations").stdout  # and its reservation cancelled


def test_a_second_user_waits_in_the_queue_and_runs_after(setup: Path, farm: LabgridFarm, tmp_path: Path) -> None:
    first = _controller(tmp_path, setup, tmp_path / "r1", "alice", runtime_s=4)
    try:
        wait_for("alice to lock the place", lambda: (farm.holder("orin-01") or "").endswith("/alice"), timeout=300)
        second = _controller(tmp_path, setup, tmp_path / "r2", "bob", "--lease-wait", "600")
        try:
            wait_for("bob's reservation in the queue", lambda: "/bob" in farm.client("reservations").stdout,
                     timeout=120)
            code1, out1, err1 = _finish(first)
            code2, out2, err2 = _finish(second)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert code1 == 0, out1 + err1
    assert code2 == 0, out2 + err2
    assert "waiting up to 600 s in the labgrid queue for orin-01 locked by" in out2
    (set1,), (set2,) = (tmp_path / "r1").iterdir(), (tmp_path / "r2").iterdir()
    assert _spans(set1)[-1][1] <= _spans(set2)[0][0]  # bob's runs only after alice's ended
    assert farm.holder("orin-01") is None


def test_a_place_locked_by_another_user_is_never_taken(setup: Path, farm: LabgridFarm, tmp_path: Path) -> None:
    assert farm.client("-p", "orin-01", "acquire", user="carol").returncode == 0
    done = run_cli("run", str(_experiment(tmp_path)), "--targets-dir", str(setup), "--results",
                   str(tmp_path / "results"), "--lease-wait", "0", env={"LG_USERNAME": "alice"})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "orin-01 locked by" in lines[0] and "/carol" in lines[0], done.stderr
    assert (farm.holder("orin-01") or "").endswith("/carol")
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_lease_show_lists_places_and_break_kicks(setup: Path, farm: LabgridFarm) -> None:
    assert farm.client("-p", "orin-01", "acquire", user="carol").returncode == 0
    shown = run_cli("lease", "show", "labgrid:board=orin", "--targets-dir", str(setup))
    assert shown.returncode == 0 and "orin-01" in shown.stdout and "/carol" in shown.stdout, shown.stdout
    broken = run_cli("lease", "break", "labgrid:board=orin", "--targets-dir", str(setup))
    assert broken.returncode == 2 and "name one place" in broken.stderr  # a tag picks no single place
    (setup / "orin.yaml").write_text((setup / "farm.yaml").read_text().replace(
        f'coordinator: "{farm.address}"', f'coordinator: "{farm.address}", place: orin-01'))
    broken = run_cli("lease", "break", "orin", "--targets-dir", str(setup))
    assert broken.returncode == 0 and "kicked" in broken.stdout and "labgrid's kick" in broken.stdout
    assert farm.holder("orin-01") is None


def test_a_killed_controller_is_resumed_and_takes_its_place_back(setup: Path, farm: LabgridFarm,
                                                                 tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = _controller(tmp_path, setup, results, "alice", runtime_s=3)
    try:
        wait_for("the first run to be running", lambda: _statuses(results)[0] == "running", timeout=300)
        proc.kill()  # no cleanup: the place stays locked by alice on this host
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (farm.holder("orin-01") or "").endswith("/alice")
    (path,) = results.iterdir()
    resumed = run_cli("run", "--resume", path.name, "--results", str(results), "--targets-dir", str(setup),
                      "--lease-wait", "0", env={"LG_USERNAME": "alice"})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "took back the labgrid place still locked by" in resumed.stdout
    rs = load_result_set(results / path.name.removesuffix(".incomplete"))
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]
    assert farm.holder("orin-01") is None


def test_coordinator_stopped_mid_campaign_stops_before_the_next_run(setup: Path, farm: LabgridFarm,
                                                                     tmp_path: Path) -> None:
    results, release = tmp_path / "results", tmp_path / "go"
    proc = _controller(tmp_path, setup, results, "alice",
                       env={"HARNESS_PAUSE_AT": "between-runs", "HARNESS_PAUSE_RELEASE": str(release)})
    try:
        wait_for("the pause after the first run", lambda: _statuses(results)[0] == "ok", timeout=300)
        farm.stop_coordinator()
        release.touch()
        code, out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 3, out + err
    lines = [line for line in err.strip().splitlines() if not line.startswith("paused at ")]  # the test seam's
    assert len(lines) == 1 and "went away: stopped before the next run" in lines[0], err
    (path,) = results.iterdir()
    statuses = [r["status"] for r in json.loads((path / "manifest.json").read_text())["runs"]]
    assert statuses == ["ok", "pending"]  # the run before the stop is kept, the next one never started
    farm.start_coordinator()  # back, with its places (and no locks: labgrid forgets them)
    resumed = run_cli("run", "--resume", path.name, "--results", str(results), "--targets-dir", str(setup),
                      "--lease-wait", "60", env={"LG_USERNAME": "alice"})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rs = load_result_set(results / path.name.removesuffix(".incomplete"))
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]
    assert farm.holder("orin-01") is None


def test_sigint_releases_the_place(setup: Path, farm: LabgridFarm, tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = _controller(tmp_path, setup, results, "alice", runtime_s=3)
    try:
        wait_for("alice to lock the place", lambda: (farm.holder("orin-01") or "").endswith("/alice"), timeout=300)
        wait_for("a run to start", lambda: list(results.glob("*.incomplete")), timeout=300)
        proc.send_signal(signal.SIGINT)
        code, out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, out + err
    assert farm.holder("orin-01") is None


@pytest.fixture()
def netns_sshd(tmp_path: Path) -> Iterator[SshServer]:
    """A second board: sshd in a network namespace with its own address (as in test_ssh_farm)."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    namespace = NetnsBoard(2).create()
    server = SshServer(tmp_path / "sshd-netns", address=namespace.board_addr, netns=namespace.name)
    try:
        yield server.start()
    finally:
        server.stop()
        namespace.destroy()


def test_two_places_one_controller_loopback_and_netns_boards(setup: Path, farm: LabgridFarm, sshd: SshServer,
                                                              netns_sshd: SshServer, tmp_path: Path) -> None:
    farm.export("board2", address=netns_sshd.address, port=netns_sshd.port)
    farm.place("orin-02", "board2", board="orin")
    workdirs = [f"/var/tmp/harness-ssh-tests/{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name, place, server, workdir in (("loop", "orin-01", sshd, workdirs[0]),
                                         ("netns", "orin-02", netns_sshd, workdirs[1])):
        (setup / f"{name}.yaml").write_text(
            f"platform: linux\nlabgrid: {{coordinator: \"{farm.address}\", place: {place}}}\n"
            f"transport:\n  ssh: {{key: {server.client_key}, known_hosts: {server.known_hosts}}}\n"
            f"workdir: {workdir}\n")
    try:
        done = run_cli("run", str(_experiment(tmp_path)), "--target", "loop", "--target", "netns", "--targets-dir",
                       str(setup), "--results", str(tmp_path / "results"), env={"LG_USERNAME": "alice"})
    finally:
        for workdir in workdirs:
            shutil.rmtree(workdir, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").iterdir()
    leases = {t["name"]: t["lease"]["place"] for t in json.loads((path / "manifest.json").read_text())["targets"]}
    assert leases == {"loop": "orin-01", "netns": "orin-02"}
    # the netns board was reached at the address its NetworkService gave, through its own sshd
    assert f"Accepted publickey for root from {netns_sshd.address.rsplit('.', 1)[0]}" in \
        (netns_sshd.root / "sshd.log").read_text()
    assert farm.holder("orin-01") is None and farm.holder("orin-02") is None


def test_host_key_of_a_place_is_trusted_at_the_address_labgrid_gives(setup: Path, farm: LabgridFarm,
                                                                      sshd: SshServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "fresh_known_hosts"
    (setup / "orin.yaml").write_text(
        f"platform: linux\nlabgrid: {{coordinator: \"{farm.address}\", place: orin-01}}\n"
        f"transport:\n  ssh: {{key: {sshd.client_key}, known_hosts: {known_hosts}}}\n")
    checked = run_cli("targets", "--check", "--targets-dir", str(setup))
    assert checked.returncode == 1 and "harness targets trust orin" in checked.stdout  # unknown key: refused
    trusted = run_cli("targets", "trust", "orin", "--yes", "--targets-dir", str(setup))
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert known_hosts.read_text().startswith(f"[{sshd.address}]:{sshd.port} ssh-ed25519 ")
    assert known_hosts.read_text().split()[2] == sshd.known_hosts.read_text().split()[2]  # the board's own key
