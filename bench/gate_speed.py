"""Wall time of ``harness gate`` on a result set, as a CI job runs it (a fresh process: imports included).

    .venv/bin/python bench/gate_speed.py SET [--repeat 5] [--baseline-variant NAME] [--metric NAME ...]

Same-session mode against the set's baseline cell (the manifest's ``baseline``, else the matrix's first cell,
e.g. "read_ahead_kb=8192 threads=1", per cache condition) on every metric that has a cell to compare, with a
JUnit file written. A set of an older schema is upgraded into a temporary directory first (not timed).
Target: <= 5 s on a 34-run set.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METRICS = ["decode_tps", "prefill_tps", "ttft_ms", "bytes_per_token", "majflt_per_token", "ios_per_token",
           "bench_tps"]


def current_schema(path: Path, tmp: Path) -> Path:
    from harness.results.loader import load_result_set

    try:
        load_result_set(path)
        return path
    except Exception:  # noqa: BLE001 - an older schema: upgrade a copy, the original stays as it is
        from harness.results.upgrade import upgrade_set

        upgraded = upgrade_set(path, tmp)
        print(f"{path.name}: older schema, gating an upgraded copy {upgraded}")
        return upgraded or path


def gated_metrics(path: Path, wanted: list[str]) -> list[str]:
    """The wanted metrics the set holds (the gate refuses an absent one with exit 2)."""
    from harness.results.loader import load_result_set
    from harness.results.metrics import METRICS as CATALOGUE
    from harness.results.samples import samples

    result_set = load_result_set(path)
    return [m for m in wanted if not samples(result_set, CATALOGUE[m]).empty]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("set", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline-variant", default=None)
    parser.add_argument("--metric", action="append", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        path = current_schema(args.set.resolve(), tmp)
        manifest = json.loads((path / "manifest.json").read_text())
        cell = manifest.get("baseline") or {k: values[0] for k, values in (manifest.get("matrix") or {}).items()}
        baseline = args.baseline_variant or " ".join(f"{k}={v}" for k, v in cell.items())  # default: the first cell
        metrics = gated_metrics(path, args.metric or METRICS)
        argv = [sys.executable, "-m", "harness", "gate", str(path), "--baseline-variant", baseline,
                *[x for m in metrics for x in ("--metric", m)], "--junit", str(tmp / "gate.xml"), "--format", "json"]
        walls, cpus, cells = [], [], 0
        for _ in range(args.repeat):
            start, used = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
            walls.append(time.monotonic() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
            if done.returncode not in (0, 1):
                sys.exit(f"harness gate exited {done.returncode}: {done.stderr.strip()[-600:]}")
            cells = len(json.loads(done.stdout)["cells"])
    runs = len(manifest.get("runs", []))
    print(f"set: {args.set.name} ({runs} runs); baseline variant {baseline!r}; metrics: {', '.join(metrics)}")
    print(f"cells decided: {cells}; exit code {done.returncode}")
    print(f"harness gate wall: median {statistics.median(walls):.2f} s, min {min(walls):.2f} s, "
          f"max {max(walls):.2f} s over {len(walls)} runs (target <= 5 s)")
    # on a busy machine the wall time counts the neighbours; the CPU time is what the gate itself costs
    print(f"harness gate CPU (user + sys): median {statistics.median(cpus):.2f} s; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
