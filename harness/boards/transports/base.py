"""The transport protocol, its registry, and what every transport shares.

A transport is how the controller reaches a target. The protocol is deliberately small so that ``local``,
``ssh`` (Fabric) and ``adb`` fit it: run a command given as an argument list, copy files both ways, start
a detached process, read a file, ask whether a pid is alive, signal it. Everything precisely timed happens
on the target, in the runner, so a transport never needs to be fast or stay connected.

Where behaviour differs by transport, the transport answers (``shares_controller_files``, ``file_size``);
nothing outside ``harness/boards/transports`` asks which kind it is.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.errors import TargetError
from harness.registry import Registry


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    def check(self) -> CommandResult:
        if self.returncode != 0:
            tail = self.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise TargetError(f"{' '.join(self.argv[:3])} failed with exit {self.returncode}: {tail[0]}")
        return self


class Transport(Protocol):
    name: str
    shares_controller_files: bool  # as its TransportKind declares

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult: ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a file or a directory tree to ``remote`` (created or replaced)."""

    def get(self, remote: str, local: Path) -> None:
        """Copy a file or a directory tree from ``remote`` to ``local``."""

    def read_file(self, remote: str) -> bytes: ...

    def exists(self, remote: str) -> bool: ...

    def file_size(self, remote: str) -> int | None:
        """The size of the file at ``remote`` (symlinks followed; 0 for a device or a directory), or None when
        nothing is there."""

    def start_detached(self, argv: Sequence[str], *, cwd: str, log: str,
                       env: dict[str, str] | None = None) -> int:
        """Start a process that outlives this connection; return its pid on the target."""

    def alive(self, pid: int) -> bool: ...

    def signal(self, pid: int, signum: int) -> None: ...

    # a pid recorded earlier (a manifest's runner): checked on the target against its identity (transports/procid.py)
    def identify(self, pid: int) -> str | None: ...

    def check(self, pid: int, identity: str | None, marker: str | None) -> str: ...

    def signal_recorded(self, pid: int, signum: int, identity: str | None, marker: str | None) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TransportKind:
    """What the rest of the harness may know about a kind of transport, declared where it registers."""

    name: str
    open: Callable[[Any], Transport]
    # the target sees this machine's files: engines built and models made here run there as they are
    shares_controller_files: bool = False
    # boards are shared by controllers; this machine runs its own campaigns side by side without one
    lease_by_default: bool = True
    # the pydantic model of the transport's options in targets/NAME.yaml (checked when targets are resolved)
    options: type | None = None
    # whether `harness targets trust` applies (a host key to verify and record)
    has_host_key: bool = False


TRANSPORTS: Registry[TransportKind] = Registry("transport")


def register_transport(name: str, **declared: Any) -> Callable[[Callable[[Any], Transport]],
                                                                 Callable[[Any], Transport]]:
    """``@register_transport("ssh", options=SshOptions, has_host_key=True)`` on the function opening one."""
    def decorate(factory: Callable[[Any], Transport]) -> Callable[[Any], Transport]:
        TRANSPORTS.add(name, TransportKind(name, factory, **declared), factory)
        return factory
    return decorate


def put_bytes(transport: Transport, data: bytes, remote: str) -> None:
    """Write ``data`` to ``remote`` through the protocol's one file copy (specs, manifests, markers)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data"
        path.write_bytes(data)
        transport.put(path, remote)


def shell_file_size(transport: Transport, remote: str) -> int | None:
    """A file's size through a POSIX shell: ``wc -c`` reads it the same on GNU, BSD (macOS), busybox and
    toybox (Android), where ``stat -c`` (GNU) and ``stat -f`` (BSD) disagree. Regular files answer from
    their metadata, not by reading them."""
    # a device or a directory exists but has no file size (what `stat` says of a block device): 0
    done = transport.run(["sh", "-c", 'if [ -f "$1" ]; then exec wc -c < "$1"; elif [ -e "$1" ]; then echo 0; '
                          'else exit 1; fi', "sh", remote])
    text = done.stdout.decode(errors="replace").strip()
    return int(text) if done.returncode == 0 and text.isdigit() else None


class ShellFileProbes:
    """``exists``, ``file_size`` and ``read_file`` through the target's POSIX shell, for transports that only
    run commands there (ssh, adb): ``test``, ``wc`` and ``cat`` behave the same on GNU, BSD and toybox."""

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult:
        raise NotImplementedError

    def exists(self, remote: str) -> bool:
        return self.run(["test", "-e", remote]).returncode == 0

    def file_size(self, remote: str) -> int | None:
        return shell_file_size(self, remote)  # type: ignore[arg-type]  # a mixin: the class it joins is the Transport

    def read_file(self, remote: str) -> bytes:
        done = self.run(["cat", remote])
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip()  # adb shell merges stderr
            raise TargetError(f"{remote}: {said[-200:] or 'cannot read'}")
        return done.stdout
