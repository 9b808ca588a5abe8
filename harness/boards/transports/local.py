"""The ``local`` transport: this machine, through subprocess and file copies.

It follows the same path as a remote one (spec written, runner detached, DONE polled, run directory
copied back) so local results are produced by exactly the code that serves boards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.boards.transports.base import CommandResult, register_transport
from harness.boards.transports.procid import GONE, SAME, RecordedProcesses
from harness.errors import TargetError


class LocalTransport(RecordedProcesses):
    name = "local"
    shares_controller_files = True

    def __init__(self, target: Any = None) -> None:
        # Detached children of this process: kept so that alive() can reap them (no zombies).
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult:
        full_env = {**os.environ, **(env or {})}
        try:
            done = subprocess.run(list(argv), cwd=cwd, env=full_env, capture_output=True, timeout=timeout,
                                  check=False)
        except FileNotFoundError:
            raise TargetError(f"{argv[0]}: not found on this machine") from None
        except subprocess.TimeoutExpired:
            raise TargetError(f"{' '.join(argv[:3])}: no answer within {timeout:.0f} s") from None
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)

    def put(self, local: Path, remote: str) -> None:
        _copy(Path(local), Path(remote))

    def get(self, remote: str, local: Path) -> None:
        if not Path(remote).exists():
            raise TargetError(f"{remote}: not found on the target")
        _copy(Path(remote), Path(local))

    def read_file(self, remote: str) -> bytes:
        try:
            return Path(remote).read_bytes()
        except OSError as exc:
            raise TargetError(f"{remote}: {exc.strerror}") from None

    def exists(self, remote: str) -> bool:
        return Path(remote).exists()

    def file_size(self, remote: str) -> int | None:
        path = Path(remote)
        return path.stat().st_size if path.is_file() else 0 if path.exists() else None

    def start_detached(self, argv: Sequence[str], *, cwd: str, log: str,
                       env: dict[str, str] | None = None) -> int:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(list(argv), cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._children[proc.pid] = proc
        return proc.pid

    def alive(self, pid: int) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def signal(self, pid: int, signum: int = signal.SIGTERM) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def check(self, pid: int, identity: str | None, marker: str | None) -> str:
        child = self._children.get(pid)
        if child is not None:  # started by this controller: its pid names no other process until it is reaped
            return SAME if child.poll() is None else GONE
        return super().check(pid, identity, marker)

    def close(self) -> None:
        # The campaign stops or waits for every runner it started before closing; nothing to do here.
        self._children.clear()


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)


@register_transport("local", shares_controller_files=True, lease_by_default=False)
def _factory(target: Any) -> LocalTransport:
    return LocalTransport(target)
