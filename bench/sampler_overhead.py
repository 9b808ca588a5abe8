#!/usr/bin/env python3
"""Overhead of the native sampler (runner/native) at 5 ms over 16 threads: the old mode beside the new, in one run.
Run on demand, not in CI.

    python3 bench/sampler_overhead.py [--file /var/tmp/x.bin] [--size-gib 2] [--rounds 8] [--round-s 8]
                                      [--old-rev c7e78c0] [--v20-rev 57e11ff] [--v2-rev 736738c] [--cpu-s 30]
                                      [--skip-throughput]

The modes (all `sampler threads PID --period-ms 5`):
  old       the v1 sampler, built from runner/native/sampler.c at git revision --old-rev (stat of every thread every
            sample, wchan of those not running); without git, the new binary with --stat-ms 0 --wchan stands in
  v2.0      the first v2 sampler, built from git revision --v20-rev (syscall of every thread every sample, stat every
            100 ms, the task directory listed every 100 ms, strtol/printf-style output); skipped without git
  exact     the current sampler with --stat-ms 0: stat every sample (exact state letters) + syscall of those not
            running
  nogate    the current sampler with --no-gate: syscall of every thread every sample, stat every 100 ms
  v2        the last v2 sampler (the step's process only), built from git revision --v2-rev; skipped without git
  notree    the current sampler with --no-tree: the step's process only, as v2 (the v3 format)
  tree0     the current sampler with --tree-ms 0: the /proc scan for descendants at every sample
  default   the current sampler as the runner starts it: as nogate, but a thread parked in one wait (the same
            syscall line twice) is read through its schedstat first, and syscall only when it has run since; and
            the step's descendants looked for every 100 ms (a /proc scan: the listing, and stat of new pids only)

1. Sampler CPU, side by side: every mode attached at once to the same process for >= 20 s, first to the validation
   workload (runner/native/workload: 16 threads of busy compute, a futex barrier, cold mmap faults, cold preads,
   sleep), then to the cold-file reader below (16 threads, nearly always in D); CPU = delta of the on-CPU ns of
   /proc/<sampler>/schedstat (cross-checked with utime+stime of /proc/<sampler>/stat), as % of one core.
   `sampler block DEV --period-ms 10` runs beside them once, for reference. Then v2.0, nogate and default on 16
   threads + main parked in futex waits (what the gate is for) and on a one-thread `sleep` (the fixed cost of a
   sample: timer wake-up and loop).
2. Reader throughput without a sampler (A), with the default mode (B) and with the old mode (C), interleaved
   A B C A B C ..., mean +- sd, the % change of the means and the paired change per round.

The reader is a small C program (built here into a temp dir): N threads doing 64 KiB pread at random aligned
offsets of a file whose pages were dropped with `cachectl drop`, each read followed by posix_fadvise(DONTNEED) on
its range, with POSIX_FADV_RANDOM (no readahead), so every read goes to the device. Stdlib only; Linux only.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.probes.blockdev import block_device_of  # noqa: E402  (the runner's own: the same device the runs record)

NATIVE = ROOT / "runner" / "native"
BIN = NATIVE / "bin"

READER_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fd;
static uint64_t nblocks, bs;
static double duration;
static volatile int go, done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static void *worker(void *arg) {
    uint64_t x = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1), bytes = 0;
    char *buf;
    if (posix_memalign((void **)&buf, 4096, bs)) abort();
    pthread_mutex_lock(&mu);
    while (!go) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    while (!done) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        off_t off = (off_t)((x % nblocks) * bs);
        ssize_t n = pread(fd, buf, bs, off);
        if (n <= 0) { perror("pread"); exit(1); }
        posix_fadvise(fd, off, bs, POSIX_FADV_DONTNEED);
        bytes += (uint64_t)n;
    }
    free(buf);
    return (void *)(uintptr_t)bytes;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: reader FILE THREADS BLOCK_BYTES SECONDS\n"); return 2; }
    int nth = atoi(argv[2]);
    bs = strtoull(argv[3], 0, 10);
    duration = atof(argv[4]);
    struct stat st;
    fd = open(argv[1], O_RDONLY);
    if (fd < 0 || fstat(fd, &st)) { perror(argv[1]); return 1; }
    nblocks = (uint64_t)st.st_size / bs;
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    pthread_t *th = calloc(nth, sizeof *th);
    for (int i = 0; i < nth; i++) pthread_create(&th[i], 0, worker, (void *)(uintptr_t)i);
    printf("ready %d\n", getpid()); fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;   /* wait for "go" */
    double t0 = now();
    pthread_mutex_lock(&mu); go = 1; pthread_cond_broadcast(&cv); pthread_mutex_unlock(&mu);
    struct timespec ts = { (time_t)duration, (long)((duration - (time_t)duration) * 1e9) };
    nanosleep(&ts, 0);
    done = 1;
    double t1 = now();
    uint64_t total = 0;
    for (int i = 0; i < nth; i++) { void *r; pthread_join(th[i], &r); total += (uintptr_t)r; }
    printf("bytes %llu seconds %.6f\n", (unsigned long long)total, t1 - t0);
    return 0;
}
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def proc_cpu(pid: int) -> tuple[int, int]:
    """(utime+stime ticks, on-CPU ns from schedstat or -1)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    f = stat[stat.rindex(")") + 2 :].split()
    ticks = int(f[11]) + int(f[12])
    try:
        ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ns = -1
    return ticks, ns


def system_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f[:8]) - idle, sum(f[:8])


class Reader:
    def __init__(self, exe: Path, file: Path, threads: int, block: int, seconds: float):
        self.p = subprocess.Popen(
            [str(exe), str(file), str(threads), str(block), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.p.stdout.readline().split()
        assert line and line[0] == "ready", line
        self.pid = self.p.pid

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result_mbps(self) -> float:
        out, _ = self.p.communicate(timeout=600)
        m = re.search(r"bytes (\d+) seconds ([\d.]+)", out)
        assert self.p.returncode == 0 and m, out
        return int(m[1]) / float(m[2]) / 1e6


class Sampler:
    def __init__(self, args: list[str], out: Path, exe: str | None = None):
        self.out = out
        self.p = subprocess.Popen([exe or str(BIN / "sampler"), *args, "--out", str(out)], stderr=subprocess.PIPE)
        end = time.monotonic() + 5
        while not (out.exists() and out.read_text().endswith("\n")):
            assert self.p.poll() is None and time.monotonic() < end, "sampler did not start"
            time.sleep(0.01)

    def stop(self) -> dict:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=30)
        text = self.out.read_text()
        # the stop line's fields; older samplers end at overruns=, newer ones add the lateness quantiles
        m = re.search(r"^# stop t_ns=\d+ (.*)$", text, re.M)
        fields = dict(word.split("=", 1) for word in m[1].split() if "=" in word) if m else {}
        return {key: int(value) for key, value in fields.items()}


def machine_description(dev: str) -> str:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    model = Path(f"/sys/block/{dev}/device/model")
    dev_desc = model.read_text().strip() if model.exists() else dev
    try:
        rot = Path(f"/sys/block/{dev}/queue/rotational").read_text().strip()
        sched = Path(f"/sys/block/{dev}/queue/scheduler").read_text().strip()
    except OSError:
        rot, sched = "?", "?"
    return (
        f"{platform.node()}: {os.cpu_count()} x {cpu}, {mem_gib:.1f} GiB RAM, kernel {platform.release()}, "
        f"device {dev} ({dev_desc}, rotational={rot}, scheduler {sched})"
    )


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


MODES = ("old", "v2.0", "v2", "exact", "nogate", "notree", "tree0", "default")
MODE_ARGS = {"exact": ["--stat-ms", "0"], "nogate": ["--no-gate"], "notree": ["--no-tree"], "tree0": ["--tree-ms", "0"],
             "default": []}
OLD_BUILDS: dict[str, Path] = {}  # mode -> binary built from git ("old", "v2.0")


def build_rev(rev: str, work: Path, name: str) -> Path | None:
    """The sampler from git revision ``rev`` (read with `git show`, nothing in the tree changes); None if
    git or the revision is not there. Its sources are sampler.c alone before the split, sampler*.c with their
    headers after (runner/native/sampler.h says which part is where)."""
    native = "runner/native/"
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, native], check=True,
                                capture_output=True, text=True).stdout.split()
        wanted = [n for n in listed if n.endswith(".h") or (n.startswith(native + "sampler") and n.endswith(".c"))]
        files = {n[len(native):]: subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{n}"], check=True,
                                                 capture_output=True).stdout for n in wanted}
    except (OSError, subprocess.CalledProcessError):
        return None
    if "sampler.c" not in files:
        return None
    src_dir = work / f"{name}-src"
    src_dir.mkdir(exist_ok=True)
    for file_name, text in files.items():
        (src_dir / file_name).write_bytes(text)
    exe = work / name
    run(["cc", "-std=c99", "-O2", "-D_GNU_SOURCE", "-D_FILE_OFFSET_BITS=64", "-o", str(exe),
         *sorted(str(src_dir / n) for n in files if n.endswith(".c"))])
    return exe


def sampler_argv(mode: str, old: Path | None, pid: int, period_ms: int) -> list[str]:
    common = ["threads", str(pid), "--period-ms", str(period_ms)]
    if mode == "old":
        if old is not None:
            return [str(old), *common]
        return [str(BIN / "sampler"), *common, "--stat-ms", "0", "--wchan", "--no-gate"]
    if mode in OLD_BUILDS:
        return [str(OLD_BUILDS[mode]), *common]
    return [str(BIN / "sampler"), *common, *MODE_ARGS[mode]]


def available_modes() -> tuple[str, ...]:
    return tuple(m for m in MODES if m in MODE_ARGS or m == "old" or m in OLD_BUILDS)


class Workload:
    """runner/native/workload with 16 threads, as the process the samplers attach to."""

    def __init__(self, files: tuple[Path, Path], seconds: float, out: Path):
        self.p = subprocess.Popen([str(BIN / "workload"), "--seconds", str(seconds), "--busy", "2",
                                   "--barrier", "8:500us", "--fault", str(files[0]), "--pread", str(files[1]),
                                   "--sleep", "4", "--out", str(out)])
        self.pid = self.p.pid

    def finish(self) -> None:
        assert self.p.wait(timeout=600) == 0


def cpu_side_by_side(pid: int, a, old: Path | None, work: Path, tag: str, dev: str | None,
                     modes: tuple[str, ...] | None = None) -> dict:
    """Every mode attached to ``pid`` at once for a.cpu_s: CPU % of one core per mode (and the block sampler's)."""
    samplers = {mode: Sampler(sampler_argv(mode, old, pid, a.period_ms)[1:], work / f"{tag}-{mode}.txt",
                              exe=sampler_argv(mode, old, pid, a.period_ms)[0]) for mode in modes or available_modes()}
    if dev:
        samplers["block"] = Sampler(["block", dev, "--period-ms", "10"], work / f"{tag}-block.txt")
    c0 = {m: proc_cpu(s.p.pid) for m, s in samplers.items()}
    load0 = Path("/proc/loadavg").read_text().split()[0]
    t0 = time.monotonic()
    time.sleep(a.cpu_s)
    c1 = {m: proc_cpu(s.p.pid) for m, s in samplers.items()}
    wall = time.monotonic() - t0
    load = f"{load0}-{Path('/proc/loadavg').read_text().split()[0]}"
    nthreads = len(os.listdir(f"/proc/{pid}/task"))
    tck = os.sysconf("SC_CLK_TCK")
    out = {}
    for mode, s in samplers.items():
        info = s.stop()
        sched = 100.0 * (c1[mode][1] - c0[mode][1]) / 1e9 / wall
        out[mode] = {"sched_pct": sched, "ticks_pct": 100.0 * (c1[mode][0] - c0[mode][0]) / tck / wall,
                     "wall_s": wall, "threads": nthreads, "load": load, **info,
                     "us_per_thread_sample": sched / 100.0 * wall / max(1, info.get("samples", 0) * nthreads) * 1e6}
    return out


# 16 threads + main parked in futex waits for good: what the gate (schedstat first) is for
PARKED = [sys.executable, "-c", "import threading; e = threading.Event(); "
          "[threading.Thread(target=e.wait, daemon=True).start() for _ in range(16)]; e.wait()"]


def cpu_on_process(argv: list[str], a, old: Path | None, work: Path, tag: str) -> dict:
    """v2.0, nogate and default side by side on a process started from ``argv`` (killed afterwards)."""
    proc = subprocess.Popen(argv)
    try:
        time.sleep(0.5)
        modes = tuple(m for m in ("v2.0", "v2", "nogate", "notree", "tree0", "default") if m in available_modes())
        return cpu_side_by_side(proc.pid, a, old, work, tag, None, modes=modes)
    finally:
        proc.kill()
        proc.wait()


def throughput_rounds(a, reader: Path, old: Path | None, work: Path) -> dict[str, list[float]]:
    """Reader MB/s without a sampler (A), with the default mode (B), with the old mode (C), interleaved."""
    mbps: dict[str, list[float]] = {"A": [], "B": [], "C": []}
    background: list[float] = []
    tck = os.sysconf("SC_CLK_TCK")
    for i in range(a.rounds):
        for variant, mode in (("A", None), ("B", "default"), ("C", "old")):
            run([str(BIN / "cachectl"), "drop", str(a.file)])
            rd = Reader(reader, a.file, a.threads, a.block_kib * 1024, a.round_s)
            s = None
            if mode:
                argv = sampler_argv(mode, old, rd.pid, a.period_ms)
                s = Sampler(argv[1:], work / f"ab-{i}-{variant}.txt", exe=argv[0])
            sys0, own0 = system_busy_ticks(), proc_cpu(rd.pid)[0] + (proc_cpu(s.p.pid)[0] if s else 0)
            rd.go()
            time.sleep(max(0.0, a.round_s - 0.3))  # measure the other load while the reader still runs
            sys1, own1 = system_busy_ticks(), proc_cpu(rd.pid)[0] + (proc_cpu(s.p.pid)[0] if s else 0)
            background.append((sys1[0] - sys0[0] - (own1 - own0)) / tck / (a.round_s - 0.3))
            mbps[variant].append(rd.result_mbps())
            if s:
                s.stop()
            print(f"round {i + 1} {variant}: {mbps[variant][-1]:8.1f} MB/s  (other load {background[-1]:.2f} cores)",
                  flush=True)
    mbps["background"] = background
    return mbps


def print_cpu(title: str, cpu: dict, period_ms: int) -> None:
    print(f"\n{title}\n")
    print("| mode | CPU % of one core (schedstat) | (utime+stime) | samples / overruns | µs per thread per sample | "
          "late p50 / p90 µs | load average (1 min) |")
    print("|---|---|---|---|---|---|---|")
    for mode, r in cpu.items():
        label = f"{mode} ({period_ms} ms, {r['threads']} threads)" if mode != "block" else "block (10 ms)"
        print(f"| {label} | {r['sched_pct']:.2f} | {r['ticks_pct']:.2f} | {r.get('samples')} / {r.get('overruns')} | "
              f"{r['us_per_thread_sample']:.2f} | {r.get('late_us_p50', '-')} / {r.get('late_us_p90', '-')} | "
              f"{r['load']} |")


def print_throughput(mbps: dict[str, list[float]]) -> None:
    ma, sa = mean_sd(mbps["A"])
    print("\n| reader | MB/s (mean ± sd) | change of means vs A | paired change per round vs A |")
    print("|---|---|---|---|")
    print(f"| A: no sampler (n={len(mbps['A'])}) | {ma:.1f} ± {sa:.1f} | | |")
    for variant, name in (("B", "default mode"), ("C", "old mode")):
        m, sd = mean_sd(mbps[variant])
        diffs = [100.0 * (b - x) / x for x, b in zip(mbps["A"], mbps[variant], strict=True)]
        md, sdd = mean_sd(diffs)
        print(f"| {variant}: {name} (n={len(mbps[variant])}) | {m:.1f} ± {sd:.1f} | {100.0 * (m - ma) / ma:+.2f} % | "
              f"{md:+.2f} ± {sdd:.2f} % (standard error {sdd / len(diffs) ** 0.5:.2f} %) |")
    bg = mbps["background"]
    print(f"\nCPU load from other processes during the rounds: {statistics.mean(bg):.2f} cores (max {max(bg):.2f}) "
          f"of {os.cpu_count()}")


def make_file(path: Path, size: int) -> bool:
    if path.exists() and path.stat().st_size == size:
        return False
    print(f"writing {size / 2**30:.2f} GiB test file {path} ...", flush=True)
    with open(path, "wb") as f:
        chunk = os.urandom(16 << 20)
        for i in range(max(1, size // len(chunk))):
            f.write(chunk[:8] + i.to_bytes(8, "little") + chunk[16:])
        f.flush()
        os.fsync(f.fileno())
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", type=Path, default=Path("/var/tmp/harness-sampler-bench.bin"))
    ap.add_argument("--size-gib", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--block-kib", type=int, default=64)
    ap.add_argument("--period-ms", type=int, default=5)
    ap.add_argument("--cpu-s", type=float, default=30.0, help="duration of each CPU measurement (>= 20)")
    ap.add_argument("--rounds", type=int, default=8, help="A/B/C triples (>= 4)")
    ap.add_argument("--round-s", type=float, default=8.0)
    ap.add_argument("--old-rev", default="c7e78c0", help="git revision whose sampler.c is the old (v1) mode")
    ap.add_argument("--v20-rev", default="57e11ff", help="git revision whose sampler.c is the v2.0 mode")
    ap.add_argument("--v2-rev", default="736738c", help="git revision whose sampler.c is the last v2 (no tree)")
    ap.add_argument("--skip-throughput", action="store_true", help="only the CPU measurements (~1.5 min)")
    ap.add_argument("--keep", action="store_true", help="keep the test files")
    a = ap.parse_args()

    r = subprocess.run(["make", "-C", str(NATIVE)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stdout + r.stderr)
    work = Path(tempfile.mkdtemp(prefix="sampler-bench-", dir="/var/tmp"))
    reader = work / "reader"
    (work / "reader.c").write_text(READER_C)
    run(["cc", "-O2", "-Wall", "-pthread", "-o", str(reader), str(work / "reader.c")])
    old = build_rev(a.old_rev, work, "sampler-old")
    v20 = build_rev(a.v20_rev, work, "sampler-v20")
    if v20 is not None:
        OLD_BUILDS["v2.0"] = v20
    v2 = build_rev(a.v2_rev, work, "sampler-v2")
    if v2 is not None:
        OLD_BUILDS["v2"] = v2
    small = (work / "fault.bin", work / "pread.bin")
    created = make_file(a.file, int(a.size_gib * 2**30))
    for f in small:
        make_file(f, 64 << 20)
    dev = block_device_of(a.file)
    desc = machine_description(dev)
    print(desc, flush=True)
    try:
        wl = Workload(small, a.cpu_s + 5, work / "truth.json")
        time.sleep(1)
        cpu_workload = cpu_side_by_side(wl.pid, a, old, work, "workload", dev)
        wl.finish()
        run([str(BIN / "cachectl"), "drop", str(a.file)])
        rd = Reader(reader, a.file, a.threads, a.block_kib * 1024, a.cpu_s + 5)
        rd.go()
        time.sleep(1)
        cpu_reader = cpu_side_by_side(rd.pid, a, old, work, "reader", None)
        rd.result_mbps()
        cpu_parked = cpu_on_process(PARKED, a, old, work, "parked")
        cpu_floor = cpu_on_process(["sleep", str(a.cpu_s + 30)], a, old, work, "floor")
        mbps = None if a.skip_throughput else throughput_rounds(a, reader, old, work)
    finally:
        if created and not a.keep:
            a.file.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(desc)
    print(f"old mode: {'v1 sampler from git ' + a.old_rev if old else 'new sampler --stat-ms 0 --wchan (no git)'}")
    print_cpu("Sampler CPU beside each other, attached to the validation workload (16 threads + main):", cpu_workload,
              a.period_ms)
    print_cpu(f"... attached to the cold-file reader ({a.threads} threads + main, {a.block_kib} KiB pread at random "
              "offsets + FADV_DONTNEED):", cpu_reader, a.period_ms)
    print_cpu("... attached to 16 threads + main parked in futex waits (Python threads on one Event):", cpu_parked,
              a.period_ms)
    print_cpu("... attached to a one-thread process (`sleep`): the fixed cost of a sample (wake-up, loop):", cpu_floor,
              a.period_ms)
    if mbps is not None:
        print_throughput(mbps)
    print(f"load average at the end: {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
