#!/usr/bin/env python3
"""Overhead of the native sampler (runner/native) on an I/O-bound 16-thread process. Run on demand, not in CI.

    python3 bench/sampler_overhead.py [--file /var/tmp/x.bin] [--size-gib 2] [--rounds 8] [--round-s 8]

1. Sampler CPU: `sampler threads PID --period-ms 5` attached to the reader for >= 20 s (and, alongside it,
   `sampler block DEV --period-ms 10`); CPU = delta of utime+stime from /proc/<sampler>/stat, cross-checked with the
   on-CPU ns of /proc/<sampler>/schedstat, as % of one core.
2. Reader throughput without (A) and with (B) the threads sampler attached, interleaved A B A B ..., mean +- sd and
   the % change of the means.

The reader is a small C program (built here into a temp dir): N threads doing 64 KiB pread at random aligned
offsets of a file whose pages were dropped with `cachectl drop`, each read followed by posix_fadvise(DONTNEED) on
its range, with POSIX_FADV_RANDOM (no readahead), so every read goes to the device. Stdlib only; Linux only.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
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
    def __init__(self, args: list[str], out: Path):
        self.out = out
        self.p = subprocess.Popen([str(BIN / "sampler"), *args, "--out", str(out)], stderr=subprocess.PIPE)
        end = time.monotonic() + 5
        while not (out.exists() and out.read_text().endswith("\n")):
            assert self.p.poll() is None and time.monotonic() < end, "sampler did not start"
            time.sleep(0.01)

    def stop(self) -> dict:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=30)
        text = self.out.read_text()
        m = re.search(r"^# stop t_ns=\d+ samples=(\d+) overruns=(\d+)$", text, re.M)
        return {"samples": int(m[1]), "overruns": int(m[2])} if m else {}


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", type=Path, default=Path("/var/tmp/harness-sampler-bench.bin"))
    ap.add_argument("--size-gib", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--block-kib", type=int, default=64)
    ap.add_argument("--period-ms", type=int, default=5)
    ap.add_argument("--cpu-s", type=float, default=30.0, help="duration of the CPU measurement (>= 20)")
    ap.add_argument("--rounds", type=int, default=8, help="A/B pairs (>= 4)")
    ap.add_argument("--round-s", type=float, default=8.0)
    ap.add_argument("--keep", action="store_true", help="keep the test file")
    a = ap.parse_args()

    r = subprocess.run(["make", "-C", str(NATIVE)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stdout + r.stderr)
    work = Path(tempfile.mkdtemp(prefix="sampler-bench-", dir="/var/tmp"))
    reader = work / "reader"
    (work / "reader.c").write_text(READER_C)
    run(["cc", "-O2", "-Wall", "-pthread", "-o", str(reader), str(work / "reader.c")])

    size = int(a.size_gib * 2**30)
    created = False
    if not a.file.exists() or a.file.stat().st_size != size:
        print(f"writing {size / 2**30:.1f} GiB test file {a.file} ...", flush=True)
        with open(a.file, "wb") as f:
            chunk = os.urandom(16 << 20)
            for i in range(size // len(chunk)):
                f.write(chunk[:8] + i.to_bytes(8, "little") + chunk[16:])
            f.flush()
            os.fsync(f.fileno())
        created = True
    dev = block_device_of(a.file)
    desc = machine_description(dev)
    print(desc, flush=True)

    def drop():
        run([str(BIN / "cachectl"), "drop", str(a.file)])

    tck = os.sysconf("SC_CLK_TCK")
    results: dict = {}
    try:
        # ---- 1. sampler CPU
        drop()
        rd = Reader(reader, a.file, a.threads, a.block_kib * 1024, a.cpu_s + 5)
        rd.go()
        time.sleep(1)
        st = Sampler(["threads", str(rd.pid), "--period-ms", str(a.period_ms)], work / "cpu-threads.txt")
        sb = Sampler(["block", dev, "--period-ms", "10"], work / "cpu-block.txt")
        c0 = {s: proc_cpu(s.p.pid) for s in (st, sb)}
        t0 = time.monotonic()
        time.sleep(a.cpu_s)
        c1 = {s: proc_cpu(s.p.pid) for s in (st, sb)}
        wall = time.monotonic() - t0
        for name, s in (("threads", st), ("block", sb)):
            ticks = c1[s][0] - c0[s][0]
            ns = c1[s][1] - c0[s][1]
            info = s.stop()
            results[name] = {
                "ticks_pct": 100.0 * ticks / tck / wall,
                "sched_pct": 100.0 * ns / 1e9 / wall if c0[s][1] >= 0 else float("nan"),
                "wall_s": wall,
                **info,
            }
        nthreads = len(os.listdir(f"/proc/{rd.pid}/task"))
        results["cpu_reader_mbps"] = rd.result_mbps()

        # ---- 2. throughput A/B, interleaved
        a_mbps, b_mbps, b_cpu, background = [], [], [], []
        for i in range(a.rounds):
            for variant in ("A", "B"):
                drop()
                rd = Reader(reader, a.file, a.threads, a.block_kib * 1024, a.round_s)
                s = None
                if variant == "B":
                    s = Sampler(["threads", str(rd.pid), "--period-ms", str(a.period_ms)], work / f"ab-{i}.txt")
                    c_start = proc_cpu(s.p.pid)
                    t_start = time.monotonic()
                sys0 = system_busy_ticks()
                rd_cpu0 = proc_cpu(rd.pid)[0]
                rd.go()
                time.sleep(max(0.0, a.round_s - 0.3))  # measure CPU while the reader still runs
                rd_cpu1 = proc_cpu(rd.pid)[0]
                sys1 = system_busy_ticks()
                own = rd_cpu1 - rd_cpu0
                if s:
                    c_end = proc_cpu(s.p.pid)
                    own += c_end[0] - c_start[0]
                    b_cpu.append(100.0 * (c_end[1] - c_start[1]) / 1e9 / (time.monotonic() - t_start))
                background.append((sys1[0] - sys0[0] - own) / tck / (a.round_s - 0.3))
                mbps = rd.result_mbps()
                if s:
                    s.stop()
                (a_mbps if variant == "A" else b_mbps).append(mbps)
                print(f"round {i + 1} {variant}: {mbps:8.1f} MB/s  (other load {background[-1]:.2f} cores)", flush=True)
    finally:
        if created and not a.keep:
            a.file.unlink(missing_ok=True)
        for f in work.iterdir():
            f.unlink()
        work.rmdir()

    ma, sa = mean_sd(a_mbps)
    mb, sb_ = mean_sd(b_mbps)
    diffs = [100.0 * (b - x) / x for x, b in zip(a_mbps, b_mbps, strict=True)]
    md, sd_d = mean_sd(diffs)
    t, b = results["threads"], results["block"]
    print()
    print(desc)
    print(
        f"reader: {a.threads} threads, {a.block_kib} KiB pread at random offsets + FADV_DONTNEED, "
        f"{size / 2**30:.1f} GiB file; sampled process had {nthreads} threads"
    )
    print()
    print("| measurement | value |")
    print("|---|---|")
    print(
        f"| sampler threads, {a.period_ms} ms, CPU % of one core ({t['wall_s']:.0f} s) | "
        f"{t['sched_pct']:.2f} (schedstat), {t['ticks_pct']:.2f} (utime+stime) |"
    )
    print(f"| sampler threads samples / overruns | {t.get('samples')} / {t.get('overruns')} |")
    if t.get("samples"):
        per = t["sched_pct"] / 100.0 * t["wall_s"] / (t["samples"] * nthreads) * 1e6
        print(f"| sampler threads CPU per thread per sample | {per:.2f} µs |")
    print(
        f"| sampler block, 10 ms, CPU % of one core | {b['sched_pct']:.3f} (schedstat), "
        f"{b['ticks_pct']:.3f} (utime+stime) |"
    )
    print(f"| sampler threads CPU % during B rounds | {statistics.mean(b_cpu):.2f} |")
    print(
        f"| CPU load from other processes during the A/B rounds | {statistics.mean(background):.2f} cores "
        f"(max {max(background):.2f}) of {os.cpu_count()} |"
    )
    print(f"| reader MB/s without sampler (A, n={len(a_mbps)}) | {ma:.1f} ± {sa:.1f} |")
    print(f"| reader MB/s with sampler (B, n={len(b_mbps)}) | {mb:.1f} ± {sb_:.1f} |")
    print(f"| change of means (B vs A) | {100.0 * (mb - ma) / ma:+.2f} % |")
    print(
        f"| paired change per round (B vs preceding A) | {md:+.2f} ± {sd_d:.2f} % "
        f"(standard error {sd_d / len(diffs) ** 0.5:.2f} %) |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
