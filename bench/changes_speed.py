"""Change points over a long history (target: detection over 1,000 sets in under 2 s), and how often the method
is wrong on seeded histories.

    .venv/bin/python bench/changes_speed.py [--sets 1000] [--trials 1000]

1. Detection alone: ``detect_changes`` on 1,000 per-set medians with one step (median of 5 timings).
2. In process: ``open_history`` over ``--sets`` sets, the per-set medians of one cell and its change points.
   End to end: ``harness results changes decode_tps --target local`` in a fresh process over ``--sets`` small
   result sets (two cells, 20 requests each, written here: manifest, runs and requests tables), which includes
   Python's start, opening the DuckDB history over every set and the per-set medians of both cells.
3. Errors on Gaussian histories of 30 sets (2 % noise): the share of flat ones with a change, and the share of
   10 % steps found at exactly the right set.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.analysis.changes import detect_changes, history_changes  # noqa: E402
from harness.results import SCHEMA_VERSION  # noqa: E402
from harness.results.history import metric_by_set, open_history  # noqa: E402
from harness.results.metrics import METRICS  # noqa: E402

START = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def write_set(results: Path, i: int, level_b: float, rng: np.random.Generator) -> None:
    set_id = f"{(START + dt.timedelta(hours=i)):%Y%m%d-%H%M%S}-bench-{i:06d}"
    path = results / set_id
    (path / "tables").mkdir(parents=True)
    runs, rows = [], []
    for arm, level in (("a", 30.0), ("b", level_b)):
        run_id = f"{len(runs) + 1:04d}-llama-server-{arm}-cold-r1"
        runs.append({"run_id": run_id, "index": len(runs) + 1, "target": "local", "step": "llama-server",
                     "step_label": "llama-server", "cache": "cold", "round": 1, "repeat": 1,
                     "params": {"arm": arm}, "status": "ok", "error": None})
        rows += [{"run_id": run_id, "target": "local", "decode_tps": v} for v in level * rng.lognormal(0, .04, 20)]
    pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"}, "arm": r["params"]["arm"],
                   "variant": f"arm={r['params']['arm']} cold"} for r in runs]).to_parquet(path / "tables/runs.parquet")
    pd.DataFrame(rows).to_parquet(path / "tables" / "requests.parquet")
    manifest = {"schema_version": SCHEMA_VERSION, "set_id": set_id, "status": "complete",
                "started": (START + dt.timedelta(hours=i)).isoformat(),
                "experiment": {"name": "bench"}, "harness": {"version": "bench", "git_revision": f"r{i}"},
                "targets": [{"name": "local"}], "files": {}, "runs": runs, "matrix": {"arm": ["a", "b"]},
                "baseline": {"arm": "a"}, "scratch": None}
    (path / "manifest.json").write_text(json.dumps(manifest))


def error_rates(trials: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    flat = sum(bool(detect_changes(30 * rng.lognormal(0, 0.02, 30))) for _ in range(trials))
    found = 0
    for _ in range(trials):
        values = 30 * rng.lognormal(0, 0.02, 30) * np.r_[np.ones(15), np.full(15, 0.9)]
        found += [c.index for c in detect_changes(values)] == [15]
    return flat / trials, found / trials


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    values = 30 * rng.lognormal(0, 0.02, 1000) * np.r_[np.ones(600), np.full(400, 0.9)]
    times = []
    for _ in range(5):
        start = time.perf_counter()
        found = detect_changes(values)
        times.append(time.perf_counter() - start)
    print(f"detect_changes, 1000 values: {statistics.median(times) * 1000:.1f} ms, found at "
          f"{[c.index for c in found]} (step at 600)")
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        for i in range(args.sets):
            write_set(results, i, 30.0 * (0.9 if i >= args.sets * 0.6 else 1.0), rng)
        start = time.perf_counter()
        con = open_history(None, results)
        steps = history_changes(metric_by_set(con, METRICS["decode_tps"], "arm=b cold", "local"))
        print(f"in process, one cell: history opened, per-set medians, change points: "
              f"{time.perf_counter() - start:.2f} s ({len(steps)} found)")
        start = time.perf_counter()
        done = subprocess.run([str(REPO / ".venv/bin/harness"), "results", "changes", "decode_tps", "--target",
                               "local", "--results", str(results)], capture_output=True, text=True, check=True,
                              env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        wall = time.perf_counter() - start
        print(f"harness results changes over {args.sets} sets, end to end: {wall:.2f} s")
        print("\n".join(line for line in done.stdout.splitlines() if "arm=" in line or "change points" in line))
    flat, exact = error_rates(args.trials)
    print(f"30-set histories, 2 % noise, {args.trials} each: flat with a change {flat * 100:.1f} %, "
          f"10 % step found at its set {exact * 100:.1f} %")


if __name__ == "__main__":
    main()
