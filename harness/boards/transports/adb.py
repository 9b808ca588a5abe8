"""adb transport (adbutils): phones without Termux's sshd.

Target YAML::

    transport: {adb: {serial: R58A1234, host: 127.0.0.1, port: 5037}}   # all optional

Commands run through ``adb shell`` (v1: stdout and stderr arrive merged; the exit code is read
back by adbutils). Files move with the sync protocol. The adb server must already run: adbutils
would otherwise start one as a side effect, so reachability is checked first and a missing server
is one clear error.
"""

from __future__ import annotations

import shlex
import signal as _signal
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.boards.transports.base import CommandResult, ShellFileProbes, register_transport
from harness.boards.transports.procid import RecordedProcesses
from harness.errors import TargetError

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 5037


def shell_command(argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    """One ``sh -c``-safe line: ``cd CWD && env K=V argv...``, every word quoted."""
    words = " ".join(shlex.quote(str(a)) for a in argv)
    if env:
        words = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + words
    return f"cd {shlex.quote(cwd)} && {words}" if cwd else words


def detached_command(argv: Sequence[str], cwd: str, log: str, env: dict[str, str] | None = None) -> str:
    """Start in the background, immune to the shell closing, output to ``log``; print the pid."""
    logdir = shlex.quote(str(Path(log).parent))
    return (f"mkdir -p {logdir} && cd {shlex.quote(cwd)} && "
            f"(nohup {shell_command(argv, None, env)} >> {shlex.quote(log)} 2>&1 < /dev/null & echo $!)")


class AdbTransport(ShellFileProbes, RecordedProcesses):
    name = "adb"
    shares_controller_files = False

    def __init__(self, target: Any) -> None:
        from adbutils import AdbClient

        options = target.transport_options
        self.target_name = target.name
        self.host, self.port = str(options.get("host", DEFAULT_HOST)), int(options.get("port", DEFAULT_PORT))
        self._check_server()
        self.client = AdbClient(host=self.host, port=self.port, socket_timeout=30)
        self.device = self._pick(options.get("serial"))

    def _check_server(self) -> None:
        try:
            socket.create_connection((self.host, self.port), timeout=3).close()
        except OSError as exc:
            raise TargetError(f"target {self.target_name}: no adb server at {self.host}:{self.port} "
                              f"({exc.strerror or exc}); start it with: adb -P {self.port} start-server") from None

    def _pick(self, serial: str | None) -> Any:
        from adbutils import AdbError

        try:
            infos = self.client.list()
        except AdbError as exc:
            raise TargetError(f"target {self.target_name}: adb server {self.host}:{self.port}: {exc}") from None
        ready = [i.serial for i in infos if i.state == "device"]
        others = {i.serial: i.state for i in infos if i.state != "device"}
        if serial:
            if serial in ready:
                return self.client.device(serial=serial)
            state = f" (it is {others[serial]}: unlock the phone and accept USB debugging)" if serial in others else ""
            raise TargetError(f"target {self.target_name}: device {serial} is not attached{state}; "
                              f"attached: {', '.join(ready) or 'none'}")
        if not ready:
            hint = f" ({', '.join(f'{s} is {t}' for s, t in others.items())})" if others else ""
            raise TargetError(f"target {self.target_name}: no device attached to adb{hint}: connect the phone with "
                              "USB debugging on, or adb connect HOST:PORT")
        if len(ready) > 1:
            raise TargetError(f"target {self.target_name}: several devices attached ({', '.join(ready)}); "
                              "set transport: {adb: {serial: ...}}")
        return self.client.device(serial=ready[0])

    # ------------------------------------------------------------------ protocol
    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult:
        from adbutils import AdbError, AdbTimeout

        try:
            done = self.device.shell2(shell_command(argv, cwd, env), timeout=timeout or 600, encoding=None)
        except AdbTimeout:
            raise TargetError(f"{' '.join(map(str, argv[:3]))}: no answer within {timeout or 600:.0f} s") from None
        except AdbError as exc:
            raise TargetError(f"target {self.target_name}: adb shell failed: {exc}") from None
        output = done.output if isinstance(done.output, bytes) else str(done.output).encode()
        # shell v1 merges stderr into stdout: keep it as stderr too when the command failed (error tails)
        return CommandResult(tuple(map(str, argv)), done.returncode, output, output if done.returncode else b"")

    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        dirs = {str(Path(remote).parent)} if local.is_file() else \
            {remote} | {f"{remote}/{p.relative_to(local).parent}" for p in files}
        self.run(["mkdir", "-p", *sorted(dirs)]).check()
        for path in files:
            dest = remote if local.is_file() else f"{remote}/{path.relative_to(local)}"
            self.device.sync.push(str(path), dest)

    def get(self, remote: str, local: Path) -> None:
        if not self.exists(remote):
            raise TargetError(f"{remote}: not found on the target")
        local = Path(local)
        listing = self.run(["find", remote, "-type", "f"]).check().stdout.decode().split()
        for path in listing:
            rel = Path(path).relative_to(remote) if path != remote else Path(Path(remote).name)
            dest = local / rel if path != remote else local
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.device.sync.pull(path, str(dest))


    def start_detached(self, argv: Sequence[str], *, cwd: str, log: str,
                       env: dict[str, str] | None = None) -> int:
        done = self.device.shell2(detached_command(argv, cwd, log, env), timeout=60, encoding=None)
        text = done.output.decode(errors="replace").strip().splitlines() if done.output else []
        if done.returncode != 0 or not text or not text[-1].isdigit():
            raise TargetError(f"target {self.target_name}: could not start {argv[0]}: {' '.join(text)[-200:]}")
        return int(text[-1])

    def alive(self, pid: int) -> bool:
        return self.run(["kill", "-0", str(pid)]).returncode == 0

    def signal(self, pid: int, signum: int = _signal.SIGTERM) -> None:
        self.run(["kill", f"-{int(signum)}", str(pid)])

    def close(self) -> None:
        pass  # adbutils opens a connection per command


@register_transport("adb")
def _connect(target: Any) -> AdbTransport:
    return AdbTransport(target)
