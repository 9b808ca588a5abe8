"""What the runner's interference meter (runner/interference.py) costs: one schedstat pass over a step's tasks,
the process-tree CPU reading at each end of the step, and the CPU share of the sampling thread at its period.

    python3 bench/interference_overhead.py [--threads 16] [--seconds 5]

A stand-in step (a Python process with N sleeping threads) is tracked as the runner tracks a step's process.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import interference  # noqa: E402 - after the path is set

STEP = "import threading, time\nfor _ in range({n}): threading.Thread(target=time.sleep, args=(60,)).start()\n" \
       "time.sleep(60)\n"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    step = subprocess.Popen([sys.executable, "-c", STEP.format(n=args.threads)])
    try:
        time.sleep(0.5)  # its threads are up
        meter = interference.InterferenceMeter()
        meter.track(step.pid)
        n = 200
        began = time.perf_counter()
        for _ in range(n):
            meter.sample()
        per_sample_ms = (time.perf_counter() - began) / n * 1000
        began = time.perf_counter()
        for _ in range(20):
            interference.tree_cpu_s()
        tree_ms = (time.perf_counter() - began) / 20 * 1000
        cpu0 = _cpu_s()
        meter.start()
        time.sleep(args.seconds)
        record = meter.stop()
        share = (_cpu_s() - cpu0) / args.seconds * 100
    finally:
        step.kill()
        step.wait()
    print(f"tasks tracked: {len(meter.tasks)} (threads {args.threads} + main)")
    print(f"one schedstat pass: {per_sample_ms:.3f} ms; process-tree CPU reading: {tree_ms:.3f} ms")
    print(f"meter thread at {interference.PERIOD_S * 1000:.0f} ms: {share:.2f} % of one core over {args.seconds:g} s "
          "(includes the start and stop readings)")
    print(f"record: {record}")


if __name__ == "__main__":
    main()
