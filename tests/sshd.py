"""A real OpenSSH server for the tests: loopback, free port, temporary host and client keys, key-only auth.

``SshServer.start`` writes everything under one directory and waits until the port answers; ``stop``
ends the server by its pid (and the per-connection children it forked). ``write_target`` writes a
targets/NAME.yaml that points at it, with a known_hosts file of its own so the user's is never touched.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import slow_only

SSHD = "/usr/sbin/sshd"


def sshd_unavailable() -> str | None:
    """Why a real sshd cannot be started here, or None."""
    if not Path(SSHD).exists():
        return "openssh-server is not installed (apt-get install openssh-server; `make setup` does it)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is not installed"
    if os.geteuid() != 0 and not os.access("/run/sshd", os.W_OK):
        return "sshd needs root (privilege separation directory /run/sshd)"
    return None


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL (no orphan server)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "harness-test", "-f", str(path)],
                   check=True, capture_output=True)
    return path


@dataclass
class SshServer:
    root: Path
    address: str = "127.0.0.1"
    port: int = 0
    netns: str | None = None  # run inside this network namespace (a second "board")
    pid: int | None = None
    client_key: Path = field(init=False)
    host_key: Path = field(init=False)
    known_hosts: Path = field(init=False)

    def start(self) -> SshServer:
        slow_only("starts sshd")
        self.root.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.port = self.port or free_port(self.address if self.netns is None else "127.0.0.1")
        self.host_key = keygen(self.root / "host_ed25519")
        self.client_key = keygen(self.root / "client_ed25519")
        (self.root / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        config = self.root / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", f"ListenAddress {self.address}", f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}", f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",  # keys live under /tmp
            "MaxSessions 50", "MaxStartups 50", "LogLevel VERBOSE", ""]))
        argv = [SSHD, "-D", "-f", str(config), "-E", str(self.root / "sshd.log")]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent)
        self.pid = proc.pid  # `ip netns exec` execs sshd, so this is sshd's pid either way
        self._proc = proc
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        entry = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text(f"{entry} {host_pub[0]} {host_pub[1]}\n")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                log = (self.root / "sshd.log").read_text(errors="replace") if (self.root / "sshd.log").exists() else ""
                raise RuntimeError(f"sshd exited with {proc.returncode}: {err} {log}")
            if self._answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("sshd did not answer within 20 s")

    def _answers(self) -> bool:
        try:  # from the controller's side: in a netns the address is reached over the veth pair
            with socket.create_connection((self.address, self.port), timeout=1):
                return True
        except OSError:
            return False

    def session_children(self) -> list[int]:
        """Pids of the sshd processes serving connections (children of the listener)."""
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.pid:
                children.append(int(entry))
        return children

    def drop_connections(self) -> list[int]:
        """Kill every sshd child serving a session: the controller's connection drops, the server stays."""
        killed = self.session_children()
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return killed

    def stop(self) -> None:
        if self.pid is None:
            return
        children = self.session_children()
        for pid in [self.pid, *children]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self._proc.wait()
        self.pid = None

    def target_yaml(self, *, workdir: str, tags: tuple[str, ...] = ("ssh",), extra: str = "",
                    known_hosts: Path | None = None) -> str:
        return (f"platform: linux\n"
                f"transport:\n  ssh:\n    host: {self.address}\n    port: {self.port}\n    user: root\n"
                f"    key: {self.client_key}\n    known_hosts: {known_hosts or self.known_hosts}\n{extra}"
                f"workdir: {workdir}\nblock_device: auto\ntags: [{', '.join(tags)}]\n")

    def write_target(self, targets_dir: Path, name: str, *, workdir: str, **kwargs: object) -> Path:
        targets_dir.mkdir(parents=True, exist_ok=True)
        path = targets_dir / f"{name}.yaml"
        path.write_text(self.target_yaml(workdir=workdir, **kwargs))  # type: ignore[arg-type]
        return path


def netns_unavailable() -> str | None:
    """Why a network namespace with a veth pair cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    name = f"hxprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return None


@dataclass
class NetnsBoard:
    """A second "board": a network namespace with its own address, reached over a veth pair."""

    index: int
    name: str = ""
    host_if: str = ""
    host_addr: str = ""
    board_addr: str = ""

    def create(self) -> NetnsBoard:
        _remove_stale_namespaces()
        tag = uuid.uuid4().hex[:6]  # unique even when several test runs share this machine
        self.name, self.host_if = f"hxboard-{os.getpid()}-{tag}", f"hxv{tag}"
        in_use = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=False).stdout
        subnet = next(n for n in range(16 + self.index, 250) if f" 10.231.{n}." not in in_use)
        self.host_addr, self.board_addr = f"10.231.{subnet}.1", f"10.231.{subnet}.2"
        steps = [
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "eth0b", "netns", self.name],
            ["ip", "addr", "add", f"{self.host_addr}/30", "dev", self.host_if],
            ["ip", "link", "set", self.host_if, "up"],
            ["ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.board_addr}/30", "dev", "eth0b"],
            ["ip", "netns", "exec", self.name, "ip", "link", "set", "eth0b", "up"],
            ["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"],
        ]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.destroy()
                raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return self

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


def _remove_stale_namespaces() -> None:
    """Namespaces (and their veth pairs) left by a test run that was killed before its teardown."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "hxboard" and parts[1].isdigit() and not Path(f"/proc/{parts[1]}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
