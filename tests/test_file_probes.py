"""File size and existence on a target work on GNU and BSD userlands alike: the remote probes avoid `stat`
(GNU `stat -c` and BSD `stat -f` disagree; macOS has only the latter). Checked here by running them with a
macOS-style `stat` stand-in first on PATH, which refuses GNU options the way BSD stat does."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.boards.transports.base import CommandResult, shell_file_size
from harness.boards.transports.local import LocalTransport

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
