"""Faults at the end of a campaign and on resume: one line, a manifest that says the truth, a set --resume finishes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from tests.helpers import Controller, run_campaign, wait_for

pytestmark = pytest.mark.slow


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@pytest.fixture
def immutable_ok(tmp_path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) is not installed")
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{tmp_path} does not support the immutable flag (needs root on ext4/xfs/btrfs)")
    _chattr("-i", probe)


def test_an_immutable_results_directory_leaves_a_set_resume_finishes(tmp_path: Path, immutable_ok: None) -> None:
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "tables", release=release)  # every run is done; tables and rename come next
    _chattr("+i", ctl.results)
    try:
        release.touch()
        code, _, err = ctl.stop(None)
        manifest_path = next(ctl.results.iterdir()) / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
    finally:
        _chattr("-i", ctl.results)
    assert code == 2, err
    lines = [line for line in err.splitlines() if not line.startswith("paused at")]
    assert len(lines) == 1 and "cannot be renamed" in lines[0] and "harness run --resume" in lines[0], err
    # the set says what it is: every run ok, but not complete
    assert manifest["status"] == "incomplete" and [r["status"] for r in manifest["runs"]] == ["ok", "ok"]
    assert manifest_path.parent.name.endswith(".incomplete")

    done = run_campaign("--resume", manifest["set_id"], "--results", str(ctl.results))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(ctl.results.iterdir())
    rs = load_result_set(final)
    assert rs.complete and len(rs.table("runs")) == 2
    assert (final / "report.md").exists() and list((final / "figures").glob("*.png"))


def test_resume_uses_the_original_scratch_and_makes_no_data_file_when_nothing_is_left(tmp_path: Path,
                                                                                        immutable_ok: None) -> None:
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "tables", release=release)
    _chattr("+i", ctl.results)
    try:
        release.touch()
        ctl.stop(None)
        set_id = json.loads((next(ctl.results.iterdir()) / "manifest.json").read_text())["set_id"]
    finally:
        _chattr("-i", ctl.results)
    assert json.loads((next(ctl.results.iterdir()) / "manifest.json").read_text())["scratch"] == str(ctl.scratch)
    ctl.scratch.mkdir(parents=True, exist_ok=True)
    before = sorted(p.name for p in ctl.scratch.iterdir())
    # no --scratch given: the set's own is used, and with no run left nothing is created there
    done = run_campaign("--resume", set_id, "--results", str(ctl.results))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "creating data" not in done.stdout
    assert sorted(p.name for p in ctl.scratch.iterdir()) == before
    wait_for("the resumed set to be complete", lambda: load_result_set(next(ctl.results.iterdir())).complete, 10)
