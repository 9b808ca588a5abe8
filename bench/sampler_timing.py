#!/usr/bin/env python3
"""How closely the native sampler (runner/native) keeps its period on this machine. Run on demand, not in CI.

    python3 bench/sampler_timing.py [--seconds 10] [--block-period-ms 10] [--threads-period-ms 5]

The tests (tests/test_native.py) check the sampler's schedule as behaviour: samples never come faster than the
period (no catch-up burst after missed deadlines), missed deadlines are skipped and counted. How close to the period
the sampler gets depends on how busy the machine is, so that is measured here instead:

1. ``sampler block DEV --period-ms 10`` on the block device holding /var/tmp, while a cold 64 MiB file is read;
2. ``sampler threads PID --period-ms 5`` on a process with five named threads (one of them spinning).

For each: samples against the periods elapsed, the median, p99 and largest gap, the overruns, and the CPU load from
other processes meanwhile (it is a shared machine). The targets are the ones the tests used to assert: at least
half the nominal rate, a median gap within 80-130 % of the period, overruns at most 10 % of the samples.
Stdlib only; Linux only.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.probes.blockdev import block_device_of  # noqa: E402
from runner.util import make_data_file  # noqa: E402

NATIVE = ROOT / "runner" / "native"
BIN = NATIVE / "bin"
MiB = 1 << 20

CHILD = """
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)
def name(n):
    libc.prctl(15, n.encode(), 0, 0, 0)
def sleeper():
    name("sleeper")
    while True:
        time.sleep(0.5)
def spinner():
    name("spinner")
    while True:
        pass
def waiter(n):
    name(n)
    threading.Event().wait()
for t in (sleeper, spinner, lambda: waiter("waiter1"), lambda: waiter("waiter2")):
    threading.Thread(target=t, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
"""


def system_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f[:8]) - idle, sum(f[:8])


def sample_for(args: list[str], out: Path, seconds: float, during=None) -> tuple[list[int], int, int, float]:
    """Run the sampler for ``seconds``, calling ``during()`` once it has started; return (sample times ns,
    samples, overruns, CPU cores used by everything else meanwhile, roughly)."""
    p = subprocess.Popen([str(BIN / "sampler"), *args, "--out", str(out)], stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 30
    while not (out.exists() and out.read_text().endswith("\n")):
        if p.poll() is not None or time.monotonic() > end:
            sys.exit(f"sampler {' '.join(args)} did not start: {p.stderr.read() if p.poll() is not None else ''}")
        time.sleep(0.01)
    busy0, t0 = system_busy_ticks()[0], time.monotonic()
    if during:
        during()
    time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
    busy1, wall = system_busy_ticks()[0], time.monotonic() - t0
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    text = out.read_text()
    m = re.search(r"^# stop t_ns=\d+ samples=(\d+) overruns=(\d+)(?: .*)?$", text, re.M)
    if not m:
        sys.exit(f"no stop line in {out}")
    times = sorted({int(line.split(None, 1)[0]) for line in text.splitlines()[1:] if not line.startswith("#")})
    other = (busy1 - busy0) / os.sysconf("SC_CLK_TCK") / wall
    return times, int(m[1]), int(m[2]), other


def report(name: str, period_ms: int, times: list[int], samples: int, overruns: int, other: float) -> list[str]:
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    span_s = (times[-1] - times[0]) / 1e9
    expected = span_s * 1000 / period_ms + 1
    median_ms = gaps[len(gaps) // 2] / 1e6
    p99_ms = gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] / 1e6
    checks = {
        "rate >= 50 % of nominal": samples >= 0.5 * expected,
        "median gap within 80-130 % of the period": 0.8 * period_ms <= median_ms <= 1.3 * period_ms,
        "overruns <= 10 % of samples": overruns <= samples // 10,
    }
    return [
        f"| {name}, {period_ms} ms: samples / periods elapsed ({span_s:.1f} s) | {samples} / {expected:.0f} "
        f"({100 * samples / expected:.1f} %) |",
        f"| {name}: gap median / p99 / max | {median_ms:.2f} / {p99_ms:.2f} / {gaps[-1] / 1e6:.2f} ms |",
        f"| {name}: overruns | {overruns} ({100 * overruns / max(samples, 1):.1f} % of samples) |",
        f"| {name}: CPU busy on the machine meanwhile (all processes) | {other:.2f} of {os.cpu_count()} cores |",
        *(f"| {name}: {check} | {'yes' if ok else 'NO'} |" for check, ok in checks.items()),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="how long each sampler runs")
    ap.add_argument("--block-period-ms", type=int, default=10)
    ap.add_argument("--threads-period-ms", type=int, default=5)
    a = ap.parse_args()

    r = subprocess.run(["make", "-C", str(NATIVE)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stdout + r.stderr)
    work = Path(tempfile.mkdtemp(prefix="sampler-timing-", dir="/var/tmp"))
    rows: list[str] = []
    try:
        data = work / "data.bin"
        make_data_file(str(data), 64 * MiB)  # incompressible, fsynced: DONTNEED can evict every page
        subprocess.run([str(BIN / "cachectl"), "drop", str(data)], check=True)
        dev = block_device_of(data)

        def read_cold() -> None:
            with open(data, "rb") as f:
                while f.read(MiB):
                    pass

        rows += report(f"sampler block {dev}", a.block_period_ms,
                       *sample_for(["block", dev, "--period-ms", str(a.block_period_ms)], work / "block.txt",
                                   a.seconds, read_cold))

        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        try:
            if child.stdout.readline() != "ready\n":
                sys.exit("the sampled process did not start")
            rows += report("sampler threads (5 threads)", a.threads_period_ms,
                           *sample_for(["threads", str(child.pid), "--period-ms", str(a.threads_period_ms)],
                                       work / "threads.txt", a.seconds))
        finally:
            child.kill()
            child.wait()
    finally:
        for f in work.iterdir():
            f.unlink()
        work.rmdir()
    print(f"{os.uname().nodename}: {os.cpu_count()} CPUs, kernel {os.uname().release}")
    print("| measurement | value |")
    print("|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
