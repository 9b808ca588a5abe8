"""Harness overhead per run on the local target vs running the same llama-bench command by hand.

    .venv/bin/python bench/run_overhead.py [--runs 6]

The marginal cost of a run through the harness is (wall of a campaign with N+1 rounds - wall with 1
round) / N, which cancels the fixed costs (preflight, probe, build-cache check, lease, report). The
same llama-bench command (tiny synthetic MoE, warm cache, no collectors) is timed by hand N times.
Overhead = marginal harness run - mean hand run. Target: <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["-p", "16", "-n", "16", "-t", "1", "-r", "1"]

EXPERIMENT = """\
name: overhead
model: {{synth: {{layers: 4, experts: 8, used: 2}}}}
cache: warm
rounds: {rounds}
steps:
  - llama-bench: {{args: [{args}]}}
"""


def timed(argv: list[str], **kwargs) -> float:  # noqa: ANN003
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:5])}... failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
    return time.monotonic() - start


def campaign_wall(tmp: Path, rounds: int) -> tuple[float, Path]:
    exp = tmp / f"overhead-{rounds}.yaml"
    exp.write_text(EXPERIMENT.format(rounds=rounds, args=", ".join(ARGS)))
    results = tmp / f"results-{rounds}"
    # a private local target (own workdir, own lease): other campaigns on the machine do not queue it
    targets = tmp / "targets"
    if not targets.exists():
        targets.mkdir()
        text = (REPO / "targets" / "local.yaml").read_text()
        (targets / "local.yaml").write_text(text.replace("workdir: /var/tmp/harness", f"workdir: {tmp / 'work'}"))
    wall = timed([sys.executable, "-m", "harness", "run", str(exp), "--results", str(results),
                  "--targets-dir", str(targets)], cwd=REPO)
    return wall, next(results.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp_name:
        tmp = Path(tmp_name)
        one, first_set = campaign_wall(tmp, 1)  # also builds/synthesizes into the caches
        one, first_set = campaign_wall(tmp, 1)
        many, _ = campaign_wall(tmp, 1 + args.runs)
        manifest = json.loads((first_set / "manifest.json").read_text())
        bench = Path(manifest["engines"]["llama.cpp"]["binaries"]["llama-bench"])
        model = manifest["files"]["local"]["model"]["path"]
        hand = [timed([str(bench), "-m", model, *ARGS, "-o", "jsonl"]) for _ in range(args.runs)]
    marginal = (many - one) / args.runs
    print(f"llama-bench by hand:          {statistics.mean(hand):.2f} s ± {statistics.stdev(hand):.2f} "
          f"(n={len(hand)})")
    print(f"campaign, 1 round:            {one:.2f} s (fixed cost included)")
    print(f"campaign, {1 + args.runs} rounds:           {many:.2f} s")
    print(f"marginal run via harness:     {marginal:.2f} s")
    print(f"harness overhead per run:     {marginal - statistics.mean(hand):.2f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
