"""What the offcpu collector (bpftrace on sched_switch, sched_wakeup and raw_syscalls; runner/collectors/offcpu.py)
costs a cold-file reader: runner/native/workload --pread (128 KiB preads of a cold file, evicted at its end, so every
read goes to the device) alone (A) and under offcpu (B), interleaved A B A B ..., throughput mean +- sd and the
change of the means; and bpftrace's own CPU while the reader ran (its /proc stat, compile and attach excluded).
Root and bpftrace needed; run on demand, not in CI.

    .venv/bin/python bench/offcpu_overhead.py [--rounds 5] [--seconds 5] [--size-mib 256] [--period-ms 1000]
"""

from __future__ import annotations

import argparse
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

from runner.collectors.offcpu import Offcpu, unavailable_reason  # noqa: E402

BLOCK = 128 * 1024


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_once(native: Path, data: str, seconds: float, run_dir: Path, period_ms: int | None) -> tuple[float, float]:
    """(reader MB/s, bpftrace CPU % of a core while it read; 0 without offcpu)."""
    subprocess.run([str(native / "cachectl"), "drop", data], check=True, capture_output=True)
    offcpu = Offcpu(period_ms, str(run_dir / "offcpu.txt")) if period_ms else None
    if offcpu:
        offcpu.start()
        assert offcpu.error is None, offcpu.error
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
    (reader,) = json.loads((run_dir / "truth.json").read_text())["threads"]
    return reader["ops"] * BLOCK / (reader["wall_ns"] / 1e9) / 1e6, 100 * used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--period-ms", type=int, default=1000)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"offcpu cannot run here: {reason}")
    subprocess.run(["make", "-s", "-C", str(REPO / "runner" / "native")], check=True)
    native = REPO / "runner" / "native" / "bin"
    where = Path(tempfile.mkdtemp(prefix="offcpu-bench-", dir="/var/tmp"))
    data = where / "data.bin"
    with data.open("wb") as out:
        for _ in range(args.size_mib):
            out.write(os.urandom(1 << 20))
    alone, traced, cpu = [], [], []
    try:
        for round_ in range(args.rounds):
            for with_offcpu in (False, True):
                run_dir = where / f"r{round_}-{int(with_offcpu)}"
                run_dir.mkdir()
                mbps, used = read_once(native, str(data), args.seconds, run_dir,
                                       args.period_ms if with_offcpu else None)
                (traced if with_offcpu else alone).append(mbps)
                if with_offcpu:
                    cpu.append(used)
                print(f"round {round_ + 1} {'offcpu' if with_offcpu else 'alone ':6}: {mbps:7.1f} MB/s"
                      + (f", bpftrace {used:.2f} % of a core" if with_offcpu else ""), flush=True)
    finally:
        subprocess.run(["rm", "-rf", str(where)], check=False)
    a, b = statistics.mean(alone), statistics.mean(traced)
    print(f"cold-file reader, {args.rounds} rounds of {args.seconds:g} s: alone {a:.1f} +- "
          f"{statistics.stdev(alone) if len(alone) > 1 else 0:.1f} MB/s, under offcpu {b:.1f} +- "
          f"{statistics.stdev(traced) if len(traced) > 1 else 0:.1f} MB/s: change {100 * (b - a) / a:+.1f} %; "
          f"bpftrace {statistics.mean(cpu):.2f} % of a core (snapshots every {args.period_ms} ms)")


if __name__ == "__main__":
    main()
