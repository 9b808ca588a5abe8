"""Tests of the native target-side tools in runner/native: cachectl and sampler.

Everything runs for real: a real file on a real block device (under /var/tmp, not tmpfs), the real page cache, the
real /sys/block stats, real child processes with named threads. Fake /sys and /proc trees (``--root``) are used only
where a real system cannot be steered (exact field layouts, odd comm names, thread churn, zombies).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from itertools import pairwise
from pathlib import Path

import pytest

from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "runner" / "native"
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1 << 20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc, /sys, mincore")

LATE = r" late_us_p50=(\d+) late_us_p90=(\d+) late_us_p99=(\d+) late_us_max=(\d+)"
STOP_RE = re.compile(r"^# stop t_ns=(\d+) samples=(\d+) overruns=(\d+)" + LATE + "$")
EXIT_RE = re.compile(r"^# exit t_ns=(\d+)" + LATE + "$")
SLICE_RE = re.compile(r" slice_us=(\d+)(?= clock=monotonic$)")


# ----------------------------------------------------------------------------------------------- fixtures


def _block_device_of(path: Path) -> str | None:
    """Whole-disk block device name (e.g. 'vda', 'nvme0n1') holding ``path``, or None (tmpfs, overlay, ...)."""
    st = os.stat(path)
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not link.exists():
        return None
    dev = link.resolve()
    if (dev / "partition").exists():
        dev = dev.parent
    return dev.name if (Path("/sys/block") / dev.name / "stat").exists() else None


@pytest.fixture(scope="module")
def disk_dir():
    d = Path(tempfile.mkdtemp(prefix="harness-native-", dir="/var/tmp"))
    try:
        if _block_device_of(d) is None:
            pytest.skip("/var/tmp is not on a block device")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def big_file(disk_dir: Path) -> Path:
    """A 64 MiB file of random bytes on disk, written back (clean pages: DONTNEED cannot drop dirty ones)."""
    p = disk_dir / "model.bin"
    with open(p, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(MiB))
        f.flush()
        os.fsync(f.fileno())
    return p


def cachectl(native: Path, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(native / "cachectl"), *map(str, args)], capture_output=True, text=True, **kw)


def residency(native: Path, path: Path) -> dict:
    r = cachectl(native, "residency", path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def start_sampler(native: Path, out: Path, *args) -> subprocess.Popen:
    p = subprocess.Popen(
        [str(native / "sampler"), *map(str, args), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def started():
        if p.poll() is not None:
            raise AssertionError(f"sampler exited early rc={p.returncode}: {p.stderr.read()}")
        return out.exists() and out.read_text().endswith("\n")

    wait_for("the sampler's header line", started, timeout=60, interval=0.01)
    return p


def _read_syscalls(pid: int) -> int:
    """How many read/pread calls process ``pid`` has made (``syscr`` of /proc/PID/io)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    raise AssertionError(f"no syscr in /proc/{pid}/io")


def wait_samples(p: subprocess.Popen, n: int, reads_per_sample: int = 1) -> None:
    """Until the sampler ``p`` has taken at least ``n`` more samples (counted from now).

    The sampler buffers its records until it exits, so its output cannot show progress; its read calls can: every
    sample re-reads its files with one ``pread`` each (block mode: one file; threads mode: at most four per thread,
    ``stat``, ``schedstat``, ``syscall`` and ``wchan``), and it reads nothing else while sampling.
    ``reads_per_sample`` is that upper bound, so ``n * reads_per_sample`` more reads mean at least ``n`` more
    samples were started; a stopped sampler finishes the sample it is in, so they are all in its output."""
    if not Path("/proc/self/io").exists():
        p.kill()
        p.wait()
        pytest.skip("no /proc/PID/io (kernel without CONFIG_TASK_IO_ACCOUNTING): the sampler's progress is not visible")
    base = _read_syscalls(p.pid)

    def done():
        if p.poll() is not None:
            raise AssertionError(f"sampler exited early rc={p.returncode}: {p.stderr.read() if p.stderr else ''}")
        return _read_syscalls(p.pid) - base >= n * reads_per_sample

    wait_for(f"{n} more samples from the sampler (pid {p.pid})", done, timeout=60, interval=0.01)


def assert_no_burst(ts: list[int], period_ms: int) -> None:
    """The sampler's schedule: every sample starts at or after its own deadline, each deadline a whole number of
    periods after the previous one and after the previous sample ended (missed deadlines are skipped, never caught
    up). So however busy the machine, any three successive samples span more than one period: a catch-up burst
    would put them closer together."""
    period_ns = period_ms * 1_000_000
    close = [(a, c) for a, c in zip(ts, ts[2:], strict=False) if c - a <= period_ns]
    assert not close, f"three samples within one period (a catch-up burst): {close[:3]}"


def stop(p: subprocess.Popen, sig=signal.SIGTERM) -> int:
    p.send_signal(sig)
    rc = p.wait(timeout=10)
    p.stdout.close()
    p.stderr.close()
    return rc


TREE_LINES = ("# proc ", "# proc_end ")  # threads mode v3: the process tree, between the records


def read_output(out: Path) -> tuple[str, list[str], list[str]]:
    """(header, record lines, '#' trailer lines other than the process tree's)."""
    lines = out.read_text().splitlines()
    assert lines, "no output"
    return lines[0], [ln for ln in lines[1:] if not ln.startswith("#")], \
        [ln for ln in lines[1:] if ln.startswith("#") and not ln.startswith(TREE_LINES)]


def tree_lines(out: Path) -> list[str]:
    """The '# proc' and '# proc_end' lines of a threads capture, in order."""
    return [ln for ln in out.read_text().splitlines() if ln.startswith(TREE_LINES)]


# ----------------------------------------------------------------------------------------------- build


def test_build_is_warning_free_and_clean_removes_binaries(tmp_path: Path):
    out = tmp_path / "bin"
    r = subprocess.run(
        ["make", "-B", "-C", str(NATIVE), f"BIN={out}", "CFLAGS=-O2 -Werror"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning:" not in r.stderr, r.stderr
    for tool in ("sampler", "cachectl"):
        assert os.access(out / tool, os.X_OK)
    r = subprocess.run(["make", "-C", str(NATIVE), f"BIN={out}", "clean"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not (out / "sampler").exists() and not (out / "cachectl").exists()


def _cross_build(tmp_path: Path, zig_target: str, target_os: str) -> Path:
    """Every native tool built with zig for ``zig_target`` with -Werror and no warning; the bin directory."""
    if importlib.util.find_spec("ziglang") is None:
        pytest.skip("ziglang is not installed (pip install -e '.[dev]'): it is the cross-compiler")
    out = tmp_path / "bin"
    r = subprocess.run(
        ["make", "-B", "-C", str(NATIVE), f"BIN={out}", f"CC={sys.executable} -m ziglang cc -target {zig_target}",
         f"TARGET_OS={target_os}", "CFLAGS=-O2 -Werror"],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning:" not in r.stderr, r.stderr
    return out


# Mach-O header: magic 0xfeedfacf (64-bit) stored little-endian, then cputype; filetype 2 = MH_EXECUTE.
MACH_O_CPU = {"aarch64": 0x0100000C, "x86_64": 0x01000007}


@pytest.mark.parametrize("arch", sorted(MACH_O_CPU))
def test_tools_cross_compile_and_link_for_macos(tmp_path: Path, arch: str):
    """The macOS variants (libproc threads, purge-only drop) really compile and link against macOS headers and
    libSystem: zig ships both, so this runs here; no Mac is needed to catch a Linux-only call."""
    out = _cross_build(tmp_path, f"{arch}-macos", "Darwin")
    for tool in ("sampler", "cachectl"):
        data = (out / tool).read_bytes()
        magic, cputype, _sub, filetype = struct.unpack_from("<IIII", data)
        assert magic == 0xFEEDFACF, f"{tool}: not a 64-bit Mach-O file (magic {magic:#x})"
        assert (cputype, filetype) == (MACH_O_CPU[arch], 2), (tool, hex(cputype), filetype)
    # the __APPLE__ branches were the ones compiled
    assert b"_proc_pidinfo" in (out / "sampler").read_bytes()
    assert b"purge" in (out / "cachectl").read_bytes()


# ELF e_machine of the boards' CPUs: 64-bit ARM (Jetson, Android, Raspberry Pi OS 64) and 32-bit ARM (older phones
# and Pi images; a time64 C library there names only the *_time64 syscalls, and 32-bit ARM has mmap2, no mmap)
ELF_MACHINE = {"aarch64-linux-gnu": 183, "arm-linux-musleabihf": 40}


@pytest.mark.slow  # a cold zig cache builds each C library first: about a minute per target here
@pytest.mark.parametrize("target", sorted(ELF_MACHINE))
def test_tools_cross_compile_for_the_boards_linux_cpus(tmp_path: Path, target: str):
    """Every native tool compiles warning-free for the boards' CPUs against their C libraries (zig ships glibc and
    musl headers), so a syscall name one architecture lacks is caught here, not on a board."""
    out = _cross_build(tmp_path, target, "Linux")
    for tool in ("sampler", "cachectl", "workload", "counters"):
        data = (out / tool).read_bytes()
        assert data[:4] == b"\x7fELF", f"{tool}: not an ELF file"
        assert struct.unpack_from("<H", data, 18)[0] == ELF_MACHINE[target], tool


# ----------------------------------------------------------------------------------------------- cachectl


def test_drop_makes_file_cold(native: Path, big_file: Path):
    assert cachectl(native, "prefetch", big_file).returncode == 0
    assert residency(native, big_file)["resident_pct"] >= 99.0  # precondition: really warm first
    r = cachectl(native, "drop", big_file)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    res = residency(native, big_file)
    assert res["resident_pct"] <= 1.0
    assert res["pages_resident"] <= res["pages_total"] // 100


def test_prefetch_makes_file_warm(native: Path, big_file: Path):
    assert cachectl(native, "drop", big_file).returncode == 0
    assert residency(native, big_file)["resident_pct"] <= 1.0  # precondition: really cold first
    r = cachectl(native, "prefetch", big_file)
    assert r.returncode == 0, r.stderr
    res = residency(native, big_file)
    assert res["resident_pct"] >= 99.0
    assert res["pages_resident"] >= res["pages_total"] * 99 // 100


def test_residency_json_shape_and_values(native: Path, big_file: Path, disk_dir: Path):
    r = cachectl(native, "residency", big_file)
    assert r.returncode == 0
    line = r.stdout.rstrip("\n")
    assert "\n" not in line
    assert re.fullmatch(
        r'\{"path": ".*", "size_bytes": \d+, "page_size": \d+, "pages_total": \d+, "pages_resident": \d+, '
        r'"resident_pct": \d+\.\d+\}',
        line,
    ), line
    res = json.loads(line)
    assert res["path"] == str(big_file)
    assert res["size_bytes"] == 64 * MiB
    assert res["page_size"] == PAGE
    assert res["pages_total"] == 64 * MiB // PAGE
    assert 0 <= res["pages_resident"] <= res["pages_total"]
    assert res["resident_pct"] == pytest.approx(100.0 * res["pages_resident"] / res["pages_total"], abs=0.006)

    # a partially cached file: read the first quarter without readahead
    assert cachectl(native, "drop", big_file).returncode == 0
    fd = os.open(big_file, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off in range(0, 16 * MiB, MiB):
            os.pread(fd, MiB, off)
    finally:
        os.close(fd)
    assert 24.0 <= residency(native, big_file)["resident_pct"] <= 30.0

    # names that need JSON escaping, a partial last page, an empty file, several files in one call
    odd = disk_dir / 'we"ird\\ na\tme é.bin'
    odd.write_bytes(b"x" * (PAGE + 1))
    empty = disk_dir / "empty.bin"
    empty.write_bytes(b"")
    r = cachectl(native, "residency", odd, empty)
    assert r.returncode == 0, r.stderr
    a, b = (json.loads(ln) for ln in r.stdout.splitlines())
    assert a["path"] == str(odd)
    assert (a["size_bytes"], a["pages_total"]) == (PAGE + 1, 2)
    assert b == {
        "path": str(empty),
        "size_bytes": 0,
        "page_size": PAGE,
        "pages_total": 0,
        "pages_resident": 0,
        "resident_pct": 0.0,
    }


def test_residency_counts_pages_beyond_the_first_window(native: Path, disk_dir: Path):
    """A 3 GiB sparse file spans several mincore windows; pages read far into it must be counted."""
    p = disk_dir / "sparse.bin"
    size = 3 << 30
    with open(p, "wb") as f:
        f.truncate(size)
    try:
        assert cachectl(native, "drop", p).returncode == 0
        before = residency(native, p)
        assert before["pages_total"] == size // PAGE
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            for off in ((1 << 30) + 5 * MiB, (2 << 30) + 7 * MiB, size - 64 * PAGE):
                os.pread(fd, 16 * PAGE, off)
        finally:
            os.close(fd)
        after = residency(native, p)
        assert after["pages_resident"] - before["pages_resident"] >= 3 * 16
        assert after["pages_resident"] < 4096  # and nothing like the whole file
    finally:
        p.unlink()


def test_cachectl_never_writes(native: Path, big_file: Path, disk_dir: Path):
    # The file is read-only and cachectl runs as an unprivileged user: any open for writing would fail.
    if os.geteuid() != 0:
        pytest.skip("needs root to run cachectl as another user")
    f = disk_dir / "readonly.bin"
    shutil.copyfile(big_file, f)
    with open(f, "rb+") as fh:
        os.fsync(fh.fileno())
    os.chmod(f, 0o444)
    os.chmod(disk_dir, 0o755)
    digest = hashlib.sha256(f.read_bytes()).hexdigest()
    st0 = os.stat(f)
    for cmd in ("drop", "prefetch", "residency", "drop"):
        r = cachectl(native, cmd, f, user=65534, group=65534, extra_groups=[])
        assert r.returncode == 0, (cmd, r.stderr)
    assert residency(native, f)["resident_pct"] <= 1.0  # the unprivileged drop did work
    st1 = os.stat(f)
    assert (st1.st_mtime_ns, st1.st_ctime_ns, st1.st_size, st1.st_mode) == (
        st0.st_mtime_ns,
        st0.st_ctime_ns,
        st0.st_size,
        st0.st_mode,
    )
    assert hashlib.sha256(f.read_bytes()).hexdigest() == digest


def test_cachectl_missing_file_names_it_and_processes_the_rest(native: Path, big_file: Path, tmp_path: Path):
    missing = tmp_path / "no-such-model.gguf"
    for cmd in ("drop", "prefetch", "residency"):
        r = cachectl(native, cmd, missing, big_file)
        assert r.returncode == 1, cmd
        assert r.stderr.strip().splitlines() == [f"cachectl: {missing}: No such file or directory"]
    r = cachectl(native, "residency", missing, big_file)
    assert [json.loads(ln)["path"] for ln in r.stdout.splitlines()] == [str(big_file)]
    r = cachectl(native, "prefetch", tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip() == f"cachectl: {tmp_path}: Is a directory"


@pytest.mark.parametrize("args", [[], ["flush", "x"], ["drop"], ["residency"], ["prefetch"]])
def test_cachectl_usage_errors_exit_2(native: Path, args):
    r = cachectl(native, *args)
    assert r.returncode == 2
    assert "usage" in r.stderr
    assert r.stdout == ""


# ----------------------------------------------------------------------------------------------- sampler: block


def _stop_line(trailer: list[str]) -> tuple[int, int, int]:
    assert len(trailer) == 1, trailer
    m = STOP_RE.match(trailer[0])
    assert m, trailer
    p50, p90, p99, most = (int(m[k]) for k in (4, 5, 6, 7))
    assert p50 <= p90 <= p99 <= most, trailer  # the lateness quantiles, never above the largest
    return int(m[1]), int(m[2]), int(m[3])


def _without_slice(header: str) -> str:
    """The header with its ``slice_us=N`` (the scheduler slice the kernel reported: it varies by kernel) taken
    out, which must be there, just before ``clock=``."""
    assert SLICE_RE.search(header), header
    return SLICE_RE.sub("", header)


def test_block_on_real_device(native: Path, big_file: Path, disk_dir: Path, tmp_path: Path):
    dev = _block_device_of(disk_dir)
    nfields = len(Path(f"/sys/block/{dev}/stat").read_text().split())
    assert cachectl(native, "drop", big_file).returncode == 0
    out = tmp_path / "block.txt"
    t_start = time.monotonic_ns()
    p = start_sampler(native, out, "block", dev, "--period-ms", "10")
    wait_samples(p, 2)  # samples from before the read ...
    with open(big_file, "rb") as f:  # 64 MiB from the disk while sampling
        while f.read(MiB):
            pass
    wait_samples(p, 2)  # ... and from after it
    assert stop(p) == 0
    t_end = time.monotonic_ns()

    header, recs, trailer = read_output(out)
    assert _without_slice(header) == f"# harness-sampler v3 mode=block dev={dev} period_ms=10 clock=monotonic"
    t_stop, samples, overruns = _stop_line(trailer)
    assert samples == len(recs)
    rows = [r.split(" ") for r in recs]
    assert all(len(r) == 1 + nfields for r in rows)
    assert all(all(f.isdigit() for f in r) for r in rows)
    ts = [int(r[0]) for r in rows]
    assert all(b > a for a, b in pairwise(ts))
    assert t_start <= ts[0] and ts[-1] <= t_stop <= t_end  # CLOCK_MONOTONIC, same clock as Python's
    # the stats are re-read every sample: the 64 MiB cold read shows up in the sectors-read counter
    assert int(rows[-1][3]) - int(rows[0][3]) >= 64 * MiB // 512
    # never faster than the period (how close to it a busy machine gets is measured by bench/sampler_timing.py)
    assert_no_burst(ts, 10)
    assert samples >= 4 and overruns <= samples  # at most one overrun is counted per sample


def _write_block_stat(path: Path, values: list[int]):
    # the kernel right-aligns each field in a fixed width; the sampler must collapse that to single spaces
    text = "".join(f"{v:>8} " for v in values).rstrip() + "\n"
    with open(path, "r+" if path.exists() else "w") as f:
        f.write(text)
        f.truncate()


def test_block_fake_tree_old_11_field_layout_follows_updates(native: Path, tmp_path: Path):
    stat = tmp_path / "root" / "sys" / "block" / "mmcblk0"
    stat.mkdir(parents=True)
    stat /= "stat"
    old = [1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11]
    new = [101, 2, 3003, 4, 5, 6, 7, 8, 1, 10, 11]
    _write_block_stat(stat, old)
    out = tmp_path / "out.txt"
    p = start_sampler(native, out, "block", "mmcblk0", "--period-ms", "20", "--root", tmp_path / "root")
    wait_samples(p, 3)
    _write_block_stat(stat, new)
    wait_samples(p, 3)
    assert stop(p, signal.SIGINT) == 0

    header, recs, trailer = read_output(out)
    assert _without_slice(header) == "# harness-sampler v3 mode=block dev=mmcblk0 period_ms=20 clock=monotonic"
    _, samples, _ = _stop_line(trailer)
    assert samples == len(recs) >= 6
    fields = [r.split(" ", 1)[1] for r in recs]
    old_s, new_s = " ".join(map(str, old)), " ".join(map(str, new))
    assert fields[0] == old_s and fields[-1] == new_s
    switch = fields.index(new_s)
    assert set(fields[:switch]) == {old_s} and set(fields[switch:]) == {new_s}


def test_sampler_overrun_skips_missed_deadlines(native: Path, tmp_path: Path):
    d = tmp_path / "sys" / "block" / "sda"
    d.mkdir(parents=True)
    _write_block_stat(d / "stat", list(range(17)))
    out = tmp_path / "out.txt"
    p = start_sampler(native, out, "block", "sda", "--period-ms", "10", "--root", tmp_path)
    wait_samples(p, 3)
    p.send_signal(signal.SIGSTOP)
    time.sleep(0.4)  # the stall itself: 40 deadlines pass while the sampler cannot run
    p.send_signal(signal.SIGCONT)
    wait_samples(p, 3)
    assert stop(p) == 0
    _, recs, trailer = read_output(out)
    _, samples, overruns = _stop_line(trailer)
    assert overruns >= 1
    assert int(STOP_RE.match(trailer[0])[7]) >= 300_000  # the sample after the stall began ~390 ms late
    ts = [int(r.split(" ")[0]) for r in recs]
    gaps = [b - a for a, b in pairwise(ts)]
    assert max(gaps) >= 300e6  # the stall is visible ...
    # ... and was not "caught up" with a burst of back-to-back samples
    assert_no_burst(ts, 10)
    # the ~40 deadlines missed in the stall were skipped, not sampled late
    span_ms = (ts[-1] - ts[0]) / 1e6
    assert samples <= span_ms / 10 - 25


def test_block_missing_device_fails_without_touching_out(native: Path, tmp_path: Path):
    out = tmp_path / "keep.txt"
    out.write_text("previous\n")
    r = subprocess.run(
        [str(native / "sampler"), "block", "nosuchdev", "--root", str(tmp_path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert r.returncode == 1
    assert f"{tmp_path}/sys/block/nosuchdev/stat" in r.stderr
    assert out.read_text() == "previous\n"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["disk", "vda"],
        ["block"],
        ["threads"],
        ["threads", "abc"],
        ["threads", "0"],
        ["block", "vda", "--period-ms", "0"],
        ["block", "vda", "--period-ms", "ten"],
        ["block", "vda", "--period-ms"],
        ["block", "vda", "--bogus", "1"],
        ["block", "vda", "extra"],
        ["block", "../vda"],
        ["threads", "1", "--slice-us", "-1"],
        ["threads", "1", "--slice-us", "100001"],
    ],
)
def test_sampler_usage_errors_exit_2(native: Path, args):
    r = subprocess.run([str(native / "sampler"), *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2, args
    assert "usage" in r.stderr
    assert r.stdout == ""


def _kernel_has_custom_slices() -> bool:
    """Linux 6.12 and later: a fair thread may ask for its own slice (sched_attr.sched_runtime)."""
    major, minor = (int(part) for part in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
    return (major, minor) >= (6, 12)


@pytest.mark.parametrize(("args", "asked"), [([], 100), (["--slice-us", "250"], 250), (["--slice-us", "0"], 0)])
def test_sampler_asks_for_a_short_slice_and_reports_what_it_got(native: Path, tmp_path: Path, args, asked):
    """The sampler asks the scheduler for a short slice (so it gets a CPU when its timer fires, not at the next
    scheduling event) and the header says what the kernel granted; the stop line gives the samples' lateness."""
    d = tmp_path / "sys" / "block" / "sda"
    d.mkdir(parents=True)
    _write_block_stat(d / "stat", list(range(17)))
    out = tmp_path / "out.txt"
    p = start_sampler(native, out, "block", "sda", "--period-ms", "10", "--root", tmp_path, *args)
    wait_samples(p, 5)
    assert stop(p) == 0
    header, recs, trailer = read_output(out)
    granted = int(SLICE_RE.search(header)[1])
    if not _kernel_has_custom_slices():
        assert granted == 0  # the request is accepted and ignored: nothing to report
    elif asked:
        assert granted == asked
    else:
        assert granted not in (0, 100)  # the kernel's own default (1400 us here), left alone
    _, samples, _ = _stop_line(trailer)
    assert samples == len(recs) >= 5


def test_sampler_writes_to_stdout_by_default(native: Path, tmp_path: Path):
    d = tmp_path / "sys" / "block" / "sda"
    d.mkdir(parents=True)
    _write_block_stat(d / "stat", list(range(17)))
    p = subprocess.Popen(
        [str(native / "sampler"), "block", "sda", "--root", str(tmp_path), "--period-ms=10"],
        stdout=subprocess.PIPE,
        text=True,
    )
    header = p.stdout.readline()  # the header is flushed at once
    assert _without_slice(header.rstrip("\n")) == "# harness-sampler v3 mode=block dev=sda period_ms=10 clock=monotonic"
    wait_samples(p, 5)
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=10)
    assert p.returncode == 0
    lines = rest.splitlines()
    _, samples, _ = _stop_line([ln for ln in lines if ln.startswith("#")])
    assert samples == len(lines) - 1 >= 5
    assert lines[0].split(" ", 1)[1] == " ".join(map(str, range(17)))


# ----------------------------------------------------------------------------------------------- sampler: threads

CHILD = textwrap.dedent(
    """
    import ctypes, os, sys, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    def name(n):
        libc.prctl(15, n.encode(), 0, 0, 0)  # PR_SET_NAME: the thread's comm
    stop = threading.Event()
    started = threading.Barrier(5)
    def sleeper():
        name("sleeper"); started.wait()
        while not stop.is_set():
            time.sleep(0.5)
    def spinner():
        name("spin (x) y"); started.wait()
        x = 0
        while not stop.is_set():
            x += 1
    def waiter(n):
        name(n); started.wait(); stop.wait()
    for t in (sleeper, spinner, lambda: waiter("waiter1"), lambda: waiter("waiter2")):
        threading.Thread(target=t, daemon=True).start()
    started.wait()
    print("ready", flush=True)
    sys.stdin.readline()  # lives until the test says so (a line, or its stdin closed), then exits by itself
    os._exit(0)
    """
)


def start_child() -> subprocess.Popen:
    """A process with four named threads (five with the main one) that exits when its stdin is closed."""
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    return p


def _spinner_ticks(child: subprocess.Popen) -> int:
    """utime+stime (clock ticks) of the child's spinning thread, from /proc."""
    for stat in Path(f"/proc/{child.pid}/task").glob("*/stat"):
        text = stat.read_text()
        if "(spin (x) y)" in text:
            fields = text.rpartition(")")[2].split()
            return int(fields[11]) + int(fields[12])
    raise AssertionError("the child has no 'spin (x) y' thread")


def parse_threads(recs: list[str]) -> list[dict]:
    """v3 records; majflt, ut and st None where the sample did not read stat."""
    rows = []
    for r in recs:
        f = r.split("\t")
        assert len(f) == 11, r
        t, pid, tid, state, majflt, ut, st, comm, wchan, cls, nr = f
        number = lambda v: None if v == "" else int(v)  # noqa: E731
        rows.append(
            dict(t=int(t), pid=int(pid), tid=int(tid), state=state, majflt=number(majflt), ut=number(ut),
                 st=number(st), comm=comm, wchan=wchan, cls=cls, nr=number(nr))
        )
    return rows


def test_threads_on_real_process_until_it_exits(native: Path, tmp_path: Path):
    child = start_child()
    out = tmp_path / "threads.txt"
    try:
        t0 = time.monotonic_ns()
        # stat and wchan of every thread every sample (v1's reads), and syscall for those not running
        p = start_sampler(native, out, "threads", child.pid, "--stat-ms", "0", "--wchan")
        # five threads: at most a stat, a schedstat (a gated thread), a syscall and a wchan read each
        wait_samples(p, 2, reads_per_sample=20)
        # the spinner burns CPU while it is sampled: wait until it has used 20 more ticks than any sample so far saw,
        # then for samples that see it
        burned = _spinner_ticks(child) + 20
        wait_for("the spinning thread to use 20 more clock ticks of CPU", lambda: _spinner_ticks(child) >= burned,
                 timeout=120)
        wait_samples(p, 2, reads_per_sample=20)
        # the child exits by itself and is NOT reaped yet (a zombie): the sampler must still notice and stop
        child.stdin.close()
        rc = p.wait(timeout=60)
        p.stdout.close()
        p.stderr.close()
        assert rc == 0
        assert child.poll() is not None
    finally:
        child.kill()
        child.wait()

    header, recs, trailer = read_output(out)
    tck = os.sysconf("SC_CLK_TCK")
    assert (
        _without_slice(header)
        == f"# harness-sampler v3 mode=threads pid={child.pid} period_ms=5 clock_ticks_per_s={tck} stat_every=1 "
        f"wchan=1 arch={_arch()} tree=ppid tree_every=20 gate=schedstat clock=monotonic"
    )
    assert len(trailer) == 1 and EXIT_RE.match(trailer[0]), trailer
    assert out.read_text().splitlines()[-1] == trailer[0]  # the exit line is the last line
    rows = parse_threads(recs)
    assert rows[0]["t"] >= t0
    assert int(EXIT_RE.match(trailer[0])[1]) >= rows[-1]["t"]

    by_name: dict[str, list[dict]] = {}
    for r in rows:
        by_name.setdefault(r["comm"], []).append(r)
    assert {"sleeper", "spin (x) y", "waiter1", "waiter2"} <= set(by_name)
    assert len({r["tid"] for r in rows}) >= 5
    assert all(r["tid"] != child.pid for name in ("sleeper", "waiter1") for r in by_name[name])

    # one sample = one timestamp; tids ascending inside a sample; never faster than the 5 ms period
    samples: dict[int, list[int]] = {}
    for r in rows:
        samples.setdefault(r["t"], []).append(r["tid"])
    assert all(tids == sorted(tids) and len(set(tids)) == len(tids) for tids in samples.values())
    ts = sorted(samples)
    assert len(ts) >= 4
    assert_no_burst(ts, 5)

    sleeper = by_name["sleeper"]
    # asleep in most samples (it wakes every 0.5 s, and on a busy machine may wait a while to run: R)
    assert sum(r["state"] == "S" for r in sleeper) > 0.5 * len(sleeper)
    assert all(r["wchan"] not in ("", "?") for r in sleeper)
    assert any(r["wchan"] != "0" for r in sleeper if r["state"] == "S")  # a real kernel function name
    spin = by_name["spin (x) y"]
    assert any(r["state"] == "R" for r in spin)
    assert (spin[-1]["ut"] + spin[-1]["st"]) - (spin[0]["ut"] + spin[0]["st"]) >= 20  # ticks: it burned CPU
    assert all(r["state"] in "RSDZXtTIPWK" and len(r["state"]) == 1 for r in rows)
    assert all(r["majflt"] >= 0 for r in rows)
    # wait classes: time.sleep is a clock_nanosleep (idle), Event.wait a futex; running threads have none
    assert sum(r["cls"] == "idle" for r in sleeper) > 0.5 * len(sleeper)
    assert all(r["cls"] in ("futex", "") for name in ("waiter1", "waiter2") for r in by_name[name])
    assert all(r["cls"] == "" and r["nr"] is None for r in rows if r["state"] == "R")


def _arch() -> str:
    return {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(os.uname().machine, "other")


def test_threads_default_reads_syscall_every_sample_and_stat_every_100_ms(native: Path, tmp_path: Path):
    child = start_child()
    out = tmp_path / "threads.txt"
    try:
        p = start_sampler(native, out, "threads", child.pid, "--period-ms", "10")
        wait_samples(p, 25, reads_per_sample=10)  # five threads: a syscall read each, and a stat every 10th sample
        assert stop(p) == 0
    finally:
        child.kill()
        child.wait()
    header, recs, _ = read_output(out)
    assert " period_ms=10 " in header and " stat_every=10 wchan=0 " in header
    rows = parse_threads(recs)
    instants = sorted({r["t"] for r in rows})
    full = [t for t in instants if all(r["ut"] is not None for r in rows if r["t"] == t)]
    assert full[0] == instants[0] and 2 <= len(full) <= len(instants) // 5  # the first, then about every 10th
    light = [r for r in rows if r["t"] not in full]
    assert light and all(r["ut"] is None and r["majflt"] is None and r["wchan"] == "" for r in light)
    assert {r["state"] for r in light} <= {"R", "-"}
    assert all(r["comm"] for r in light)  # the name from the thread's last stat read
    sleeper = [r for r in light if r["comm"] == "sleeper"]
    assert sum(r["state"] == "-" and r["cls"] == "idle" for r in sleeper) > 0.5 * len(sleeper)


def test_threads_sigterm_and_reaped_process(native: Path, tmp_path: Path):
    # SIGTERM: the current sample is finished, a stop line counts the samples
    child = start_child()
    try:
        out = tmp_path / "a.txt"
        p = start_sampler(native, out, "threads", child.pid, "--period-ms", "10")
        wait_samples(p, 20, reads_per_sample=10)
        assert stop(p) == 0
        _, recs, trailer = read_output(out)
        _, samples, _ = _stop_line(trailer)
        rows = parse_threads(recs)
        assert samples == len({r["t"] for r in rows}) >= 20
        assert all(len([r for r in rows if r["t"] == t]) == 5 for t in {r["t"] for r in rows})

        # the process is killed and reaped while sampled: exit line, exit 0
        out = tmp_path / "b.txt"
        p = start_sampler(native, out, "threads", child.pid)
        wait_samples(p, 1, reads_per_sample=10)
    finally:
        child.kill()
        child.wait()
    assert p.wait(timeout=60) == 0
    p.stdout.close()
    p.stderr.close()
    _, recs, trailer = read_output(out)
    assert len(recs) > 0 and len(trailer) == 1 and EXIT_RE.match(trailer[0])


def test_threads_missing_process_fails(native: Path, tmp_path: Path):
    (tmp_path / "proc").mkdir()
    r = subprocess.run(
        [str(native / "sampler"), "threads", "4242", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert r.returncode == 1
    assert f"{tmp_path}/proc/4242" in r.stderr
    assert r.stdout == ""


def _fake_stat(tid: int, comm: str, state: str, majflt: int, ut: int, st: int) -> str:
    return (
        f"{tid} ({comm}) {state} 1 4242 4242 0 -1 4194560 120 0 {majflt} 0 {ut} {st} 0 0 20 0 3 0 1000 "
        "12345678 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n"
    )


def _make_task(task_dir: Path, tid: int, stat: str, wchan: str | None):
    tmp = task_dir.parent / f".new-{tid}"
    tmp.mkdir()
    (tmp / "stat").write_text(stat)
    if wchan is not None:
        (tmp / "wchan").write_text(wchan)
    tmp.rename(task_dir / str(tid))  # appears atomically, as a real thread does


def test_threads_fake_tree_parsing_churn_and_zombie_exit(native: Path, tmp_path: Path):
    task = tmp_path / "proc" / "4242" / "task"
    task.mkdir(parents=True)
    _make_task(task, 4242, _fake_stat(4242, "main", "S", 7, 11, 22), "do_epoll_wait")  # no newline
    _make_task(task, 4243, _fake_stat(4243, "we(ir)d )na me", "D", 8, 12, 23), "0\n")
    _make_task(task, 4244, _fake_stat(4244, "no-wchan", "S", 9, 13, 24), None)
    _make_task(task, 4245, _fake_stat(4245, "empty", "S", 0, 0, 0), "")
    _make_task(task, 4246, _fake_stat(4246, "runner", "R", 1, 2, 3), "schedule\n")
    out = tmp_path / "out.txt"
    # no syscall files here (as for a process without ptrace access): stat every sample, class '?'
    p = start_sampler(native, out, "threads", 4242, "--period-ms", "10", "--root", tmp_path, "--wchan")
    wait_samples(p, 2, reads_per_sample=10)  # the first sample, of all five, is complete
    shutil.rmtree(task / "4243")  # a thread exits ...
    _make_task(task, 4250, _fake_stat(4250, "late", "S", 0, 1, 1), "futex_wait_queue\n")  # ... one starts
    # the task directory is rescanned every ~100 ms (10 samples at 10 ms) or after a failed read: 25 samples see it
    wait_samples(p, 25, reads_per_sample=10)
    for tid in (4242, 4244, 4245, 4246, 4250):  # every thread a zombie: the process is gone
        with open(task / str(tid) / "stat", "r+") as f:  # in place, same length: the sampler keeps its fd open
            text = re.sub(r"\) [SRD] ", ") Z ", f.read())
            f.seek(0)
            f.write(text)
    assert p.wait(timeout=60) == 0
    p.stdout.close()
    p.stderr.close()

    header, recs, trailer = read_output(out)
    assert _without_slice(header) == (
        f"# harness-sampler v3 mode=threads pid=4242 period_ms=10 clock_ticks_per_s={os.sysconf('SC_CLK_TCK')} "
        f"stat_every=10 wchan=1 arch={_arch()} tree=ppid tree_every=10 gate=schedstat "
        "clock=monotonic"
    )
    assert len(trailer) == 1 and EXIT_RE.match(trailer[0])
    rows = parse_threads(recs)
    first = [r for r in rows if r["t"] == rows[0]["t"]]
    assert [(r["tid"], r["state"], r["majflt"], r["ut"], r["st"], r["comm"], r["wchan"], r["cls"]) for r in first] == [
        (4242, "S", 7, 11, 22, "main", "do_epoll_wait", "?"),
        (4243, "D", 8, 12, 23, "we(ir)d )na me", "0", "?"),
        (4244, "S", 9, 13, 24, "no-wchan", "?", "?"),
        (4245, "S", 0, 0, 0, "empty", "0", "?"),
        (4246, "R", 1, 2, 3, "runner", "0", ""),
    ]
    assert all(r["ut"] is not None for r in rows)  # without syscall files every sample reads stat
    ts = sorted({r["t"] for r in rows})
    tids_at = {t: [r["tid"] for r in rows if r["t"] == t] for t in ts}
    # the task directory is rescanned (after a failed read, and about every 100 ms): the churn shows up
    assert tids_at[ts[-1]] == [4242, 4244, 4245, 4246, 4250]
    gone = [t for t in ts if 4243 not in tids_at[t]]
    assert gone and all(4243 not in tids_at[t] for t in ts if t >= gone[0])
    assert [r["wchan"] for r in rows if r["tid"] == 4250][0] == "futex_wait_queue"
    assert {r["state"] for r in rows if r["t"] == ts[-1]} == {"Z"}


def _rewrite_in_place(path: Path, text: str) -> None:
    """Same length, same inode: the sampler keeps its fd open and re-reads at offset 0."""
    with open(path, "r+") as f:
        assert len(f.read()) == len(text)
        f.seek(0)
        f.write(text)


@pytest.mark.slow
@pytest.mark.parametrize("gate", [True, False])
def test_threads_parked_thread_is_reread_only_after_its_schedstat_moves(native: Path, tmp_path: Path, gate: bool):
    """A thread parked in one wait (the same syscall line twice in a row) is read through its schedstat first: while
    sum_exec_runtime and pcount stay put it has not been on a CPU, so its last syscall reading still holds and is
    written again; once they move, syscall is read again. With --no-gate syscall is read every sample."""
    task = tmp_path / "proc" / "4242" / "task"
    task.mkdir(parents=True)
    _make_task(task, 4242, _fake_stat(4242, "parked", "S", 1, 2, 3), None)
    first, second = "7 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x4011\n", "9 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x4011\n"
    (task / "4242" / "syscall").write_text(first)
    (task / "4242" / "schedstat").write_text("1000 20 3\n")
    out = tmp_path / "out.txt"
    p = start_sampler(native, out, "threads", 4242, "--period-ms", "10", "--stat-ms", "100000", "--root", tmp_path,
                      *([] if gate else ["--no-gate"]))
    wait_samples(p, 5, reads_per_sample=2)  # by now parked: two identical lines, then a schedstat baseline
    changed_syscall = time.monotonic_ns()
    _rewrite_in_place(task / "4242" / "syscall", second)  # a new wait, but schedstat says it never ran: impossible
    wait_samples(p, 5, reads_per_sample=2)  # on a real thread, so it shows only where syscall is re-read anyway
    changed_schedstat = time.monotonic_ns()
    _rewrite_in_place(task / "4242" / "schedstat", "1500 20 4\n")  # it ran
    wait_samples(p, 5, reads_per_sample=2)
    assert stop(p) == 0

    header, recs, _ = read_output(out)
    assert _without_slice(header).endswith(f" gate={'schedstat' if gate else 'none'} clock=monotonic")
    rows = parse_threads(recs)
    assert all(r["tid"] == 4242 for r in rows)
    before = [r["nr"] for r in rows if r["t"] < changed_syscall]
    between = [r["nr"] for r in rows if changed_syscall < r["t"] < changed_schedstat]
    after = [r["nr"] for r in rows if r["t"] > changed_schedstat]
    assert len(before) >= 5 and set(before) == {7}
    assert len(between) >= 4 and set(between) == ({7} if gate else {9})
    assert len(after) >= 4 and set(after) == {9}
    assert all(r["state"] == "-" for r in rows[1:])  # stat was read at the first sample only
