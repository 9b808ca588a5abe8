"""cgroup v2 emulation on a fake tree: this machine's v2 hierarchy has no controllers, so the kernel
interface (file names and formats from Documentation/admin-guide/cgroup-v2.rst) is checked on files
laid out as the kernel lays them out. The v1 path runs on real cgroups in test_emulate.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.emulation import cgroup
from runner.emulation.check import check

MiB = 1 << 20


@pytest.fixture()
def v2_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setenv("HARNESS_CGROUP_ROOT", str(tmp_path))
    return tmp_path


def test_v2_controllers_win_over_v1(v2_root: Path) -> None:
    (v2_root / "memory").mkdir()
    (v2_root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup.detect() == {"memory": ("v2", str(v2_root)), "io": ("v2", str(v2_root))}
    # v2 cgroups go at the root, not under the runner's own (possibly process-holding) cgroup
    assert cgroup.parent_dir("v2", str(v2_root), "memory") == str(v2_root / "harness")


def test_hybrid_without_v2_controllers_uses_v1(tmp_path: Path) -> None:
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("\n")  # as on this machine
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup.detect(str(tmp_path)) == {"memory": ("v1", str(tmp_path / "memory"))}


def test_check_names_the_missing_io_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    monkeypatch.setenv("HARNESS_CGROUP_ROOT", str(tmp_path))
    missing = check({"memory_bytes": 64 * MiB, "read_bytes_per_s": MiB}, "vda")
    assert [m for m in missing if "cgroup" in m] == [
        f"no cgroup blkio/io controller (no v2 io.max, no v1 blkio.throttle.read_bps_device) under {tmp_path}"]


def _fake_cgroup(root: Path) -> Path:
    """A cgroup directory with the control files the kernel would create in it (empty: a plain file
    is not truncated by a write as a kernel control file is replaced)."""
    path = root / "harness" / "run1"
    path.mkdir(parents=True)
    for name in ("memory.max", "memory.swap.max", "io.max", "cgroup.procs"):
        (path / name).write_text("")
    return path


def test_v2_limits_are_written_in_the_kernel_format(v2_root: Path) -> None:
    path = _fake_cgroup(v2_root)
    assert cgroup.set_memory(str(path), 512 * MiB) == {"memory_bytes": 512 * MiB, "memory_swap_bytes": 0}
    assert (path / "memory.max").read_text() == str(512 * MiB)
    assert (path / "memory.swap.max").read_text() == "0"  # the budget cannot spill into swap
    effective = cgroup.set_io(str(path), "259:0", 600 * MiB, 5000)
    assert (path / "io.max").read_text() == f"259:0 rbps={600 * MiB} riops=5000"
    assert effective == {"read_bytes_per_s": 600 * MiB, "read_iops": 5000}


def test_v2_make_passes_the_controllers_down(v2_root: Path) -> None:
    (v2_root / "harness").mkdir()
    (v2_root / "harness" / "cgroup.subtree_control").write_text("")
    cgroup.make("v2", str(v2_root), str(v2_root / "harness" / "run1"), ["memory"])
    assert (v2_root / "cgroup.subtree_control").read_text() == "+memory"
    assert (v2_root / "harness" / "cgroup.subtree_control").read_text() == "+memory"
    assert (v2_root / "harness" / "run1").is_dir()


def test_v2_stats_are_read_from_the_kernel_files(v2_root: Path) -> None:
    path = _fake_cgroup(v2_root)
    (path / "memory.peak").write_text(f"{500 * MiB}\n")
    (path / "memory.events").write_text("low 0\nhigh 0\nmax 1234\noom 2\noom_kill 1\noom_group_kill 0\n")
    (path / "memory.stat").write_text(f"anon {10 * MiB}\nfile {480 * MiB}\nkernel 1000\npgfault 99\n"
                                      "pgmajfault 4321\n")
    (path / "io.stat").write_text("259:0 rbytes=1048576000 wbytes=0 rios=16000 wios=0 dbytes=0 dios=0\n"
                                  "8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n")
    assert cgroup.memory_stats(str(path)) == {
        "memory_peak_bytes": 500 * MiB, "memory_failcnt": 1234, "oom_kill": 1, "pgmajfault": 4321,
        "cache_bytes": 480 * MiB}
    assert cgroup.io_stats(str(path), "259:0") == {"io_read_bytes": 1048576000, "io_read_ios": 16000}


def test_check_needs_a_block_device_for_io_and_read_ahead(v2_root: Path) -> None:
    missing = check({"read_ahead_kb": 128}, None)
    assert "no block device known for the run's files (set block_device in the target)" in missing
    # a memory budget alone needs no device
    assert not [m for m in check({"memory_bytes": 64 * MiB}, None) if "block device" in m]
