"""The adb transport through the real adb server: adbutils -> ``adb nodaemon server`` (Debian's adb, a free
port, never 5037) -> ``adb connect`` -> a phone's adbd. Only the phone is a stand-in (tests/fakeadbd.py:
the adb device protocol over TCP, running commands and file sync on this machine), so argument quoting,
exit codes over the v1 shell, detached starts, push/pull and the "not attached", "unauthorized",
"offline" and "several devices" errors are the real server's behaviour."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.boards.transports import TRANSPORTS, connect
from harness.boards.transports.adb import detached_command, shell_command
from harness.config.target import Target
from harness.errors import TargetError
from tests.adbserver import AdbServer, adb_unavailable, free_port
from tests.fakeadbd import FakeAdbd
from tests.helpers import wait_for

# the tests that start the real adb server (the `adb_server` fixture) are marked slow one by one
needs_adb = pytest.mark.skipif(adb_unavailable() is not None, reason=adb_unavailable() or "")


@pytest.fixture
def adb_server(tmp_path: Path) -> Iterator[AdbServer]:
    server = AdbServer(tmp_path / "adb").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def phones() -> Iterator[list[FakeAdbd]]:
    """Every stand-in phone a test makes is unplugged at the end."""
    made: list[FakeAdbd] = []
    yield made
    for phone in made:
        phone.stop()


@pytest.fixture
def phone(adb_server: AdbServer, phones: list[FakeAdbd]) -> FakeAdbd:
    """One authorized phone attached to the real server."""
    device = FakeAdbd(model="Pixel Stand-in")
    phones.append(device)
    adb_server.connect(device.serial)
    return device


def _target(port: int, **options: object) -> Target:
    return Target(name="phone", platform="android", transport={"adb": {"port": port, **options}})


def test_adb_is_a_registered_transport() -> None:
    assert "adb" in TRANSPORTS


def test_no_adb_server_is_one_clear_error_and_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # adbutils' own fallback would run `adb start-server` (on the user's 5037): here its adb only records the call
    called = tmp_path / "adb-was-run"
    fake_adb = tmp_path / "adb"
    fake_adb.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 1\n")
    fake_adb.chmod(0o755)
    monkeypatch.setenv("ADBUTILS_ADB_PATH", str(fake_adb))
    port = free_port()
    with pytest.raises(TargetError, match=rf"no adb server at 127.0.0.1:{port} .*adb -P {port} start-server"):
        connect(_target(port))
    assert not called.exists()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


@needs_adb
@pytest.mark.slow
def test_device_selection_errors(adb_server: AdbServer, phones: list[FakeAdbd]) -> None:
    a, b, locked = FakeAdbd(), FakeAdbd(), FakeAdbd(authorized=False)
    phones.extend([a, b, locked])
    adb_server.connect(a.serial)
    adb_server.connect(b.serial)
    adb_server.connect(locked.serial, state="unauthorized")
    # the server really went through the key exchange: it signed our tokens, then offered its key
    assert locked.offered_keys and locked.offered_keys[0].startswith("QAAAA")  # an adb RSA public key
    port = adb_server.port
    with pytest.raises(TargetError, match=r"device 127.0.0.1:1 is not attached; attached: ") as gone:
        connect(_target(port, serial="127.0.0.1:1"))
    assert set(str(gone.value).split("attached: ")[1].split(", ")) == {a.serial, b.serial}
    with pytest.raises(TargetError, match=rf"{locked.serial} is not attached \(it is unauthorized"):
        connect(_target(port, serial=locked.serial))
    with pytest.raises(TargetError, match=r"several devices attached \((.*)\)") as several:
        connect(_target(port))
    assert {a.serial, b.serial} == set(str(several.value).split("(")[1].split(")")[0].split(", "))
    assert connect(_target(port, serial=b.serial)).run(["true"]).returncode == 0  # a serial picks one

    adb_server.adb("disconnect", b.serial)   # the user drops one ...
    a.stop()                                 # ... and the other is unplugged: the server keeps it, offline
    adb_server.wait_state(a.serial, "offline")
    with pytest.raises(TargetError, match=rf"no device attached to adb \(.*{a.serial} is offline"):
        connect(_target(port))
    with pytest.raises(TargetError, match=rf"{a.serial} is not attached \(it is offline"):
        connect(_target(port, serial=a.serial))


@needs_adb
@pytest.mark.slow
def test_run_quotes_arguments_and_returns_the_exit_code(adb_server: AdbServer, phone: FakeAdbd,
                                                        tmp_path: Path) -> None:
    adb = connect(_target(adb_server.port))
    done = adb.run(["printf", "%s|", "two words", "it's", "$HOME", "a;b", "*"], cwd=str(tmp_path),
                   env={"X": "a b"})
    assert done.returncode == 0 and done.stdout == b"two words|it's|$HOME|a;b|*|"
    env = adb.run(["sh", "-c", 'echo "$X"; pwd'], cwd=str(tmp_path), env={"X": "a b"})
    assert env.stdout.decode().split("\n")[:2] == ["a b", str(tmp_path)]
    assert adb.run(["sh", "-c", "exit 42"]).returncode == 42  # v1 shell: the status comes back in-band
    failed = adb.run(["ls", str(tmp_path / "missing")])
    assert failed.returncode != 0 and b"missing" in failed.stderr
    with pytest.raises(TargetError, match="failed with exit"):
        failed.check()
    assert adb.exists(str(tmp_path)) and not adb.exists(str(tmp_path / "missing"))
    (tmp_path / "f.txt").write_bytes(b"hello\n")
    assert adb.read_file(str(tmp_path / "f.txt")) == b"hello\n"
    big = adb.run(["head", "-c", "3000000", "/dev/zero"])  # many WRTE/OKAY round trips through the server
    assert big.returncode == 0 and big.stdout == b"\0" * 3_000_000
    # every command reached the phone as a v1 shell service, through the server
    assert any(s.startswith("shell:cd ") and "printf" in s for s in phone.services)


@needs_adb
@pytest.mark.slow
def test_put_and_get_files_and_trees(adb_server: AdbServer, phone: FakeAdbd, tmp_path: Path) -> None:
    adb = connect(_target(adb_server.port))
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"alpha\n")
    payload = os.urandom(700_000)  # larger than one sync DATA chunk (64 KiB) and one adb packet (256 KiB)
    (src / "sub" / "deeper" / "bin.dat").write_bytes(payload)
    remote = tmp_path / "phone"
    adb.put(src, str(remote / "tree"))
    adb.put(src / "a.txt", str(remote / "single" / "a.txt"))
    assert (remote / "tree" / "sub" / "deeper" / "bin.dat").read_bytes() == payload
    assert adb.read_file(str(remote / "single" / "a.txt")) == b"alpha\n"
    back = tmp_path / "back"
    adb.get(str(remote / "tree"), back)
    assert (back / "a.txt").read_bytes() == b"alpha\n"
    assert (back / "sub" / "deeper" / "bin.dat").read_bytes() == payload
    adb.get(str(remote / "single" / "a.txt"), tmp_path / "a_back.txt")
    assert (tmp_path / "a_back.txt").read_bytes() == b"alpha\n"
    with pytest.raises(TargetError, match="not found on the target"):
        adb.get(str(remote / "missing"), tmp_path / "m")
    assert phone.services.count("sync:") >= 4  # files moved with the sync service, not through a shell


@needs_adb
@pytest.mark.slow
def test_detached_start_alive_and_signal(adb_server: AdbServer, phone: FakeAdbd, tmp_path: Path) -> None:
    adb = connect(_target(adb_server.port))
    pid = adb.start_detached(["sh", "-c", "echo started; exec sleep 300"], cwd=str(tmp_path),
                             log=str(tmp_path / "logs" / "x.log"))
    try:
        assert adb.alive(pid)  # the shell returned; the process outlives it
    finally:
        adb.signal(pid)
    wait_for(f"the detached process {pid} to be gone after its signal", lambda: not adb.alive(pid), timeout=60,
             interval=0.1)
    assert (tmp_path / "logs" / "x.log").read_text() == "started\n"


@needs_adb
@pytest.mark.slow
def test_a_phone_unplugged_mid_command_is_an_error_not_a_hang(adb_server: AdbServer, phone: FakeAdbd,
                                                              tmp_path: Path) -> None:
    adb = connect(_target(adb_server.port))
    marker = tmp_path / "running"
    outcome: dict[str, object] = {}

    release = tmp_path / "release"

    def run() -> None:
        try:  # the command runs until the test releases it: only the unplugging can end the call early
            outcome["result"] = adb.run(["sh", "-c", f"touch {marker}; while [ ! -e {release} ]; do sleep 0.05; done"],
                                        timeout=120)
        except TargetError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        wait_for("the command to start on the phone", marker.exists, timeout=60)
        phone.stop()
        worker.join(timeout=60)
        # the call ended on the unplugging (the command was still running), with adb's error, not its own timeout
        assert not worker.is_alive(), "adb.run still waiting 60 s after the phone was unplugged"
        assert "adb shell failed" in str(outcome.get("error")), outcome
    finally:
        release.touch()


def test_command_building() -> None:
    assert shell_command(["a b", "c"], "/tmp/x y", {"K": "v w"}) == "cd '/tmp/x y' && env 'K=v w' 'a b' c"
    line = detached_command(["python3", "-m", "runner"], "/data/w", "/data/w/runs/r.log")
    assert line.startswith("mkdir -p /data/w/runs && cd /data/w && (nohup python3 -m runner >> /data/w/runs/r.log")
    assert line.endswith("& echo $!)")


@needs_adb
@pytest.mark.slow
def test_a_phone_without_python_is_probed_with_its_shell(adb_server: AdbServer, phone: FakeAdbd, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from harness.boards.platforms import PLATFORMS
    from tests import fakeboard as fb

    # the "phone" is this machine behind the real adb server, with a getprop replaying a real capture
    fb.android_tools(tmp_path / "bin", "getprop-pixel-8-pro.txt")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    target = Target(name="phone", platform="android", python="python-not-on-this-phone",
                    transport={"adb": {"port": adb_server.port}})
    session = SimpleNamespace(target=target, transport=connect(target), python=target.python,
                              runner_root=str(tmp_path))
    facts = PLATFORMS["android"].probe(session, [])
    assert facts["probe_method"].startswith("adb-shell")
    assert (facts["model"], facts["soc"], facts["android_release"]) == ("Pixel 8 Pro", "Tensor G3", "14")
    mem_total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert facts["mem_total_bytes"] == mem_total and facts["kernel"]
    [result] = PLATFORMS["android"].check({"android_release_min": 14}, facts, session)
    assert result.ok


@pytest.fixture
def workdir() -> Iterator[str]:
    path = Path("/var/tmp/harness-adb-tests") / uuid.uuid4().hex[:8]  # a real disk, not tmpfs
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


@needs_adb
@pytest.mark.slow
def test_campaign_over_adb_deploys_runs_and_pulls(adb_server: AdbServer, phone: FakeAdbd, tmp_path: Path,
                                                  workdir: str) -> None:
    from harness.results.loader import load_result_set
    from tests.helpers import run_cli

    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "phone.yaml").write_text(
        f"platform: linux\ntransport: {{adb: {{serial: '{phone.serial}', port: {adb_server.port}}}}}\n"
        f"workdir: {workdir}\nblock_device: auto\n")
    size = 4 << 20
    exp = tmp_path / "adb.yaml"
    exp.write_text(f"name: adb\nfiles:\n  data: {{create: {size}}}\ncache: none\nrounds: 1\n"
                   "steps:\n  - read: {file: data, pattern: seq}\n")
    done = run_cli("run", str(exp), "--target", "phone", "--targets-dir", str(targets), "--results",
                   str(tmp_path / "results"), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = list((tmp_path / "results").iterdir())
    rs = load_result_set(path)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok"]
    (entry,) = rs.manifest["targets"]
    assert entry["transport"] == "adb" and entry["deployed"]["files"]["agent.py"]
    runs = rs.table("runs")
    assert list(runs["step"]) == ["read"]
    (read,) = rs.table("reads").to_dict("records")
    assert read["read_bytes"] == read["file_bytes"] == size  # the runner on the "phone" read the created file
    assert len(list((path / "raw" / "phone").iterdir())) == 1
    # the runner went over the phone's adbd: deployed with sync, started detached in a shell, pulled back
    assert "sync:" in phone.services and any("nohup" in s and "runner" in s for s in phone.services)
