"""CPU the counters collector costs: it follows a 16-thread process (runner/native/workload: 16 sleeping threads)
at 100 ms for a while, and reports the collector thread's own CPU time per second of wall time (its ``# stop``
line's cpu_s, the thread's CLOCK_THREAD_CPUTIME_ID) and per read. Target: <= 0.2 % of a core.

    .venv/bin/python bench/counters_overhead.py [--seconds 20] [--period-ms 100] [--threads 16]

Root reads taskstats too (one netlink request per thread per read); without root only /proc is read.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.parsers._common import header_fields  # noqa: E402
from runner.collectors.run import Collectors  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--period-ms", type=int, default=100)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    subprocess.run(["make", "-s", "-C", str(REPO / "runner" / "native")], check=True)
    native = REPO / "runner" / "native" / "bin"
    with tempfile.TemporaryDirectory() as run_dir:
        collectors = Collectors([{"kind": "counters", "period_ms": args.period_ms}], str(native), run_dir, None)
        collectors.start_global()
        started = time.monotonic()
        proc = subprocess.Popen([str(native / "workload"), "--seconds", str(args.seconds), "--sleep",
                                 str(args.threads), "--hold-ms", "0", "--out", f"{run_dir}/truth.json"])
        collectors.on_spawn(proc.pid)
        proc.wait()
        wall = time.monotonic() - started
        errors = collectors.stop_all()
        text = Path(run_dir, "counters.txt").read_text().splitlines()
    header, stop = header_fields(text[0]), header_fields(text[-1])
    cpu_s, reads = float(stop["cpu_s"]), int(stop["reads"])
    pct = 100 * cpu_s / wall
    print(f"counters collector, {args.threads + 1} threads, period {args.period_ms} ms, taskstats "
          f"{header.get('taskstats')}, {wall:.1f} s: {reads} reads, {stop['overruns']} overruns, "
          f"CPU {cpu_s * 1000:.1f} ms = {pct:.3f} % of a core ({1e6 * cpu_s / max(reads, 1):.0f} us per read); "
          f"target <= 0.2 %: {'met' if pct <= 0.2 else 'NOT met'}" + (f"; errors {errors}" if errors else ""))


if __name__ == "__main__":
    main()
