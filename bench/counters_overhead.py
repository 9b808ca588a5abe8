"""CPU the counters collector costs: it follows a 16-thread process (runner/native/workload: 16 sleeping threads)
at 100 ms for a while, and reports the reader's own CPU time per second of wall time, per read and per thread per
read (its ``# stop`` line's cpu_s). Target: <= 0.2 % of a core. The readers are measured in one invocation, in
turn, side by side:

- ``python``: the old mode, the collector's own thread (CLOCK_THREAD_CPUTIME_ID of that thread);
- ``native``: runner/native/bin/counters (getrusage of that process: its start included);
- ``old``, with ``--old-counters BIN``: another build of the C reader, e.g. of an earlier revision's
  counters.c, run by the same collector (``git show REV:runner/native/counters.c > /tmp/old.c`` and
  ``cc -O2 -std=c99 -D_GNU_SOURCE -o /tmp/old-counters /tmp/old.c``).

    .venv/bin/python bench/counters_overhead.py [--seconds 20] [--period-ms 100] [--threads 16] [--rounds 1] \
        [--readers python,native] [--old-counters BIN]

Root reads taskstats too (one netlink datagram per read asks for every thread); without root only /proc is read.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.parsers._common import header_fields  # noqa: E402
from runner.collectors.run import Collectors  # noqa: E402


def native_dir_with(counters: Path, native: Path, into: Path) -> Path:
    """A native tools directory whose ``counters`` is the given binary (the workload is the current one)."""
    into.mkdir(exist_ok=True)
    for name, target in (("counters", counters), ("workload", native / "workload")):
        link = into / name
        if not link.exists():
            os.symlink(target.resolve(), link)
    return into


def measure(reader: str, seconds: float, period_ms: int, threads: int, native: Path) -> dict:
    collector_reader = "python" if reader == "python" else "native"  # "old" is a native binary too
    with tempfile.TemporaryDirectory() as run_dir:
        collectors = Collectors([{"kind": "counters", "period_ms": period_ms, "reader": collector_reader}],
                                str(native), run_dir, None)
        collectors.start_global()
        started = time.monotonic()
        proc = subprocess.Popen([str(native / "workload"), "--seconds", str(seconds), "--sleep", str(threads),
                                 "--hold-ms", "0", "--out", f"{run_dir}/truth.json"])
        collectors.on_spawn(proc.pid)
        proc.wait()
        wall = time.monotonic() - started
        errors = collectors.stop_all()
        text = Path(run_dir, "counters.txt").read_text().splitlines()
    header, stop = header_fields(text[0]), header_fields(text[-1])
    assert header.get("reader") == collector_reader, header
    cpu_s, reads = float(stop["cpu_s"]), int(stop["reads"])
    return {"reader": reader, "wall": wall, "cpu_s": cpu_s, "reads": reads, "overruns": stop["overruns"],
            "pct": 100 * cpu_s / wall, "taskstats": header.get("taskstats"), "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--period-ms", type=int, default=100)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1, help="the readers alternate, this many times each")
    parser.add_argument("--readers", default="python,native", help="comma-separated: python, native")
    parser.add_argument("--old-counters", type=Path, help="another counters binary, measured as reader 'old'")
    args = parser.parse_args()
    subprocess.run(["make", "-s", "-C", str(REPO / "runner" / "native")], check=True)
    native = REPO / "runner" / "native" / "bin"
    readers = {name: native for name in args.readers.split(",") if name}
    with tempfile.TemporaryDirectory() as scratch:
        if args.old_counters:
            readers["old"] = native_dir_with(args.old_counters, native, Path(scratch) / "old")
        for _round in range(args.rounds):
            for reader, tools in readers.items():
                report(measure(reader, args.seconds, args.period_ms, args.threads, tools), args)


def report(got: dict, args: argparse.Namespace) -> None:
    errors = f"; errors {got['errors']}" if got["errors"] else ""
    per_read = 1e6 * got["cpu_s"] / max(got["reads"], 1)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"counters collector ({got['reader']:6}), {args.threads + 1} threads, period {args.period_ms} ms, "
          f"taskstats {got['taskstats']}, {got['wall']:.1f} s: {got['reads']} reads, {got['overruns']} "
          f"overruns, CPU {got['cpu_s'] * 1000:.1f} ms = {got['pct']:.3f} % of a core ({per_read:.0f} us per read, "
          f"{per_read / (args.threads + 1):.1f} us per thread per read); load {load}; target <= 0.2 %: "
          f"{'met' if got['pct'] <= 0.2 else 'NOT met'}{errors}", flush=True)


if __name__ == "__main__":
    main()
