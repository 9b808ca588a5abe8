"""The ``ssh`` transport: one persistent Fabric connection per target per campaign.

Commands are argument lists joined with ``shlex.join`` (a value is never pasted into a shell
string). Host keys are checked against known_hosts (paramiko RejectPolicy): an unknown key is an
error that says ``harness targets trust NAME``; a changed key is always an error. Unset options come
from ``~/.ssh/config`` and the agent, as ``ssh`` would (Fabric reads both).

A dropped connection is not a failed run: every operation is idempotent (starting the runner
included: it leaves a pid file), so on a connection error the transport reconnects with backoff and
repeats the operation, for up to ``reconnect_s``.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import signal as _signal
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.boards.transports.base import CommandResult, ShellFileProbes, register_transport
from harness.boards.transports.procid import RecordedProcesses
from harness.boards.transports.ssh_connection import ConnectionLost, SshConnection, SshOptions
from harness.errors import TargetError


def command_line(argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    """One POSIX shell line; every value quoted."""
    line = shlex.join(list(argv))
    if env:
        line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items())]) + " " + line
    if cwd:
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line


# A new session for the started program, so that the connection closing (and a signal to its group) never
# reaches it: os.setsid() in the board's own Python, then exec. `setsid(1)` is util-linux: macOS has none.
_DETACH = "import os, sys\ntry:\n os.setsid()\nexcept OSError:\n pass\nos.execvp(sys.argv[1], sys.argv[1:])"


def detached_script(python: str, argv: Sequence[str], cwd: str, log: str, env: dict[str, str] | None = None) -> str:
    """A POSIX shell script that starts ``argv`` in a session of its own, output to ``log``, and prints its
    pid. The pid file makes a repeated start (after a drop mid-command) return the first process instead of
    starting a second one."""
    pidfile = shlex.quote(log + ".pid")
    inner = command_line(["nohup", python, "-c", _DETACH, *argv], None, env)
    return (f"if [ -s {pidfile} ]; then cat {pidfile}; exit 0; fi; "
            f"mkdir -p {shlex.quote(os.path.dirname(log) or '.')} && cd {shlex.quote(cwd)} && "
            f"{{ {inner} > {shlex.quote(log)} 2>&1 < /dev/null & echo $! > {pidfile}.part && "
            f"mv -f {pidfile}.part {pidfile} && cat {pidfile}; }}")


class SshTransport(ShellFileProbes, RecordedProcesses):
    name = "ssh"
    shares_controller_files = False

    def __init__(self, target: Any, *, connect_now: bool = True) -> None:
        self.target_name = getattr(target, "name", "?")
        self.python = getattr(target, "python", "python3")  # the board's: it also detaches what we start
        self.options = SshOptions.model_validate(target.transport_options)
        self.link = SshConnection(self.target_name, self.options)
        if connect_now:
            try:
                self.link.ensure()
            except ConnectionLost as exc:  # at the start, fail fast: the board is off or the address wrong
                raise TargetError(f"target {self.target_name}: {exc}") from None

    @property
    def on_event(self) -> Callable[[str], None] | None:
        return self.link.on_event

    @on_event.setter
    def on_event(self, value: Callable[[str], None] | None) -> None:  # the campaign shows reconnects
        self.link.on_event = value

    @property
    def reconnects(self) -> int:
        return self.link.reconnects

    @property
    def known_hosts(self) -> Path:
        return self.link.known_hosts

    # ------------------------------------------------------------------ commands
    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, stdin: bytes | None = None) -> CommandResult:
        command = command_line(argv, cwd, env)
        status, out, err = self.link.retrying(lambda conn: self.link.exec(conn, command, stdin, timeout))
        if status == 127 and b"not found" in err:
            raise TargetError(f"{argv[0]}: not found on target {self.target_name}")
        return CommandResult(tuple(argv), status, out, err)

    def shell(self, script: str, *, stdin: bytes | Path | None = None, timeout: float | None = None) -> CommandResult:
        """A fixed shell snippet (values already quoted by the caller)."""
        status, out, err = self.link.retrying(lambda conn: self.link.exec(conn, script, stdin, timeout))
        return CommandResult(("sh", "-c", script), status, out, err)

    # ------------------------------------------------------------------ files
    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        q = shlex.quote(remote)
        if local.is_dir():
            data = tar_tree(local)
            script = f"rm -rf {q} && mkdir -p {q} && tar -C {q} -xf -"
            self.shell(script, stdin=data).check()
            return
        parent = shlex.quote(os.path.dirname(remote) or ".")
        # streamed, then renamed: a partial upload never looks complete
        self.shell(f"mkdir -p {parent} && cat > {q}.part && mv -f {q}.part {q}", stdin=local, timeout=3600).check()

    def put_bytes(self, data: bytes, remote: str) -> None:
        q = shlex.quote(remote)
        parent = shlex.quote(os.path.dirname(remote) or ".")
        self.shell(f"mkdir -p {parent} && cat > {q}.part && mv -f {q}.part {q}", stdin=data).check()

    def get(self, remote: str, local: Path) -> None:
        q = shlex.quote(remote)
        done = self.shell(f"if [ -d {q} ]; then echo D; tar -C {q} -cf - .; "
                          f"elif [ -f {q} ]; then echo F; cat {q}; else exit 3; fi")
        if done.returncode == 3:
            raise TargetError(f"{remote}: not found on target {self.target_name}")
        done.check()
        kind, payload = done.stdout[:2], done.stdout[2:]
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        if kind == b"D\n":
            if local.exists():
                shutil.rmtree(local)
            local.mkdir()
            try:
                with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
                    tar.extractall(local, filter="data")
            except tarfile.TarError as exc:
                raise TargetError(f"{remote}: truncated or corrupt transfer from {self.target_name}: {exc}") from None
        elif kind == b"F\n":
            local.write_bytes(payload)
        else:
            raise TargetError(f"{remote}: unexpected answer from target {self.target_name}")

    # ------------------------------------------------------------------ processes
    def start_detached(self, argv: Sequence[str], *, cwd: str, log: str,
                       env: dict[str, str] | None = None) -> int:
        done = self.shell(detached_script(self.python, argv, cwd, log, env)).check()
        try:
            return int(done.stdout.split()[0])
        except (IndexError, ValueError):
            raise TargetError(f"target {self.target_name}: starting {argv[0]} printed no pid") from None

    def alive(self, pid: int) -> bool:
        # a zombie (nobody reaped it yet) is not alive; no /proc (macOS) means kill -0 decides
        script = (f"kill -0 {int(pid)} 2>/dev/null || exit 1; "
                  f"if [ -r /proc/{int(pid)}/stat ] && grep -q ') Z ' /proc/{int(pid)}/stat; then exit 1; fi")
        return self.shell(script).returncode == 0

    def signal(self, pid: int, signum: int = _signal.SIGTERM) -> None:
        self.shell(f"kill -{int(signum)} {int(pid)} 2>/dev/null; true")

    def close(self) -> None:
        self.link.close()


def tar_tree(root: Path, names: Sequence[str] | None = None) -> bytes:
    """An uncompressed tar of ``root`` (or of the relative ``names`` under it), owner-neutral."""
    buffer = io.BytesIO()

    def neutral(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names if names is not None else ["."]:
            tar.add(root / name, arcname=name, filter=neutral)
    return buffer.getvalue()


@register_transport("ssh", options=SshOptions, has_host_key=True)
def _factory(target: Any) -> SshTransport:
    return SshTransport(target)
