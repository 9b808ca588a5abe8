"""The adb transport without a phone: a small adb *server* speaking the real host protocol
(host:version, host:devices, host:transport, shell:) runs commands on this machine, so argument
quoting, exit codes, detached starts and every "no device" error go through adbutils for real."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config.target import Target
from harness.errors import TargetError
from harness.transport import TRANSPORTS, connect
from harness.transport.adb import detached_command, shell_command


class FakeAdbServer:
    """Answers the adb host protocol; ``shell:`` runs through /bin/sh here, like a device would."""

    def __init__(self, devices: dict[str, str]) -> None:
        self.devices = devices  # serial -> state ("device", "unauthorized", ...)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    @staticmethod
    def _read(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError
            data += chunk
        return data

    @staticmethod
    def _block(text: str) -> bytes:
        data = text.encode()
        return b"%04x" % len(data) + data

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    cmd = self._read(conn, int(self._read(conn, 4), 16)).decode()
                    if cmd == "host:version":
                        conn.sendall(b"OKAY" + self._block(f"{40:04x}"))  # 1.0.40: plain host:transport
                        return
                    if cmd in ("host:devices", "host:devices-l"):
                        listing = "".join(f"{s}\t{state}\n" for s, state in self.devices.items())
                        conn.sendall(b"OKAY" + self._block(listing))
                        return
                    if cmd.startswith("host:transport:"):
                        serial = cmd.split(":", 2)[2]
                        if self.devices.get(serial) != "device":
                            conn.sendall(b"FAIL" + self._block(f"device '{serial}' not found"))
                            return
                        conn.sendall(b"OKAY")
                        continue
                    if cmd.startswith("shell:"):
                        conn.sendall(b"OKAY")
                        done = subprocess.run(["/bin/sh", "-c", cmd[6:]], stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
                        conn.sendall(done.stdout)
                        return
                    conn.sendall(b"FAIL" + self._block(f"unknown command {cmd}"))
                    return
            except (ConnectionError, OSError):
                return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[FakeAdbServer]:
    srv = FakeAdbServer({"PHONE1": "device", "LOCKED": "unauthorized"})
    yield srv
    srv.close()


def _target(port: int, **options: object) -> Target:
    return Target(name="phone", platform="android", transport={"adb": {"port": port, **options}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_adb_is_a_registered_transport() -> None:
    assert "adb" in TRANSPORTS


def test_no_adb_server_is_one_clear_error_and_starts_nothing() -> None:
    port = _free_port()
    with pytest.raises(TargetError, match=rf"no adb server at 127.0.0.1:{port} .*adb -P {port} start-server"):
        connect(_target(port))
    with socket.socket() as s:  # adbutils' own fallback would have started a daemon: it must not
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_device_selection_errors(server: FakeAdbServer) -> None:
    with pytest.raises(TargetError, match="device GONE is not attached; attached: PHONE1"):
        connect(_target(server.port, serial="GONE"))
    with pytest.raises(TargetError, match="LOCKED is not attached \\(it is unauthorized"):
        connect(_target(server.port, serial="LOCKED"))
    server.devices.clear()
    with pytest.raises(TargetError, match="no device attached to adb"):
        connect(_target(server.port))
    server.devices.update({"A": "device", "B": "device"})
    with pytest.raises(TargetError, match=r"several devices attached \(A, B\)"):
        connect(_target(server.port))


def test_run_quotes_arguments_and_returns_the_exit_code(server: FakeAdbServer, tmp_path: Path) -> None:
    adb = connect(_target(server.port))
    done = adb.run(["printf", "%s|", "two words", "it's", "$HOME"], cwd=str(tmp_path), env={"X": "a b"})
    assert done.returncode == 0 and done.stdout == b"two words|it's|$HOME|"
    env = adb.run(["sh", "-c", 'echo "$X"; pwd'], cwd=str(tmp_path), env={"X": "a b"})
    assert env.stdout.decode().split("\n")[:2] == ["a b", str(tmp_path)]
    failed = adb.run(["ls", str(tmp_path / "missing")])
    assert failed.returncode != 0 and b"missing" in failed.stderr
    with pytest.raises(TargetError, match="failed with exit"):
        failed.check()
    assert adb.exists(str(tmp_path)) and not adb.exists(str(tmp_path / "missing"))
    (tmp_path / "f.txt").write_bytes(b"hello\n")
    assert adb.read_file(str(tmp_path / "f.txt")) == b"hello\n"


def test_detached_start_alive_and_signal(server: FakeAdbServer, tmp_path: Path) -> None:
    adb = connect(_target(server.port))
    pid = adb.start_detached(["sleep", "30"], cwd=str(tmp_path), log=str(tmp_path / "logs" / "x.log"))
    try:
        assert adb.alive(pid)
    finally:
        adb.signal(pid)
    subprocess.run(["sh", "-c", f"while kill -0 {pid} 2>/dev/null; do sleep 0.05; done"], timeout=10, check=False)
    assert not adb.alive(pid)
    assert (tmp_path / "logs" / "x.log").exists()


def test_command_building() -> None:
    assert shell_command(["a b", "c"], "/tmp/x y", {"K": "v w"}) == "cd '/tmp/x y' && env 'K=v w' 'a b' c"
    line = detached_command(["python3", "-m", "runner"], "/data/w", "/data/w/runs/r.log")
    assert line.startswith("mkdir -p /data/w/runs && cd /data/w && (nohup python3 -m runner >> /data/w/runs/r.log")
    assert line.endswith("& echo $!)")


def test_a_phone_without_python_is_probed_with_its_shell(server: FakeAdbServer, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from harness.platforms import PLATFORMS
    from tests import fakeboard as fb

    # the "phone" is this machine behind the fake adb server, with a getprop replaying a real capture
    fb.android_tools(tmp_path / "bin", "getprop-pixel-8-pro.txt")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    target = Target(name="phone", platform="android", python="python-not-on-this-phone",
                    transport={"adb": {"port": server.port}})
    session = SimpleNamespace(target=target, transport=connect(target), python=target.python,
                              runner_root=str(tmp_path))
    facts = PLATFORMS["android"].probe(session, [])
    assert facts["probe_method"].startswith("adb-shell")
    assert (facts["model"], facts["soc"], facts["android_release"]) == ("Pixel 8 Pro", "Tensor G3", "14")
    mem_total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert facts["mem_total_bytes"] == mem_total and facts["kernel"]
    [result] = PLATFORMS["android"].check({"android_release_min": 14}, facts, session)
    assert result.ok
