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
from runner import reap
from runner.probes.blockdev import block_device_of
from tests.helpers import Controller, machine_lock, needs_cgroups, private_base, run_campaign, run_cli, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.fault]


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


def _finishes_on_resume(results: Path, set_id: str) -> None:
    """--resume, once the set is writable, ends it complete with every run, sealed (its SHA256SUMS verify)."""
    done = run_campaign("--resume", set_id, "--results", str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(results.iterdir())
    rs = load_result_set(final, verify=True)
    assert rs.complete and rs.verified and len(rs.table("runs")) == 2
    assert (final / "report.md").exists()


def test_an_immutable_set_directory_at_table_time_is_one_line_and_resume_finishes(tmp_path: Path,
                                                                                  immutable_ok: None) -> None:
    """chattr +i on the set's own directory just before the tables: the set could neither be renamed nor take its
    manifest, a PermissionError traceback (exit 1). Now one line, the set stays .incomplete and says so."""
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "tables", release=release)
    set_dir = _set_dir(ctl)
    _chattr("+i", set_dir)
    try:
        release.touch()
        code, _, err = ctl.stop(None)
        manifest = json.loads((set_dir / "manifest.json").read_text())
    finally:
        _chattr("-i", set_dir)
    lines = [line for line in err.splitlines() if not line.startswith("paused at")]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {set_dir}: every run is done but the set cannot be renamed") \
        and "(Operation not permitted)" in lines[0] and f"harness run --resume {manifest['set_id']}" in lines[0]
    assert set_dir.exists() and manifest["status"] == "incomplete" and not (set_dir / "SHA256SUMS").exists()
    _finishes_on_resume(ctl.results, manifest["set_id"])


def test_a_read_only_results_file_system_at_table_time_is_one_line_and_resume_finishes(
        tmp_path: Path, small_disk: Path) -> None:
    """The results file system (a real tmpfs) remounted read-only just before the tables: an OSError traceback
    from pyarrow (exit 1). Now one line naming the file and EROFS; nothing half-written is left."""
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "tables", release=release, results=small_disk / "results")
    set_dir = _set_dir(ctl)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True, text=True,
                             check=False)
    try:
        release.touch()
        code, _, err = ctl.stop(None)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=False)
    assert remount.returncode == 0, remount.stderr
    lines = [line for line in err.splitlines() if not line.startswith("paused at")]
    assert code == 2 and len(lines) == 1, err
    manifest = json.loads((set_dir / "manifest.json").read_text())
    assert lines[0].startswith(f"error: {set_dir}/tables/") and "(Read-only file system)" in lines[0] \
        and f"harness run --resume {manifest['set_id']}" in lines[0], lines[0]
    assert manifest["status"] == "incomplete" and not list(set_dir.rglob("*.tmp"))
    _finishes_on_resume(ctl.results, manifest["set_id"])


FIO_FAILS = """\
name: fiofail
files:
  data: {create: 8M}
rounds: 1
validity: off
collect: [blockstat]
steps:
  # direct I/O of 1000-byte blocks: EINVAL on the first read, fio exits 1 (tests/data/fio/SOURCE.md)
  - fio: {file: data, jobs: [{name: odd, bs: 1000, direct: true}], runtime_s: 0.5}
"""


def test_a_campaign_whose_every_fio_run_failed_ends_with_its_report(tmp_path: Path) -> None:
    """It ended in KeyError: 'read_clat_p99_ns' (a traceback, no summary). Now the set, its report and one line per
    failed run; exit 1 as for any campaign with failed runs; report.md says every fio run failed and why."""
    exp = tmp_path / "fiofail.yaml"
    exp.write_text(FIO_FAILS)
    done = run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch",
                        str(private_base() / f"scratch-{tmp_path.name}"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    (path,) = list((tmp_path / "r").iterdir())
    section = (path / "report.md").read_text().split("## fio ladder\n\n", 1)[1].split("\n", 1)[0]
    assert section.startswith("**every fio run failed** (1 run(s)), so there is no ladder: `0001-fio-cold-r1` "
                              "failed: fio exited with 1: ") and "Invalid argument" in section, section


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


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


def test_a_killed_fio_leader_leaves_no_job_process_for_the_next_run(tmp_path: Path) -> None:
    """SIGKILL fio's leader while its job process reads: the job process had called setsid, so stopping fio's
    process group missed it; it read on past the run's record and the next run's runner stopped it
    (strays_stopped). Now the run stops it itself before it is recorded, and its record says so."""
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "run,between-runs", runtime_s=3, release=release)
    set_id = json.loads((_set_dir(ctl) / "manifest.json").read_text())["set_id"]
    release.touch()

    def leader_and_job() -> tuple[int, int] | None:
        fio = {pid for pid, comm, _ in reap.strays(set_id) if comm == "fio"}
        jobs = [pid for pid in fio if os.getsid(pid) == pid and _ppid(pid) in fio]  # its own session
        return (_ppid(jobs[0]), jobs[0]) if jobs else None

    leader, job = wait_for("fio's job process in the first run", leader_and_job, 60)
    os.kill(leader, signal.SIGKILL)
    wait_for("the first run to be recorded", lambda: any("paused at between-runs" in x for x in ctl.lines), 120)
    assert reap.strays(set_id) == []  # recorded: nothing of the run reads on
    release.touch()
    ctl.release_at("run", 2, release)
    ctl.release_at("between-runs", 2, release)
    code, out, err = ctl.stop(None)
    assert code == 1, out + err
    (final,) = list(ctl.results.iterdir())
    runs = json.loads((final / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["failed", "ok"]
    first, second = (json.loads((final / "raw" / "local" / r["run_id"] / "run.json").read_text()) for r in runs)
    assert first["error"].startswith("fio exited with -9")
    stopped = first["left_running_stopped"]["stopped"]
    assert [(p["pid"], p["comm"], p["process"]) for p in stopped] == [(job, "fio", "fio")]
    assert "strays_stopped" not in second


def _fill(disk: Path) -> Path:
    """Write zeros to ``disk`` until it is full, to the last byte; returns the file (unlink it to free the disk)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:  # unbuffered: nothing left to flush (and fail) at close
        try:
            while out.write(b"\0" * (1 << 20)):
                pass
        except OSError:
            pass
    return filler


@pytest.fixture
def small_disk(tmp_path: Path):  # noqa: ANN201
    """A real 48 MiB tmpfs (results, scratch or a target's workdir); unmounted at the end."""
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
    filler = _fill(small_disk)  # while the first run runs
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


def test_a_full_scratch_disk_is_one_line_leaves_no_partial_file_and_resumes(tmp_path: Path,
                                                                            small_disk: Path) -> None:
    """The data file does not fit: refused before a byte is written (it used to be a traceback cut mid-token
    and a 16 MB .partial), the set incomplete, and --resume makes it once space is free."""
    scratch = small_disk / "scratch"
    (small_disk / "keep").write_bytes(b"\0" * (44 << 20))  # 4 MB left; the experiment's file is 8 MB
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "preflight", release=release, scratch=scratch, extra_yaml="cache: warm\n",
                     collect="threads")  # a tmpfs has neither a cold cache nor a block device
    release.touch()
    code, out, err = ctl.stop(None)
    lines = [line for line in err.splitlines() if not line.startswith("paused at")]
    assert code == 2 and len(lines) == 1, out + err
    assert "scratch disk full: 4 MB free on" in lines[0] and "data.bin needs 8 MB" in lines[0], lines[0]
    assert "harness run --resume" in lines[0]
    assert not list(small_disk.rglob("*.partial")) and not list(small_disk.rglob("data.bin*"))
    (path,) = list(ctl.results.iterdir())
    assert json.loads((path / "manifest.json").read_text())["status"] == "incomplete"
    (small_disk / "keep").unlink()
    done = run_campaign("--resume", path.name.removesuffix(".incomplete"), "--results", str(ctl.results))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(ctl.results.iterdir())
    assert load_result_set(final).complete and len(load_result_set(final).table("runs")) == 2
    assert not list(scratch.glob("data.bin*"))  # created in the set's scratch, removed at its end


def test_a_file_made_before_the_one_that_does_not_fit_is_removed(tmp_path: Path, small_disk: Path) -> None:
    scratch = small_disk / "scratch"
    (small_disk / "keep").write_bytes(b"\0" * (42 << 20))  # 6 MB left: the first file fits, the second not
    exp = tmp_path / "two.yaml"
    exp.write_text("name: two\nfiles:\n  first: {create: 2M}\n  second: {create: 8M}\ncache: warm\n"
                   "steps:\n  - read: {file: first}\n")
    done = run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch", str(scratch))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert "second.bin needs 8 MB" in done.stderr
    assert sorted(p.name for p in small_disk.rglob("*")) == ["keep", "scratch"]  # first.bin and its mark: gone


def test_a_full_workdir_on_the_target_names_the_cause_and_resumes(tmp_path: Path, small_disk: Path) -> None:
    """The board's workdir fills while a runner runs: the runner cannot even write its log, so the controller
    asks the board and says why; the campaign stops there (every later run would die the same way) with one
    line and a set --resume finishes."""
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "local.yaml").write_text(f"platform: linux\ntransport: local\nworkdir: {small_disk / 'work'}\n")
    release = tmp_path / "go"
    ctl = Controller(tmp_path, "run", runtime_s=3, release=release, targets_dir=targets)
    filler = _fill(small_disk)
    release.touch()
    code, out, err = ctl.stop(None)
    lines = [line for line in err.splitlines() if not line.startswith("paused at")]
    assert code == 2 and len(lines) == 1, out + err
    assert "target local: workdir disk full: 0 MB free on" in lines[0] and "harness run --resume" in lines[0]
    (path,) = list(ctl.results.iterdir())
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["status"] == "incomplete"
    first, second = manifest["runs"]
    assert first["status"] == "failed" and "runner died without DONE (workdir disk full" in first["error"]
    assert second["status"] == "pending"  # never started on a full disk
    assert reap.strays(manifest["set_id"]) == []
    # before the set exists, a full workdir is refused the same way
    again = run_cli("run", str(ctl.exp), "--targets-dir", str(targets), "--results", str(tmp_path / "other"),
                    "--scratch", str(ctl.scratch))
    assert again.returncode == 2 and "workdir disk full" in again.stderr and not (tmp_path / "other").exists()
    filler.unlink()
    done = run_cli("run", "--resume", manifest["set_id"], "--results", str(ctl.results), "--targets-dir",
                   str(targets))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(ctl.results.iterdir())
    assert [r["status"] for r in json.loads((final / "manifest.json").read_text())["runs"]] == ["ok", "ok"]


@needs_cgroups()
def test_a_lost_run_state_does_not_make_the_emulated_read_ahead_the_original(tmp_path: Path) -> None:
    """The runner is killed while read_ahead_kb is emulated, then /run/harness is emptied (what a reboot does):
    the original kept in the workdir is restored, the message says what was found and what restored, and the
    next run records the real original."""
    state = private_base() / f"run-state-{tmp_path.name}"  # this test's own /run/harness
    device = block_device_of(str(private_base()))
    if device is None:
        pytest.skip(f"no block device under {private_base()}")
    knob = Path(f"/sys/block/{device}/queue/read_ahead_kb")
    release = tmp_path / "go"
    with machine_lock():  # no other suite's emulated run may change read_ahead_kb meanwhile
        # read under the lock: before it, another suite's run may hold the device at its emulated value
        original = int(knob.read_text())
        emulated = 4096 if original != 4096 else 2048
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
