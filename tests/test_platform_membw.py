"""The CUDA memory-bandwidth probe: compiled with nvcc where it exists (skipped otherwise); without a
usable GPU it must fail with one clear line, with one it must print the JSON line the parser reads."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.parsers import ParseError, parse
from tests.helpers import REPO

NVCC = shutil.which("nvcc") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/nvcc")), None)


@pytest.fixture(scope="module")
def membw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if NVCC is None:
        pytest.skip("nvcc not installed: membw is built on the board (nvcc -O3 -arch=native)")
    out = tmp_path_factory.mktemp("membw") / "membw"
    done = subprocess.run([NVCC, "-O3", "-o", str(out), str(REPO / "runner" / "native" / "membw.cu")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # builds membw with nvcc first
def test_membw_runs_or_says_why_not(membw: Path) -> None:
    done = subprocess.run([str(membw), "--bytes", str(64 << 20), "--reps", "3"], capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode == 2:  # no GPU here (the usual CI machine)
        assert done.stderr.startswith("membw: no usable CUDA device (") and done.stdout == ""
        return
    assert done.returncode == 0, done.stderr
    [row] = parse("membw", done.stdout.encode())
    assert row["buffer_bytes"] == 64 << 20 and row["reps"] == 3
    assert row["read_gbps"] > 1 and row["write_gbps"] > 1 and row["copy_gbps"] > 1


def test_membw_rejects_bad_arguments(membw: Path) -> None:
    done = subprocess.run([str(membw), "--bytes"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "usage: membw" in done.stderr


def test_membw_parser_rejects_an_error_message() -> None:
    with pytest.raises(ParseError, match="membw"):
        parse("membw", b"membw: no usable CUDA device (no CUDA-capable device is detected)\n")
