"""The step's whole process tree under the per-process collectors (issue 21): the thread sampler and the counters
reader follow the step's process and every descendant, found as it appears, and record the tree. Real processes
only: fio forking its job process, a shell wrapper whose child forks the workload, a child started late, a child
that exits early."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.waits import sampled_shares, wait_shares
from harness.parsers import parse
from harness.parsers.sampler import process_records
from tests.helpers import collect_step, subshell_workload

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")
SPECS = [{"kind": "counters", "period_ms": 50}, {"kind": "threads", "period_ms": 5}]
FIO_READS = ["--rw=randread", "--bs=128k", "--direct=1", "--ioengine=psync", "--time_based", "--size=64M"]


def collect(native: Path, run_dir: Path, argv: list[str], timeout: float = 60) -> tuple[int, int, int]:
    """``argv`` as a step under the counters reader and the thread sampler (``collect_step``)."""
    return collect_step(native, run_dir, SPECS, argv, timeout)


def trees(run_dir: Path) -> tuple[dict[int, dict], dict[int, dict]]:
    """{pid: process row} as the sampler and as the counters recorded the tree."""
    return tuple({row["pid"]: row for row in process_records((run_dir / name).read_bytes())}  # type: ignore[return-value]
                 for name in ("threads.txt", "counters.txt"))


def fio_files() -> list[Path]:
    """fio's binary, the libraries it loads (ldd) and the files its start and its output read (an strace of its
    openat calls: the loader's cache, glibc's locale aliases, the zone file of the output's timestamp)."""
    fio = Path(shutil.which("fio") or "fio").resolve()
    listed = subprocess.run(["ldd", str(fio)], capture_output=True, text=True, check=True).stdout
    libraries = [Path(word) for line in listed.splitlines() for word in line.split() if word.startswith("/")]
    return [fio, *libraries, *(Path(name) for name in ("/etc/ld.so.cache", "/usr/share/locale/locale.alias",
                                                         "/etc/localtime") if Path(name).exists())]


def page_in(files: list[Path]) -> None:
    """Every page of ``files`` in the page cache (read through it, whole)."""
    for file in files:
        with file.open("rb") as data:
            while data.read(1 << 20):
                pass


@pytest.fixture(scope="module")
def fio_file() -> Iterator[Path]:
    """64 MiB of random bytes on a real disk (/var/tmp), for direct (uncached) random reads, with fio's code in the
    page cache: a cold fio makes its parent wait for the disk while it pages its code in (1.6 % of the run after a
    drop_caches), which is not the wait the test is about. Running fio once is not enough: a later run faults on
    pages of its 60 libraries and of /etc/localtime the first did not touch (2.3 % in a full suite, whose other
    tests drop the page cache), so every file it maps or reads is read whole first."""
    where = Path(tempfile.mkdtemp(prefix="harness-tree-", dir="/var/tmp"))
    path = where / "data.bin"
    with path.open("wb") as out:
        for _ in range(64):
            out.write(os.urandom(1 << 20))
    try:
        page_in(fio_files())
        subprocess.run(["fio", "--name=warm", f"--filename={path}", *FIO_READS, "--runtime=1",
                        "--output-format=json", f"--output={where / 'warm.json'}"], check=True, timeout=60)
        yield path
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_fio_job_process_is_sampled_counted_and_classed_read_io(native: Path, fio_file: Path,
                                                                 tmp_path: Path) -> None:
    """fio forks its job (no ``thread`` option): the parent only waits (nanosleep, pselect6: idle), the job process
    does the reads. Before the tree, every sample and every counter was the parent's: 100 % idle."""
    pid, status, _ = collect(native, tmp_path, [
        "fio", "--name=cold", f"--filename={fio_file}", *FIO_READS, "--runtime=2", "--output-format=json",
        "--output=/dev/null"])  # a new output file's inode and directory block are reads the parent would wait for
    assert status == 0
    sampled, counted = trees(tmp_path)
    jobs = [p for p, row in sampled.items() if row["ppid"] == pid]
    assert jobs, sampled  # the forked job process was found ...
    job = jobs[0]
    assert sampled[job]["comm"] == "fio" and sampled[job]["gone"] is True
    assert job in counted and counted[job]["ppid"] == pid  # ... by both

    samples = parse("sampler-threads", (tmp_path / "threads.txt").read_bytes())
    by_pid = {p: [r for r in samples if r["pid"] == p] for p in (pid, job)}
    assert all(r["tid"] != pid for r in by_pid[job])  # each record names its own process
    job_classes = Counter(r["class"] for r in by_pid[job] if r["state"] != "R")
    parent_classes = Counter(r["class"] for r in by_pid[pid] if r["state"] != "R")
    assert job_classes["read_io"] > 0.8 * sum(job_classes.values()), job_classes  # cold direct preads
    assert parent_classes["idle"] > 0.8 * sum(parent_classes.values()), parent_classes
    # what the report's cell shows (the threads that worked): the parent's samples alone were 86 % idle, 0 read_io
    step = sampled_shares(pd.DataFrame(samples))
    assert step is not None and step["read_io"] >= 0.05 and step["idle"] < 0.7, step

    threads = [r for r in parse("counters", (tmp_path / "counters.txt").read_bytes()) if r["kind"] == "thread"]
    assert {r["pid"] for r in threads} == {pid, job}

    def io_wait(tid: int) -> float:
        rows = sorted((r for r in threads if r["tid"] == tid), key=lambda r: r["t_ns"])
        shares = wait_shares(rows, rows[0]["t_ns"], rows[-1]["t_ns"])
        assert shares is not None and shares["covered_s"] > 1.0, (tid, shares)  # read every 50 ms for ~2 s
        return shares["io_wait"]

    assert io_wait(job) > 0.2  # the job's thread waited for the disk (blkio delay) ...
    assert io_wait(pid) < 0.01  # ... the parent's never


WRAPPER = r"""
( "$WORKLOAD" --seconds 1.2 --sleep 2 --hold-ms 0 --out "$DIR/grandchild.json"; true ) &
"$WORKLOAD" --seconds 0.4 --busy 1 --hold-ms 0 --out "$DIR/early.json" &
sleep 0.7
"$WORKLOAD" --seconds 0.5 --sleep 1 --hold-ms 0 --out "$DIR/late.json" &
wait
"""


def test_wrapper_grandchild_late_child_and_exited_child(native: Path, tmp_path: Path) -> None:
    """sh forks a subshell that forks the workload (a grandchild), starts a child that exits after ~0.4 s and one
    after 0.7 s: all three are sampled and counted with their own threads, the exited one is dropped when it
    goes, with its last-seen time."""
    env_script = f'WORKLOAD="{native / "workload"}"; DIR="{tmp_path}"\n' + WRAPPER
    pid, status, started = collect(native, tmp_path, ["sh", "-c", env_script])
    assert status == 0
    sampled, counted = trees(tmp_path)
    workloads = {p: row for p, row in sampled.items() if row["comm"] == "workload"}
    assert len(workloads) == 3, sampled
    grandchild = next(p for p, row in workloads.items() if row["ppid"] != pid)
    assert sampled[sampled[grandchild]["ppid"]]["ppid"] == pid  # through the subshell
    # by when each was found: the early one at once, the late one after the wrapper's 0.7 s sleep
    late = max((p for p in workloads if p != grandchild), key=lambda p: workloads[p]["first_ns"])
    early = next(p for p in workloads if p not in (grandchild, late))
    assert workloads[late]["first_ns"] - started > 0.5e9
    assert workloads[early]["gone"] is True and workloads[early]["last_ns"] < workloads[late]["first_ns"]
    for tree in (sampled, counted):
        assert set(workloads) <= set(tree), tree  # the counters saw the same processes

    samples = parse("sampler-threads", (tmp_path / "threads.txt").read_bytes())
    names = {p: {r["comm"] for r in samples if r["pid"] == p} for p in workloads}
    assert {"wl-sleep0", "wl-sleep1"} <= names[grandchild] and "wl-sleep0" in names[late], names
    assert "wl-busy0" in names[early], names
    # threads share the pid space: a new thread's tid (probed after the last pid) is never taken for a process
    threads_of_others = {r["tid"] for r in samples if r["tid"] != r["pid"]}
    assert threads_of_others and not threads_of_others & (set(sampled) | set(counted))
    # dropped: no sample of the exited child after its last-seen time, which is its last sample's
    assert max(r["t_ns"] for r in samples if r["pid"] == early) == workloads[early]["last_ns"]
    assert max(r["t_ns"] for r in samples) > workloads[early]["last_ns"] + 0.5e9

    threads = [r for r in parse("counters", (tmp_path / "counters.txt").read_bytes()) if r["kind"] == "thread"]
    counted_names = {p: {r["comm"] for r in threads if r["pid"] == p} for p in workloads}
    assert {"wl-sleep0", "wl-sleep1"} <= counted_names[grandchild], counted_names
    assert max(r["t_ns"] for r in threads if r["pid"] == early) <= counted[early]["last_ns"] + 50e6
    assert counted[early]["gone"] is True


DATA = Path(__file__).parent / "data"


def test_real_captures_of_fio_with_its_forked_job_process() -> None:
    """tests/data/sampler/threads-v3-fio-forked-job-psync-direct.txt and tests/data/counters/counters-v2-fio-forked-
    job.txt (one run; SOURCE.md in each folder); counts taken with awk: the sampler has 536 records of fio's parent
    (pid 1928, two threads, 431 of them idle) and 211 of the job process (pid 1973: 86 read_io, 13 futex, the rest
    running); the counters 58 thread lines of the parent and 22 of the job."""
    threads = (DATA / "sampler" / "threads-v3-fio-forked-job-psync-direct.txt").read_bytes()
    counters = (DATA / "counters" / "counters-v2-fio-forked-job.txt").read_bytes()
    for data, parent_gone in ((threads, False), (counters, True)):
        tree = process_records(data)
        assert [(r["pid"], r["ppid"], r["comm"]) for r in tree] == [(1928, 1832, "fio"), (1973, 1928, "fio")]
        assert tree[1]["gone"] is True and tree[0]["gone"] is parent_gone  # the sampler was stopped first
        assert tree[0]["first_ns"] < tree[1]["first_ns"] < tree[1]["last_ns"] <= tree[0]["last_ns"]
        assert tree[0]["cmd"].startswith("fio --name=cold --filename=/var/tmp/harness-tree-x/d.bin --rw=randread")
    samples = parse("sampler-threads", threads)
    assert Counter(r["pid"] for r in samples) == {1928: 536, 1973: 211}
    assert Counter(r["class"] for r in samples if r["pid"] == 1973) == {None: 112, "read_io": 86, "futex": 13}
    assert Counter(r["class"] for r in samples if r["pid"] == 1928)["idle"] == 431
    rows = [r for r in parse("counters", counters) if r["kind"] == "thread"]
    assert Counter(r["pid"] for r in rows) == {1928: 58, 1973: 22}
    assert {r["tid"] for r in rows if r["pid"] == 1973} == {1973}


def test_no_tree_samples_the_steps_process_only(native: Path, tmp_path: Path) -> None:
    """``tree: false`` (--no-tree): the v2 behaviour in the v3 format -- the child shell's sleep is not followed."""
    step = subprocess.Popen(["sh", "-c", "sleep 0.6 & wait"])
    out = tmp_path / "threads.txt"
    done = subprocess.run([str(native / "sampler"), "threads", str(step.pid), "--period-ms", "5", "--no-tree",
                           "--out", str(out)], timeout=30)
    assert done.returncode == 0 and step.wait(timeout=10) == 0
    text = out.read_text()
    assert " tree=none " in text.splitlines()[0]
    assert [row["pid"] for row in process_records(out.read_bytes())] == [step.pid]
    assert {row["pid"] for row in parse("sampler-threads", out.read_bytes())} == {step.pid}


def test_ingest_fills_the_processes_table_and_the_pid_columns(tmp_path: Path) -> None:
    """The collectors' ingest of the real captures above: the threads table and thread_counters carry each thread's
    own pid, and both collectors add the tree to ``processes`` (source says which one saw it)."""
    from harness.collectors import COLLECTORS

    (tmp_path / "threads.txt").write_bytes((DATA / "sampler" / "threads-v3-fio-forked-job-psync-direct.txt")
                                           .read_bytes())
    (tmp_path / "counters.txt").write_bytes((DATA / "counters" / "counters-v2-fio-forked-job.txt").read_bytes())
    threads = COLLECTORS["threads"].ingest(tmp_path, {})
    counters = COLLECTORS["counters"].ingest(tmp_path, {})
    assert Counter(threads["threads"]["pid"].to_pylist()) == {1928: 536, 1973: 211}
    assert Counter(r["pid"] for r in counters["thread_counters"] if r["kind"] == "thread") == {1928: 58, 1973: 22}
    for rows, source in ((threads["processes"], "threads"), (counters["processes"], "counters")):
        assert [(r["pid"], r["ppid"], r["source"]) for r in rows] == [(1928, 1832, source), (1973, 1928, source)]


def test_the_python_counters_reader_follows_the_tree_too(native: Path, tmp_path: Path) -> None:
    """``reader: python`` (where the native reader is not built): the same tree, the same lines."""
    step, status, _ = collect_step(native, tmp_path, [{"kind": "counters", "period_ms": 50, "reader": "python"}],
                                   subshell_workload(native, tmp_path / "truth.json", 0.6))
    assert status == 0
    data = (tmp_path / "counters.txt").read_bytes()
    assert b" reader=python tree=ppid" in data.splitlines()[0]
    tree = {row["pid"]: row for row in process_records(data)}
    (grandchild,) = [p for p, row in tree.items() if row["comm"] == "workload"]
    assert tree[tree[grandchild]["ppid"]]["ppid"] == step and tree[grandchild]["gone"] is True
    names = {r["comm"] for r in parse("counters", data) if r["kind"] == "thread" and r["pid"] == grandchild}
    assert "wl-sleep0" in names, names


def test_a_child_found_before_its_exec_takes_the_new_name(native: Path, tmp_path: Path) -> None:
    """A subshell found while it still runs the shell, that then execs the workload: its tree row names the
    workload (comm and cmd of the same pid's second '# proc' line), one row per process."""
    script = (f'( sleep 0.4; exec "{native / "workload"}" --seconds 0.4 --sleep 1 --hold-ms 0 --out '
              f'"{tmp_path / "truth.json"}" ); true')
    pid, status, started = collect(native, tmp_path, ["sh", "-c", script])
    assert status == 0
    for name in ("threads.txt", "counters.txt"):
        rows = process_records((tmp_path / name).read_bytes())
        assert len({r["pid"] for r in rows}) == len(rows), rows  # renamed, not a second process
        (child,) = [r for r in rows if r["ppid"] == pid and r["comm"] != "sleep"]
        assert child["comm"] == "workload" and child["cmd"].startswith(str(native / "workload")), (name, child)
        assert child["first_ns"] - started < 0.35e9, (name, child)  # found as the shell, before its exec
    samples = parse("sampler-threads", (tmp_path / "threads.txt").read_bytes())
    assert {"sh", "wl-sleep0"} <= {r["comm"] for r in samples if r["pid"] == child["pid"]}


BLANK_THEN_RESTORED = """
import ctypes, os, time
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: proc(5) fields 48 and 49
saved = ctypes.string_at(start, end - start)
ctypes.memset(start, 0, end - start)  # what /proc/PID/cmdline shows of a process read mid-exec: nothing
child = os.fork()  # born with the blank command line
if child == 0:
    time.sleep(0.3)
    ctypes.memmove(start, saved, len(saved))
    time.sleep(0.4)
    os._exit(0)
os.waitpid(child, 0)
"""


@pytest.mark.parametrize("specs", [SPECS, [{"kind": "counters", "period_ms": 50, "reader": "python"}]],
                         ids=["native", "python-counters"])
def test_a_command_line_read_empty_is_read_again(native: Path, tmp_path: Path, specs: list[dict]) -> None:
    """exec sets the new comm before the new command line can be read, so a process found in between read an
    empty cmd and kept it (a CI run's flake): an empty cmd is read again until it is there. The child here is
    born with its command line blanked and restores it 0.3 s later."""
    pid, status, _ = collect_step(native, tmp_path, specs, [sys.executable, "-c", BLANK_THEN_RESTORED])
    assert status == 0
    names = [spec["kind"] for spec in specs]
    for name in {"threads": "threads.txt", "counters": "counters.txt"}.keys() & set(names):
        rows = process_records((tmp_path / f"{name}.txt").read_bytes())
        assert len({r["pid"] for r in rows}) == len(rows), rows
        (child,) = [r for r in rows if r["ppid"] == pid]
        assert child["cmd"].startswith(f"{sys.executable} -c"), (name, child)
