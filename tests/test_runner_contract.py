"""The runner contract (runner/contract.py): a spec of another major version is refused with one line, before
anything runs, and the refusal is a run record the controller can pull; a spec of the same major version runs, and
every run.json carries the runner's contract version."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.contract import CONTRACT_VERSION, incompatible
from tests.helpers import REPO

MAJOR = int(CONTRACT_VERSION.split(".")[0])


def test_the_same_major_version_is_compatible_whatever_the_minor() -> None:
    assert incompatible(CONTRACT_VERSION, "runner") is None
    assert incompatible(f"{MAJOR}.99", "runner") is None
    assert incompatible(f"{MAJOR}.0", "controller") is None


def test_another_major_version_is_one_line_naming_both() -> None:
    assert incompatible(f"{MAJOR + 1}.0", "runner") == (
        f"run spec contract {MAJOR + 1}.0 is not readable by this runner (contract {MAJOR}.x): "
        "deploy the matching runner")
    assert incompatible(f"{MAJOR + 1}.3", "controller") == (
        f"run record contract {MAJOR + 1}.3 is not readable by this controller (contract {MAJOR}.x): "
        "deploy the matching runner")


@pytest.mark.parametrize("version", [None, "0.0", "x.1", ""])
def test_a_missing_or_unreadable_version_is_refused(version: str | None) -> None:
    message = incompatible(version, "runner")
    assert message is not None and "\n" not in message
    assert message.startswith(f"run spec contract {'0.0' if version is None else version} is not readable")


def _run(tmp_path: Path, contract: str | None) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The runner, started as the controller starts it, on a spec that reads a small file once."""
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 65536)
    run_dir = tmp_path / "runs" / "set" / "r1"
    run_dir.mkdir(parents=True)
    spec: dict[str, Any] = {
        "run_id": "r1", "set_id": f"contract-{uuid.uuid4().hex[:8]}", "cache": "none", "cache_files": [],
        "block_device": "auto", "collectors": [], "emulate": None, "run_dir": str(run_dir),
        "step": {"kind": "read", "file": str(data), "pattern": "seq", "bs_bytes": 16384, "seed": 0, "timeout_s": 60}}
    if contract is not None:
        spec["contract"] = contract
    (run_dir / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "runner", "run", str(run_dir / "spec.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    return done, run_dir


@pytest.mark.parametrize("contract", [f"{MAJOR + 1}.0", None])
def test_the_runner_refuses_a_spec_of_another_major_version(tmp_path: Path, contract: str | None) -> None:
    done, run_dir = _run(tmp_path, contract)
    expected = incompatible(contract, "runner")
    assert expected is not None
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [expected]  # one line, no traceback
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["error"], record["contract"]) == ("failed", expected, CONTRACT_VERSION)
    assert record["run_id"] == "r1" and record["spec"]["step"]["kind"] == "read"
    assert (run_dir / "DONE").read_text() == "failed\n"
    assert "run.json" in (run_dir / "SHA256SUMS").read_text()  # the controller verifies the pull against it
    assert not (run_dir / "read.json").exists() and not (run_dir / "read.stdout").exists()  # nothing ran


def test_a_spec_of_the_same_major_version_runs(tmp_path: Path) -> None:
    done, run_dir = _run(tmp_path, f"{MAJOR}.7")  # a newer minor: keys this runner does not know are ignored
    record = json.loads((run_dir / "run.json").read_text())
    assert done.returncode == 0, done.stderr + json.dumps(record.get("error"))
    assert (record["status"], record["error"], record["contract"]) == ("ok", None, CONTRACT_VERSION)
    assert (run_dir / "DONE").read_text() == "ok\n"
    assert json.loads((run_dir / "read.json").read_text())["read_bytes"] == 65536
