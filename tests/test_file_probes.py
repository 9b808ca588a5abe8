"""What the controller runs in a board's shell works on GNU and BSD userlands alike. File size and existence
avoid `stat` (GNU `stat -c` and BSD `stat -f` disagree; macOS has only the latter): checked with a macOS-style
`stat` stand-in first on PATH, which refuses GNU options the way BSD stat does. Starting a detached runner does
not need util-linux `setsid` (macOS has none): checked with a PATH that has only POSIX tools."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.boards.transports.base import CommandResult, shell_file_size
from harness.boards.transports.local import LocalTransport
from harness.boards.transports.ssh import detached_script
from tests.helpers import wait_for

BSD_STAT = """#!/bin/sh
# what macOS /usr/bin/stat says to GNU options
for arg in "$@"; do
  case "$arg" in
    -c|--*) echo "stat: illegal option -- ${arg#-}" >&2
            echo "usage: stat [-FLnq] [-f format | -l | -r | -s | -x] [-t timefmt] [file ...]" >&2; exit 1;;
  esac
done
exec /usr/bin/stat "$@"
"""


class BsdUserland(LocalTransport):
    """This machine, with a BSD `stat` ahead of the GNU one on PATH."""

    def __init__(self, bin_dir: Path) -> None:
        super().__init__()
        self.path = f"{bin_dir}:{os.environ['PATH']}"

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> CommandResult:
        return super().run(argv, cwd=cwd, env={**(env or {}), "PATH": self.path}, timeout=timeout)


@pytest.fixture
def bsd(tmp_path: Path) -> BsdUserland:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "stat").write_text(BSD_STAT)
    (bin_dir / "stat").chmod(0o755)
    transport = BsdUserland(bin_dir)
    assert transport.run(["stat", "-L", "-c", "%s", str(bin_dir / "stat")]).returncode == 1  # the stand-in bites
    return transport


def test_the_size_of_a_file_reads_the_same_on_a_bsd_userland(bsd: BsdUserland, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"\1" * 123_457)
    (tmp_path / "link.gguf").symlink_to(model)
    assert shell_file_size(bsd, str(model)) == 123_457
    assert shell_file_size(bsd, str(tmp_path / "link.gguf")) == 123_457  # symlinks followed, as `stat -L`
    assert shell_file_size(bsd, str(tmp_path / "with space's name")) is None


def test_a_missing_file_has_no_size_and_a_device_or_directory_size_0(bsd: BsdUserland, tmp_path: Path) -> None:
    assert shell_file_size(bsd, str(tmp_path / "absent.gguf")) is None
    assert shell_file_size(bsd, str(tmp_path)) == 0
    assert shell_file_size(bsd, "/dev/null") == 0  # never read through: a block device would be read whole
    assert bsd.exists(str(tmp_path)) and not bsd.exists(str(tmp_path / "absent.gguf"))


def test_the_local_transport_answers_the_same(tmp_path: Path) -> None:
    model = tmp_path / "m.bin"
    model.write_bytes(b"\0" * 4096)
    local = LocalTransport()
    assert local.file_size(str(model)) == shell_file_size(local, str(model)) == 4096
    assert local.file_size(str(tmp_path)) == 0 == shell_file_size(local, "/dev/null")
    assert local.file_size(str(tmp_path / "x")) is None


def test_a_detached_start_needs_no_setsid_and_gets_a_session_of_its_own(tmp_path: Path) -> None:
    posix = tmp_path / "posix-bin"  # what every userland has; no setsid (util-linux)
    posix.mkdir()
    for tool in ("sh", "mkdir", "cat", "mv", "nohup"):
        (posix / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    log = tmp_path / "run" / "runner.log"
    program = [sys.executable, "-c", "import os, time; print('leader', os.getsid(0) == os.getpid(), flush=True); "
               "time.sleep(60)"]
    script = detached_script(sys.executable, program, str(tmp_path), str(log))
    done = subprocess.run(["sh", "-c", script], env={"PATH": str(posix)}, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    try:
        wait_for("the detached program to say whether it leads its session", lambda: "leader" in log.read_text()
                 if log.exists() else False, timeout=30)
        assert "leader True" in log.read_text()
        assert os.getsid(pid) == pid  # the printed pid is the program itself (exec kept it)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [sys.executable.encode(), b"-c"]
        again = subprocess.run(["sh", "-c", script], env={"PATH": str(posix)}, capture_output=True, text=True,
                               timeout=30, check=False)
        assert int(again.stdout.split()[0]) == pid  # a repeated start returns the first one
    finally:
        os.kill(pid, signal.SIGKILL)
