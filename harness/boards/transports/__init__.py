"""Transports: how the controller reaches a target.

The protocol is deliberately small so that ``local``, ``ssh`` (Fabric) and ``adb`` fit it: run a
command given as an argument list, copy files both ways, start a detached process, read a file,
ask whether a pid is alive, signal it. Everything precisely timed happens on the target, in the
runner, so a transport never needs to be fast or stay connected.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.errors import TargetError


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

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult: ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a file or a directory tree to ``remote`` (created or replaced)."""

    def get(self, remote: str, local: Path) -> None:
        """Copy a file or a directory tree from ``remote`` to ``local``."""

    def read_file(self, remote: str) -> bytes: ...

    def exists(self, remote: str) -> bool: ...

    def start_detached(self, argv: Sequence[str], *, cwd: str, log: str,
                       env: dict[str, str] | None = None) -> int:
        """Start a process that outlives this connection; return its pid on the target."""

    def alive(self, pid: int) -> bool: ...

    def signal(self, pid: int, signum: int) -> None: ...

    def close(self) -> None: ...


TransportFactory = Callable[[Any], Transport]
TRANSPORTS: dict[str, TransportFactory] = {}


def register_transport(name: str) -> Callable[[TransportFactory], TransportFactory]:
    def decorate(factory: TransportFactory) -> TransportFactory:
        TRANSPORTS[name] = factory
        return factory
    return decorate


def put_bytes(transport: Transport, data: bytes, remote: str) -> None:
    """Write ``data`` to ``remote`` through the protocol's one file copy (specs, manifests, markers)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data"
        path.write_bytes(data)
        transport.put(path, remote)


def connect(target: Any) -> Transport:
    kind = target.transport_kind
    if kind not in TRANSPORTS:
        raise TargetError(f"target {target.name}: transport {kind!r} is not available (known: {', '.join(TRANSPORTS)})")
    return TRANSPORTS[kind](target)


from harness.boards.transports import adb as _adb  # noqa: E402,F401  (registers)
from harness.boards.transports import local as _local  # noqa: E402,F401  (registers)
