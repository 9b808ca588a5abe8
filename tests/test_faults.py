"""Faults at the end of a campaign and on resume: one line, a manifest that says the truth, a set --resume finishes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from runner import probe, reap
from tests.helpers import Controller, machine_lock, needs_cgroups, private_base, run_campaign, wait_for

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


def _set_dir(ctl: Controller) -> Path:
    return wait_for("the result set", lambda: next(ctl.results.glob("*.incomplete"), None), 60)


@pytest.mark.parametrize("victim", ["runner", "fio"])
def test_a_killed_run_leaves_nothing_reading_while_the_next_run_is_measured(tmp_path: Path, victim: str) -> None:
    """SIGKILL the runner (or fio) mid-run: fio's workers used to go on reading for seconds, re-parented to init,
    while the next run was measured; a sampler lived for ever. Now nothing of the run is left when it is
    recorded, and the next run begins on an idle device."""
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "run,between-runs", runtime_s=3, release=release)
    set_dir = _set_dir(ctl)
    manifest = json.loads((set_dir / "manifest.json").read_text())
    set_id, runner_pid = manifest["set_id"], manifest["runs"][0]["runner_pid"]
    release.touch()
    fio = wait_for("fio reading in the first run",
                   lambda: [pid for pid, comm, _ in reap.strays(set_id) if comm == "fio"], 60)
    os.kill(runner_pid if victim == "runner" else min(fio), signal.SIGKILL)
    wait_for("the first run to be recorded", lambda: any("paused at between-runs" in x for x in ctl.lines), 120)
    # the first run is recorded: nothing it started may still be running
    assert reap.strays(set_id) == []
    release.touch()
    ctl.release_at("run", 2, release)
    ctl.release_at("between-runs", 2, release)
    code, out, err = ctl.stop(None)
    assert code == 1, out + err  # a failed run: exit 1, the set complete
    (final,) = list(ctl.results.iterdir())
    runs = json.loads((final / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["failed", "ok"]
    if victim == "runner":
        assert "runner died without DONE" in runs[0]["error"]
        assert "process(es) the run left running" in " ".join(out.split())
    second = json.loads(next((final / "raw" / "local").glob(f"{runs[1]['run_id']}/run.json")).read_text())
    assert second["entry_state"]["device_inflight"] in (0, None)
    assert "strays_stopped" not in second  # the controller had stopped them already


@pytest.fixture
def small_disk(tmp_path: Path):  # noqa: ANN201
    """A real 48 MiB tmpfs for the results; unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_results_disk_too_small_is_refused_before_the_set_exists(tmp_path: Path, small_disk: Path) -> None:
    (small_disk / "filler").write_bytes(b"\0" * (40 << 20))
    exp = tmp_path / "e.yaml"
    exp.write_text("name: full\nfiles:\n  data: {create: 1M}\nrounds: 2\nsteps:\n  - read: {file: data}\n")
    done = run_campaign(str(exp), "--results", str(small_disk / "results"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "results disk full" in done.stderr and "this campaign writes" in done.stderr
    assert not (small_disk / "results").exists() or not any((small_disk / "results").iterdir())


def test_a_results_disk_that_fills_mid_campaign_is_one_line_and_resumable(tmp_path: Path, small_disk: Path) -> None:
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "run", release=release, results=small_disk / "results")
    filler = small_disk / "filler"
    with open(filler, "wb") as out:  # fill the disk to the last byte while the first run runs
        try:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        except OSError:
            pass
    release.touch()
    code, out, err = ctl.stop(None)
    lines = [line for line in err.splitlines() if not line.startswith("paused at")]
    assert code == 2 and len(lines) == 1 and "results disk full" in lines[0], out + err
    (path,) = list((small_disk / "results").iterdir())
    json.loads((path / "manifest.json").read_text())  # the last manifest written is whole
    assert not list(path.rglob("*.tmp"))  # no half-written manifest or table left
    filler.unlink()
    done = run_campaign("--resume", path.name.removesuffix(".incomplete"), "--results", str(small_disk / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list((small_disk / "results").iterdir())
    assert load_result_set(final).complete and len(load_result_set(final).table("runs")) == 2


@needs_cgroups()
def test_a_lost_run_state_does_not_make_the_emulated_read_ahead_the_original(tmp_path: Path) -> None:
    """The runner is killed while read_ahead_kb is emulated, then /run/harness is emptied (what a reboot does):
    the original kept in the workdir is restored, the message says what was found and what restored, and the
    next run records the real original."""
    state = private_base() / f"run-state-{tmp_path.name}"  # this test's own /run/harness
    device = probe.block_device_of(str(private_base()))
    if device is None:
        pytest.skip(f"no block device under {private_base()}")
    knob = Path(f"/sys/block/{device}/queue/read_ahead_kb")
    original = int(knob.read_text())
    emulated = 4096 if original != 4096 else 2048
    release = tmp_path / "go"
    with machine_lock():  # no other suite's emulated run may change read_ahead_kb meanwhile
        ctl = Controller(tmp_path, "run", runtime_s=30, release=release,
                         extra_yaml=f"emulate: {{read_ahead_kb: {emulated}}}\n",
                         env={"HARNESS_EMULATE_STATE": str(state)})
        try:
            runner_pid = json.loads((_set_dir(ctl) / "manifest.json").read_text())["runs"][0]["runner_pid"]
            release.touch()
            wait_for("the runner to set the emulated read_ahead_kb", lambda: int(knob.read_text()) == emulated, 120)
            wait_for("fio to be running", lambda: reap.strays(
                json.loads((_set_dir(ctl) / "manifest.json").read_text())["set_id"]), 60)
            os.kill(runner_pid, signal.SIGKILL)
            shutil.rmtree(state)  # the "reboot": /run/harness is gone, with read_ahead_kb's original in it
            ctl.release_at("run", 2, release)
            code, out, err = ctl.stop(None)
            after = int(knob.read_text())
        finally:
            if int(knob.read_text()) != original:
                knob.write_text(str(original))
    assert after == original
    said = " ".join(out.split())
    assert f"read_ahead_kb was {emulated}" in said and f"restored to the original {original} kept in the workdir" \
        in said, out + err
    assert code == 1, out + err
    (final,) = list(ctl.results.iterdir())
    runs = json.loads((final / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["failed", "ok"]
    second = json.loads((final / "raw" / "local" / runs[1]["run_id"] / "run.json").read_text())
    assert second["emulation"]["read_ahead_kb_original"] == original
