"""Issue 21's file faults, each a reproduction: a symlink planted in scratch, fio's own engines and options that
execute, write or delete, a path fio cuts, and a path that is no regular file. Each is one line naming file and
line (or the planted link), exit 2, and the victim (a file outside scratch, in tmp_path) untouched."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from runner import util
from tests.helpers import cli_in_process, one_line_exit_2, private_base, run_campaign

pytestmark = pytest.mark.fault

PRECIOUS = b"precious, not the harness's"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(PRECIOUS)
    return path


def fio_experiment(tmp_path: Path, files: str, job: str = "randread-64k-qd1", top: str = "") -> Path:
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: ex\n{top}files:\n  {files}\nsteps:\n  - fio:\n      file: data\n      runtime_s: 1\n"
                   f"      jobs: [{job}]\n")
    return exp


# ------------------------------------------------------------------------------------------ 1: symlinks in scratch
@pytest.mark.slow
@pytest.mark.parametrize("planted", ["data.bin.partial", "data.bin.harness-owner"])
def test_a_symlink_planted_in_scratch_is_refused_and_its_target_untouched(tmp_path: Path, planted: str) -> None:
    """The reproduction: with the link, a 1 s fio run on an 8 MiB created file overwrote the victim (.partial)
    or truncated it to the set id (.harness-owner), exit 0."""
    scratch = private_base() / f"scratch-{tmp_path.name}"
    scratch.mkdir(parents=True)
    target = victim(tmp_path)
    (scratch / planted).symlink_to(target)
    exp = fio_experiment(tmp_path, "data: {create: 8M}")
    line = one_line_exit_2(run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch", str(scratch)))
    assert f"{scratch / planted} is a symbolic link" in line
    assert target.read_bytes() == PRECIOUS
    assert (scratch / planted).is_symlink() and not (scratch / "data.bin").exists()


@pytest.mark.parametrize("planted", ["a.bin", "a.bin.partial", "a.bin.harness-owner"])
def test_the_runner_writes_through_no_symlink_in_scratch(tmp_path: Path, planted: str) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    target = victim(tmp_path)
    (scratch / planted).symlink_to(target)
    for owner in ("set-1", None):  # without an owner (bench, tests) the same: nothing written through a link
        with pytest.raises(util.NotOurs, match="is a symbolic link"):
            util.make_data_file(str(scratch / "a.bin"), 1 << 20, owner=owner)
    assert target.read_bytes() == PRECIOUS
    assert sorted(p.name for p in scratch.iterdir()) == [planted]


def test_a_planted_partial_file_is_not_ours_but_our_own_leftover_is_replaced(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "a.bin.partial").write_bytes(PRECIOUS)
    with pytest.raises(util.NotOurs, match="a.bin.partial exists and the harness did not create it"):
        util.make_data_file(str(scratch / "a.bin"), 4096, owner="set-1")
    assert (scratch / "a.bin.partial").read_bytes() == PRECIOUS
    (scratch / "a.bin.harness-owner").write_text("set-1\n")  # what a killed mkfile of this campaign leaves
    assert util.make_data_file(str(scratch / "a.bin"), 4096, owner="set-1")["size_bytes"] == 4096
    assert sorted(p.name for p in scratch.iterdir()) == ["a.bin", "a.bin.harness-owner"]
    assert (scratch / "a.bin").stat().st_size == 4096
    assert util.make_data_file(str(scratch / "a.bin"), 8192, owner="set-1")["size_bytes"] == 8192  # a resume


def test_a_hard_link_as_the_mark_is_replaced_not_truncated(tmp_path: Path) -> None:
    """A mark that is another name of some file (a hard link) is unlinked and made anew, never written."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    target = victim(tmp_path)
    os.link(target, scratch / "a.bin.harness-owner")
    util.make_data_file(str(scratch / "a.bin"), 4096, owner="set-1")
    assert target.read_bytes() == PRECIOUS
    assert (scratch / "a.bin.harness-owner").read_text() == "set-1\n"


def test_a_symlink_inside_scratch_is_not_deleted_through(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    util.make_data_file(str(scratch / "a.bin"), 4096, owner="set-1")
    (scratch / "link.bin").symlink_to(scratch / "a.bin")
    (scratch / "link.bin.harness-owner").write_text("set-1\n")
    with pytest.raises(util.NotOurs, match="link.bin was not created by this campaign"):
        util.remove_data_file(str(scratch / "link.bin"), "set-1", str(scratch))
    assert (scratch / "a.bin").stat().st_size == 4096 and (scratch / "link.bin").is_symlink()


# ------------------------------------------------------------------------------------------ 2: fio's own engines
@pytest.mark.parametrize(("job", "field"), [
    ("{name: c, ioengine: exec, options: {program: /usr/bin/touch, arguments: PWNED}}", "jobs[0].ioengine"),
    ("{name: c, ioengine: filedelete}", "jobs[0].ioengine"),
    ("{name: c, ioengine: filecreate}", "jobs[0].ioengine"),
    ("{name: c, ioengine: filestat}", "jobs[0].ioengine"),
    ("{name: c, ioengine: ftruncate}", "jobs[0].ioengine"),
    ("{name: c, ioengine: sg}", "jobs[0].ioengine"),
    ("{name: c, options: {ioengine: exec}}", "jobs[0].options.ioengine"),
    ("{name: c, options: {unlink: 1}}", "jobs[0].options.unlink"),
    ("{name: c, options: {unlink_each_loop: 1}}", "jobs[0].options.unlink_each_loop"),
    ("{name: c, options: {create_on_open: 1}}", "jobs[0].options.create_on_open"),
    ("{name: c, options: {mem: 'mmap:PWNED'}}", "jobs[0].options.mem"),
    ("{name: c, options: {write_bw_log: PWNED}}", "jobs[0].options.write_bw_log"),
    ("{name: c, options: {trim_percentage: 50}}", "jobs[0].options.trim_percentage"),
    ("{name: c, options: {verify: md5}}", "jobs[0].options.verify"),
    ("{name: c, options: {ioscheduler: none}}", "jobs[0].options.ioscheduler"),
])
def test_fio_engines_and_options_beyond_a_read_are_refused(tmp_path: Path, job: str, field: str) -> None:
    exp = fio_experiment(tmp_path, f"data: {{path: {victim(tmp_path)}}}",
                         job.replace("PWNED", str(tmp_path / "pwned")))
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert line.startswith(f"error: {exp}:8: steps[0].fio.{field}: fio job 'c': ")
    assert line.endswith("refused unless the experiment says fio: {allow_exec: true}")


def test_the_step_wide_ioengine_is_checked_too(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: ex\nfiles:\n  data: {{path: {victim(tmp_path)}}}\nsteps:\n  - fio:\n      file: data\n"
                   "      ioengine: exec\n")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert line.startswith(f"error: {exp}:7: steps[0].fio.ioengine: ioengine exec is not one a read measurement")


@pytest.mark.parametrize("job", [
    "{name: c, ioengine: io_uring, options: {fixedbufs: 1, registerfiles: 1, hipri: 0}}",
    "{name: c, ioengine: psync, options: {percentile_list: '50:99:99.9', offset: 1m, size: 4m}}",
    "{name: c, ioengine: libaio, options: {iodepth_batch: 4, userspace_reap: 1, mem: shm}}",
    "{name: c, ioengine: mmap, direct: false, options: {random_distribution: 'zipf:1.1', norandommap: 1}}",
])
def test_what_a_read_measurement_needs_is_allowed(tmp_path: Path, job: str) -> None:
    exp = fio_experiment(tmp_path, f"data: {{path: {victim(tmp_path)}}}", job)
    done = cli_in_process("plan", str(exp))
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_fio_exec_and_filedelete_neither_run_nor_delete(tmp_path: Path) -> None:
    """The reproduction: ioengine exec ran touch (as root on a board) and filedelete deleted the named file; both
    exit 0 with allow_exec: false in the manifest."""
    target, pwned = victim(tmp_path), tmp_path / "pwned"
    for job in ("{name: c, ioengine: filedelete}",
                f"{{name: c, ioengine: exec, options: {{program: /usr/bin/touch, arguments: {pwned}}}}}"):
        exp = fio_experiment(tmp_path, f"data: {{path: {target}}}", job)
        line = one_line_exit_2(run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch",
                                            str(private_base() / f"scratch-{tmp_path.name}")))
        assert "steps[0].fio.jobs[0].ioengine" in line
    assert target.read_bytes() == PRECIOUS and not pwned.exists()
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------ 6: paths fio cuts
@pytest.mark.parametrize("name", ["data#1.bin", "data;1.bin", "data$ncpus.bin", "data.bin "])
def test_a_path_fio_would_cut_is_refused_at_plan_time(tmp_path: Path, name: str) -> None:
    """fio ends a job-file value at '#' or ';' and reads another file (the campaign then ended in
    KeyError: 'read_clat_p99_ns' with no report)."""
    path = tmp_path / name
    path.write_bytes(PRECIOUS)
    exp = fio_experiment(tmp_path, f"data: {{path: '{path}'}}")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert line.startswith(f"error: {exp}:3: files.data.path: fio cannot be given the path ")


@pytest.mark.slow
def test_a_scratch_path_fio_would_cut_is_refused_at_preflight(tmp_path: Path) -> None:
    scratch = private_base() / f"scratch#{tmp_path.name}"
    exp = fio_experiment(tmp_path, "data: {create: 1M}")
    line = one_line_exit_2(run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch", str(scratch)))
    assert line.startswith(f"error: {exp}:3: files.data.create: target local: fio cannot be given the path "
                           f"'{scratch}/data.bin'") and line.endswith("choose another --scratch)")
    assert not scratch.exists() and not (tmp_path / "r").exists()


def test_the_runner_refuses_a_path_fio_would_cut() -> None:
    from runner.steps.base import StepFailed
    from runner.steps.fio import fio_jobfile

    with pytest.raises(StepFailed, match="fio cannot be given the path"):
        fio_jobfile({"file": "/data/a;b.bin", "jobs": [{"name": "j", "bs": "64k"}]})


# ------------------------------------------------------------------------------------------ 7: no regular file
def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the socket file stays


def _block_device(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a block device node needs root")
    os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 0))  # loop0's numbers; never opened


@pytest.mark.slow
@pytest.mark.parametrize(("make", "kind"), [(_fifo, "FIFO"), (_socket, "socket"), (Path.mkdir, "directory"),
                                            (_block_device, "block device")])
def test_a_path_that_is_no_regular_file_is_refused_at_preflight(tmp_path: Path, make, kind: str) -> None:  # noqa: ANN001
    """The reproduction: a FIFO hung the controller without a word; a block device ended in a PermissionError
    traceback (as a user), a directory or socket in another traceback."""
    path = tmp_path / "thing"
    make(path)
    exp = fio_experiment(tmp_path, f"data: {{path: {path}}}")
    done = run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch",
                        str(private_base() / f"scratch-{tmp_path.name}"), timeout=120)
    line = one_line_exit_2(done)
    assert line == (f"error: {exp}:3: files.data.path: {path} is a {kind} on target local, not a regular file: "
                    "the steps read regular files (give the file, or a file on that device)")
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------ the directories written in
def _not_root() -> bool:
    return os.geteuid() != 0


@pytest.mark.skipif(_not_root(), reason="giving a directory to another user needs root")
def test_a_directory_another_user_owns_or_everyone_may_write_is_unsafe(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    assert util.unsafe_directory(str(mine)) is None
    assert util.unsafe_directory(str(mine / "not-yet" / "scratch")) is None  # judged by the nearest parent
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    assert util.unsafe_directory(str(theirs / "scratch")) == f"{theirs} is owned by uid 12345, another user " \
                                                             "(not root, not the runner's)"
    (tmp_path / "link").symlink_to(mine)
    os.chown(tmp_path / "link", 12345, 12345, follow_symlinks=False)
    assert util.unsafe_directory(str(tmp_path / "link")) == f"{tmp_path / 'link'} is a symlink owned by uid " \
                                                            "12345, who can point it anywhere"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: fine for scratch (names opened O_NOFOLLOW|O_EXCL), not for a workdir
    assert util.unsafe_directory(str(shared), shared=True) is None
    assert util.unsafe_directory(str(shared)) == f"{shared} is writable by every user"
    assert util.unsafe_directory(str(shared / "scratch")) is None  # a sticky parent cannot lose our entries
    shared.chmod(0o777)
    assert util.unsafe_directory(str(shared / "scratch")) == f"{shared} is writable by every user"


@pytest.mark.slow
@pytest.mark.skipif(_not_root(), reason="giving a directory to another user needs root")
def test_a_scratch_another_user_owns_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    scratch = private_base() / f"scratch-{tmp_path.name}"
    scratch.mkdir(parents=True)
    os.chown(scratch, 12345, 12345)
    exp = fio_experiment(tmp_path, "data: {create: 1M}")
    line = one_line_exit_2(run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch", str(scratch)))
    assert line == (f"error: target local: scratch {scratch}: {scratch} is owned by uid 12345, another user (not "
                    "root, not the runner's), so another user could plant symlinks there; refused (give a directory "
                    "of your own)")
    assert not any(scratch.iterdir()) and not (tmp_path / "r").exists()
