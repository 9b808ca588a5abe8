"""The jtop collector's live path: the REAL jetson-stats client (pinned in the dev extras) talking to a
jtop service over jetson-stats' own IPC (a multiprocessing manager on a Unix socket, its authkey and
version handshake). The service itself needs a Jetson's sysfs, so tests/fakejtop.py runs jetson-stats'
own service code with only its hardware readers replaced by a real board's captured properties.

What each client error becomes is checked against the real client: service down (no socket, or a
stale socket nobody listens on), another service version, a wrong authkey, no permission on the
socket, and the service dying during a run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jtop
import pandas as pd
import pytest
from jtop import service

from harness.parsers import parse
from runner import sysroot
from runner.collectors import jetson_stats
from runner.collectors.base import Unavailable
from runner.collectors.run import start_platform
from tests import fakeboard as fb
from tests.fakejtop import load_capture
from tests.helpers import REPO, run_cli, slow_only, wait_for

# jetson-stats 7.2.2 calls distro.linux_distribution() (deprecated) when the client starts
pytestmark = pytest.mark.filterwarnings("ignore:distro.linux_distribution:DeprecationWarning")

CAPTURE = fb.DATA / "jetson" / "jtop-properties-orin-nano-25w.txt"
PROPS = load_capture(CAPTURE)


class Service:
    """The stand-in service in its own process group, stopped by SIGTERM to its pid (it closes like the
    real one: run process terminated, manager shut down, socket removed)."""

    def __init__(self, root: Path, *args: str) -> None:
        slow_only("starts a jtop service")
        self.socket = root / "run" / "jtop.sock"
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fakejtop", "--socket", str(self.socket),
                                      "--capture", str(CAPTURE), *args], cwd=REPO, start_new_session=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # ready when the real JtopServer.start() has made the socket srw-rw---- (after its manager is up)

        def ready() -> bool:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail("the jtop stand-in exited before its socket was ready: " + self.output)
            return self.socket.stat().st_mode & 0o777 == 0o660  # no socket yet: OSError, "not yet"

        try:
            wait_for(f"the jtop stand-in's socket {self.socket} (srw-rw----)", ready, timeout=60, interval=0.02)
        except AssertionError as exc:
            self.stop()
            pytest.fail(f"{exc}: {self.output}")
        self.output = ""

    def kill(self) -> None:
        """Like a crash: every process of the service at once, the socket file left behind."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.output = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
        # nothing of the service's process group is left running
        try:
            wait_for("the jtop stand-in's process group to be gone", lambda: not _group_alive(self.proc.pid),
                     timeout=30)
        except AssertionError as exc:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail(f"the jtop stand-in left processes behind ({exc})")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short sysroot (a Unix socket path must stay under 108 bytes), readable by other users."""
    path = Path(tempfile.mkdtemp(prefix="jtop-", dir="/tmp"))
    path.chmod(0o755)
    monkeypatch.setattr(sysroot, "ROOT", str(path))
    monkeypatch.setattr(service, "JTOP_PIPE", service.JTOP_PIPE)  # the sampler points the client at ROOT
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def serve(root: Path) -> Iterator:
    started: list[Service] = []

    def _serve(*args: str) -> Service:
        started.append(Service(root, *args))
        return started[-1]

    yield _serve
    for item in started:
        item.stop()


def _wait_lines(path: Path, count: int) -> None:
    wait_for(f"{count} jtop samples in {path.name}", lambda: path.read_bytes().count(b"\n") >= count, timeout=60,
             interval=0.02)


# the tegrastats columns a jtop row must have too, with what the captured board reported
TEGRASTATS_COLUMNS = {
    "ram_used_mb": 1687344 / 1024, "ram_total_mb": 3688892 / 1024, "swap_used_mb": 0, "swap_total_mb": 1844424 / 1024,
    "cpu_load_pct": [18, 39, 9, 9, 5, 3], "cpu_freq_mhz": [1344, 1344, 1344, 1344, 729.6, 729.6],
    "emc_load_pct": 0, "emc_freq_mhz": 2133, "gpu_load_pct": 4.8, "gpu_freq_mhz": 306,
    "temp_cpu_c": 46.062, "temp_gpu_c": 46.406, "temp_tj_c": 47.906, "temp_soc0_c": 45.875,
    "power_vdd_in_mw": 5133, "power_vdd_in_avg_mw": 4800, "power_vdd_soc_mw": 1540, "power_vdd_soc_avg_mw": 1524,
    "power_vdd_cpu_gpu_cv_mw": 1064, "power_vdd_cpu_gpu_cv_avg_mw": 806,
}


def test_the_runner_constant_is_the_clients_socket() -> None:
    assert service.JTOP_PIPE == jetson_stats.JTOP_SOCKET == "/run/jtop.sock"
    assert jtop.__version__ == "7.2.2"  # the pinned client these tests speak to


@pytest.mark.slow
def test_the_stand_in_gives_the_real_clients_stats_of_the_captured_board(serve) -> None:
    """The stand-in's payload is the board's, as far as the real client can tell: its ``jetson.stats``
    computed from it equals the ``jetson.stats`` printed on that board at the same moment."""
    svc = serve()
    script = f"""import json, sys
from jtop import jtop, service
service.JTOP_PIPE = {str(svc.socket)!r}
with jtop(interval=0.1) as jetson:
    jetson.ok()
    stats = dict(jetson.stats)
    print(json.dumps({{"stats": stats, "nvp": jetson.nvpmodel.name, "interval": jetson.interval}}, default=str))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    want = {k: v for k, v in PROPS["stats"].items() if k not in ("time", "uptime")}
    assert {k: v for k, v in got["stats"].items() if k not in ("time", "uptime")} == want
    assert got["nvp"] == "25W" and got["interval"] == 0.1


@pytest.mark.slow
def test_live_jtop_samples_parse_into_the_tegrastats_columns(serve, root: Path, tmp_path: Path) -> None:
    serve()
    running, skipped = start_platform({"jtop": {"period_ms": 100}}, str(tmp_path))
    assert skipped == {} and [item.kind for item in running] == ["jtop"]
    _wait_lines(tmp_path / "jtop.jsonl", 4)
    assert [item.stop() for item in running] == [None]
    raw = (tmp_path / "jtop.jsonl").read_bytes()
    records = [json.loads(line) for line in raw.splitlines()]
    # successive samples of the service at our period, not one sample repeated
    uptimes = [r["stats"]["uptime"] for r in records]
    assert uptimes == sorted(set(uptimes)) and {r["interval_s"] for r in records} == {0.1}
    rows = parse("jtop", raw)
    tegra = parse("tegrastats", (fb.DATA / "jetson" / "tegrastats-orin-nano-super-jp7.log").read_bytes())[0]
    assert set(TEGRASTATS_COLUMNS) <= set(tegra)
    for row in rows:
        assert {k: row.get(k) for k in TEGRASTATS_COLUMNS} == TEGRASTATS_COLUMNS
        assert row["temp_cv0_c"] is None and row["nvp_model"] == "25W" and row["jetson_clocks"] == "OFF"
    assert [r["t_ns"] for r in rows] == sorted(r["t_ns"] for r in rows)


READ = "read: {file: data, pattern: seq}"
# a step that lasts (fio's runtime): the collectors sample it many periods over, and their tools have started
FIO_2S = "fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 2}"


def _jetson_run(tmp_path: Path, root: Path, collect: str, step: str = READ,
                ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A whole `harness run` on a fake Jetson whose runner is this venv's Python (it has jetson-stats)."""
    fb.jetson_tree(root)
    env = fb.jetson_env(root, fb.jetson_tools(tmp_path / "bin"))
    exp = tmp_path / "jtop.yaml"
    exp.write_text(f"name: jtop\ntargets: [board]\nfiles:\n  data: {{create: 8M}}\ncache: none\n{collect}\n"
                   f"steps:\n  - {step}\n")
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "board.yaml").write_text(f"platform: jetson\ntransport: local\nworkdir: {tmp_path / 'work'}\n"
                                        f"python: {sys.executable}\n")
    results = tmp_path / "results"
    done = run_cli("run", str(exp), "--targets-dir", str(targets), "--results", str(results),
                   "--scratch", str(tmp_path / "scratch"), env=env, timeout=300)
    return done, results


@pytest.mark.slow
def test_a_run_puts_jtop_and_tegrastats_rows_in_one_telemetry_table(serve, root: Path, tmp_path: Path) -> None:
    serve()
    done, results = _jetson_run(tmp_path, root, "collect:\n  jtop: {period_ms: 100}\n  tegrastats: {period_ms: 100}",
                                step=FIO_2S)
    assert done.returncode == 0, done.stdout + done.stderr
    [rs] = list(results.iterdir())
    record = json.loads(next((rs / "raw").rglob("run.json")).read_text())
    assert not record.get("collector_errors"), record.get("collector_errors")
    telemetry = pd.read_parquet(rs / "tables" / "telemetry.parquet")
    jt, tegra = telemetry[telemetry["source"] == "jtop"], telemetry[telemetry["source"] == "tegrastats"]
    assert len(jt) >= 2 and len(tegra) >= 1
    # the same columns: every one filled by jtop, and the ones the replayed tegrastats line has by both
    assert set(TEGRASTATS_COLUMNS) <= set(telemetry.columns)
    assert all(jt[column].notna().all() for column in TEGRASTATS_COLUMNS)
    for column in ("ram_used_mb", "ram_total_mb", "cpu_load_pct", "gpu_load_pct", "temp_tj_c", "power_vdd_in_mw"):
        assert tegra[column].notna().all(), column
    assert jt["power_vdd_in_mw"].iloc[0] == 5133 and jt["t_rel_s"].notna().all()


@pytest.mark.slow
def test_a_service_of_another_version_is_one_line_in_the_run_record(serve, root: Path, tmp_path: Path) -> None:
    serve("--version", "7.1.0")
    done, results = _jetson_run(tmp_path, root, "collect:\n  jtop: {period_ms: 100, optional: true}")
    assert done.returncode == 0, done.stdout + done.stderr
    [rs] = list(results.iterdir())
    record = json.loads(next((rs / "raw").rglob("run.json")).read_text())
    assert record["collector_errors"] == [
        f"jtop skipped (optional): jtop service: Mismatch version jtop service: [7.1.0] and client: "
        f"[{jtop.__version__}]. Please run: sudo jtop --install-service"]


# ------------------------------------------------------------------------------------- client errors
def _start_error(spec: dict, tmp_path: Path) -> str:
    """The reason an optional jtop collector is skipped; the same reason fails a required one."""
    running, skipped = start_platform({"jtop": {**spec, "optional": True}}, str(tmp_path))
    assert running == []
    with pytest.raises(Unavailable) as required:
        start_platform({"jtop": spec}, str(tmp_path))
    assert str(required.value) == "collector jtop: " + skipped["jtop"]
    assert "\n" not in skipped["jtop"]
    return skipped["jtop"]


def test_no_service_is_named_before_the_client_is_tried(root: Path, tmp_path: Path) -> None:
    sock = root / "run" / "jtop.sock"
    assert _start_error({"period_ms": 100}, tmp_path) == (
        f"the jtop service is not running: no {sock} (sudo systemctl restart jtop.service)")
    # the real client on the same missing socket (FileNotFoundError inside it)
    with pytest.raises(Unavailable, match=r"^jtop service: The jtop.service is not active. Please run: "
                                             r"sudo jtop --install-service$"):
        jetson_stats.JtopSampler(100, str(tmp_path / "jtop.jsonl")).start()
    assert not (tmp_path / "jtop.jsonl").exists()


def test_a_stale_socket_of_a_dead_service(root: Path, tmp_path: Path) -> None:
    import socket

    path = root / "run" / "jtop.sock"
    path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as sock:  # bound, never listening: what a crashed service leaves
        sock.bind(str(path))
    assert _start_error({"period_ms": 100}, tmp_path) == (
        "jtop service: The jtop.service is not active. Please run: sudo jtop --install-service")


@pytest.mark.slow
def test_a_service_of_another_version(serve, tmp_path: Path) -> None:
    serve("--version", "6.2.0")
    assert _start_error({"period_ms": 100}, tmp_path) == (
        f"jtop service: Mismatch version jtop service: [6.2.0] and client: [{jtop.__version__}]. "
        "Please run: sudo jtop --install-service")


@pytest.mark.slow
def test_a_service_with_another_authkey(serve, tmp_path: Path) -> None:
    serve("--authkey", "not-jetson-stats")
    assert _start_error({"period_ms": 100}, tmp_path) == (
        "jtop service: Authentication with jetson-stats server failed")


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv (util-linux) to run the client as another user")
def test_a_user_outside_the_socket_group(serve, root: Path) -> None:
    """The socket is root:<group> srw-rw---- as the real service makes it; a user outside the group is
    refused by the kernel. Our check names the fix; the real client's own refusal is one line too."""
    svc = serve("--gid", "0")
    assert oct(svc.socket.stat().st_mode & 0o777) == "0o660"
    script = f"""import json, os
from runner.collectors import availability, jetson_stats
from runner.collectors.base import Unavailable
from runner import sysroot
sysroot.ROOT = {str(root)!r}
try:
    jetson_stats.JtopSampler(100, os.devnull).start()
    client = None
except Unavailable as exc:
    client = str(exc)
print(json.dumps({{"reason": availability.unavailable_reason("jtop"), "client": client}}))
"""
    # setpriv, not Popen(user=): it keeps root's capabilities up to the exec, so a Python installed under
    # /root starts; the process that then connects has none (CapEff 0), like any user outside the group
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", script],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["reason"] == (f"no permission to connect to {svc.socket}: the user must be in group jtop "
                             "(sudo usermod -aG jtop $USER, then log in again)")
    assert got["client"] == "jtop service: I can't access jtop.service. Please logout or reboot this board."


@pytest.mark.slow
def test_a_service_that_dies_during_the_run(serve, tmp_path: Path) -> None:
    svc = serve()
    running, _ = start_platform({"jtop": {"period_ms": 100}}, str(tmp_path))
    _wait_lines(tmp_path / "jtop.jsonl", 2)
    svc.kill()
    # the collector notices by itself, before anyone stops it
    wait_for("the jtop collector's thread to end after the service died", lambda: not running[0].thread.is_alive(),
             timeout=60, interval=0.02)
    assert running[0].stop() == "jtop service: Lost connection with jtop server"
    assert len(parse("jtop", (tmp_path / "jtop.jsonl").read_bytes())) >= 2  # what came before is kept


@pytest.mark.slow
def test_a_hung_service_is_given_up_on_and_the_runner_still_exits(serve, root: Path) -> None:
    """A stopped service still accepts on its socket, and the client would wait forever: the collector
    gives up after its connect timeout, and the process exits (no stuck client thread holds it)."""
    svc = serve()
    os.killpg(svc.proc.pid, signal.SIGSTOP)
    try:
        script = f"""import json, os, time
from runner.collectors import availability, jetson_stats
from runner.collectors.base import Unavailable
from runner import sysroot
sysroot.ROOT = {str(root)!r}
jetson_stats.JTOP_CONNECT_TIMEOUT_S = 2
t0 = time.monotonic()
try:
    jetson_stats.JtopSampler(100, os.devnull).start()
    reason = None
except Unavailable as exc:
    reason = str(exc)
print(json.dumps({{"reason": reason, "waited_s": time.monotonic() - t0}}), flush=True)
"""
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["reason"] == ("jtop service: no answer within 2 s (is jtop.service hung? "
                                 "sudo systemctl restart jtop.service)")
        # it waited out its connect timeout, then gave up (a client stuck for good fails the subprocess timeout above)
        assert got["waited_s"] >= 2
    finally:
        os.killpg(svc.proc.pid, signal.SIGCONT)
