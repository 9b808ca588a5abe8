"""The real adb host server (Debian's ``adb``) for the tests, on a free port of its own.

``AdbServer.start`` runs ``adb -P PORT nodaemon server`` as a child of the test (never the user's server
on 5037; HOME points at a temporary directory, so the server's RSA key is made there and the user's
``~/.android`` is never read or written) and waits until the port answers; ``stop`` ends it by its pid.
Devices are ``tests/fakeadbd.FakeAdbd`` stand-ins reached with ``adb connect``, as a phone over Wi-Fi.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.helpers import slow_only
from tests.sshd import die_with_parent, free_port

ADB = "adb"
# variables that would point a client or the server elsewhere (another server, the user's keys)
_FOREIGN_ENV = ("ADB_SERVER_SOCKET", "ANDROID_ADB_SERVER_PORT", "ANDROID_ADB_SERVER_ADDRESS", "ANDROID_SERIAL",
                "ADB_VENDOR_KEYS", "ANDROID_SDK_HOME", "ANDROID_USER_HOME", "ADB_TRACE")


def adb_unavailable() -> str | None:
    """Why a real adb server cannot be started here, or None."""
    if shutil.which(ADB) is None:
        return "adb is not installed (apt-get install adb; `make setup` does it as root)"
    return None


class AdbServer:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
        self.env["HOME"] = str(self.root / "home")

    def start(self, timeout: float = 20) -> AdbServer:
        slow_only("starts an adb server")
        (self.root / "home").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen([ADB, "-P", str(self.port), "nodaemon", "server"], env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"adb server exited with {self.proc.returncode}: {self.log()[-500:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"adb server did not listen on {self.port} within {timeout:.0f} s")

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")

    def adb(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """The real adb client against this server only."""
        return subprocess.run([ADB, "-P", str(self.port), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def devices(self) -> dict[str, str]:
        out = self.adb("devices").stdout
        return dict(line.split("\t", 1) for line in out.splitlines()[1:] if "\t" in line)

    def wait_state(self, serial: str, state: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.devices().get(serial) == state:
                return
            time.sleep(0.1)
        raise AssertionError(f"{serial} never became {state!r}: {self.devices()}")

    def connect(self, serial: str, state: str = "device") -> None:
        """``adb connect SERIAL`` and wait until the server lists it in ``state``."""
        self.adb("connect", serial)
        self.wait_state(serial, state)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
