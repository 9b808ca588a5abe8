"""What the offcpu collector (bpftrace on sched_switch and sched_wakeup; runner/collectors/offcpu.py) costs a
cold-file reader: runner/native/workload --pread (128 KiB preads of a cold file, evicted at its end, so every read
goes to the device) alone (A) and under offcpu (B), interleaved A B A B ..., throughput mean +- sd and the change of
the means; bpftrace's own CPU while the reader ran (its /proc stat, compile and attach excluded); and, with
``--neighbour``, what it costs a syscall-heavy neighbour (a process making tiny syscalls as fast as it can beside the
reader: its calls per second alone and under offcpu -- eBPF programs run in the context of the task that fires their
probe, so their cost shows there, not in bpftrace's CPU). The load average is printed with every number.
``--offcpu-module FILE`` measures another version of runner/collectors/offcpu.py (e.g. one saved from an older
commit with ``git show``) for a before/after comparison. Root and bpftrace needed; run on demand, not in CI.

    .venv/bin/python bench/offcpu_overhead.py [--rounds 5] [--seconds 5] [--size-mib 256] [--period-ms 1000]
        [--neighbour] [--offcpu-module FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.collectors import offcpu as offcpu_module  # noqa: E402

BLOCK = 128 * 1024
NEIGHBOUR = ("import os, sys, time\nend = time.monotonic() + float(sys.argv[1])\ncalls = 0\n"
             "while time.monotonic() < end:\n    for _ in range(10000):\n        os.getppid()\n    calls += 10000\n"
             "print(calls / float(sys.argv[1]))")


def load_offcpu(path: str | None):  # noqa: ANN201  (a module)
    """runner/collectors/offcpu.py, or another version of it from a file."""
    if path is None:
        return offcpu_module
    spec = importlib.util.spec_from_file_location("offcpu_under_test", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_once(native: Path, data: str, seconds: float, run_dir: Path, period_ms: int | None, module,  # noqa: ANN001
              neighbour: bool) -> tuple[float, float, float]:
    """(reader MB/s, bpftrace CPU % of a core while it read (0 without offcpu), neighbour's syscalls/s (0 without))."""
    subprocess.run([str(native / "cachectl"), "drop", data], check=True, capture_output=True)
    offcpu = module.Offcpu(period_ms, str(run_dir / "offcpu.txt")) if period_ms else None
    if offcpu:
        offcpu.start()
        assert offcpu.error is None, offcpu.error
    beside = (subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(seconds)], stdout=subprocess.PIPE, text=True)
              if neighbour else None)
    started = time.monotonic()
    cpu0 = cpu_s(offcpu.proc.pid) if offcpu else 0.0
    proc = subprocess.Popen([str(native / "workload"), "--seconds", str(seconds), "--pread", data, "--hold-ms", "0",
                             "--out", str(run_dir / "truth.json")])
    if offcpu:
        offcpu.follow(proc.pid)
    assert proc.wait() == 0
    used = (cpu_s(offcpu.proc.pid) - cpu0) / (time.monotonic() - started) if offcpu else 0.0
    if offcpu:
        assert offcpu.stop() is None
    rate = float(beside.communicate()[0]) if beside else 0.0
    (reader,) = json.loads((run_dir / "truth.json").read_text())["threads"]
    return reader["ops"] * BLOCK / (reader["wall_ns"] / 1e9) / 1e6, 100 * used, rate


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f} +- {statistics.stdev(values) if len(values) > 1 else 0:.1f}"


def change(alone: list[float], traced: list[float]) -> str:
    a, b = statistics.mean(alone), statistics.mean(traced)
    return f"{100 * (b - a) / a:+.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--period-ms", type=int, default=1000)
    parser.add_argument("--neighbour", action="store_true", help="a syscall-heavy neighbour beside the reader")
    parser.add_argument("--offcpu-module", help="another version of runner/collectors/offcpu.py to measure")
    args = parser.parse_args()
    module = load_offcpu(args.offcpu_module)
    reason = module.unavailable_reason()
    if reason:
        sys.exit(f"offcpu cannot run here: {reason}")
    subprocess.run(["make", "-s", "-C", str(REPO / "runner" / "native")], check=True)
    native = REPO / "runner" / "native" / "bin"
    where = Path(tempfile.mkdtemp(prefix="offcpu-bench-", dir="/var/tmp"))
    data = where / "data.bin"
    with data.open("wb") as out:
        for _ in range(args.size_mib):
            out.write(os.urandom(1 << 20))
    mbps: dict[bool, list[float]] = {False: [], True: []}
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu, loads = [], [loadavg()]
    try:
        for round_ in range(args.rounds):
            for with_offcpu in (False, True):
                run_dir = where / f"r{round_}-{int(with_offcpu)}"
                run_dir.mkdir()
                speed, used, rate = read_once(native, str(data), args.seconds, run_dir,
                                              args.period_ms if with_offcpu else None, module, args.neighbour)
                mbps[with_offcpu].append(speed)
                rates[with_offcpu].append(rate)
                cpu += [used] if with_offcpu else []
                loads.append(loadavg())
                print(f"round {round_ + 1} {'offcpu' if with_offcpu else 'alone ':6}: {speed:7.1f} MB/s"
                      + (f", neighbour {rate / 1e6:.2f} M syscalls/s" if args.neighbour else "")
                      + (f", bpftrace {used:.2f} % of a core" if with_offcpu else "") + f", load {loads[-1]}",
                      flush=True)
    finally:
        subprocess.run(["rm", "-rf", str(where)], check=False)
    print(f"{args.offcpu_module or 'runner/collectors/offcpu.py'}: cold-file reader, {args.rounds} rounds of "
          f"{args.seconds:g} s: alone {spread(mbps[False])} MB/s, under offcpu {spread(mbps[True])} MB/s: change "
          f"{change(mbps[False], mbps[True])}; bpftrace {statistics.mean(cpu):.2f} % of a core (snapshots every "
          f"{args.period_ms} ms); load average {min(loads, key=float)}-{max(loads, key=float)}")
    if args.neighbour:
        alone, traced = ([rate / 1e6 for rate in rates[side]] for side in (False, True))
        print(f"syscall-heavy neighbour: alone {spread(alone)} M syscalls/s, beside offcpu {spread(traced)}: "
              f"change {change(alone, traced)}")


if __name__ == "__main__":
    main()
