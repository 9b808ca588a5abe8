"""The change gate's false-positive rate on A/A builds: the same build twice, gated, N repetitions (default 20).

Each repetition is what one CI job does (docs/ci.md): one campaign of an experiment with two builds, ``baseline``
and ``candidate``, both tinystream (engines/tinystream/, a small real streaming engine in C) from the same source
tree (so one cache key: the same binary), ROUNDS interleaved rounds, on a private local target; then
``harness gate SET --across build --baseline-value baseline --metric decode_tps --max-regression 5%``. A
repetition that exits 1 is a false positive (there is no change to find). Also counted: cells *suspected* (ratio
past the limit, what --confirm would re-run) and improvements (the mirror image, as false).

Prints one line per repetition (exit code, verdict, ratio, 95 % interval, p) and the rate with its exact
(Clopper-Pearson) 95 % interval.

    nice -n 10 .venv/bin/python bench/gate_aa.py [--repetitions 20] [--rounds 6] [--tokens 6]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def experiment(where: Path, rounds: int, tokens: int) -> Path:
    """tinystream twice from one tree (the test's model and tokens, tests/test_gate_builds.py)."""
    source = {"path": str(REPO / "engines" / "tinystream")}
    path = where / "aa.yaml"
    path.write_text(yaml.safe_dump({
        "name": "gate-aa", "validity": "off", "cache": "none", "rounds": rounds,
        "model": {"synth": {"layers": 2, "experts": 8, "used": 2, "quant": "q4_0"}},
        "builds": {"baseline": {"engine": "tinystream", "source": source},
                   "candidate": {"engine": "tinystream", "source": source}},
        "matrix": {"build": ["baseline", "candidate"]},
        "steps": [{"run": {"engine": "tinystream", "n_predict": tokens}}]}, sort_keys=False))
    return path


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True,
                          check=False)


def main() -> int:
    from scipy.stats import binomtest

    from tests.helpers import private_base, private_targets_dir

    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=6, help="tokens per run (the test's 6; more: less noise)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gate-aa-", dir=private_base()))
    failed = suspected = improved = 0
    started = time.monotonic()
    try:
        exp = experiment(work, args.rounds, args.tokens)
        for rep in range(1, args.repetitions + 1):
            results = work / f"results-{rep:02d}"
            run = harness("run", str(exp), "--results", str(results), "--targets-dir", str(private_targets_dir()),
                          "--scratch", str(work / "scratch"))
            if run.returncode != 0:
                print(run.stdout + run.stderr, file=sys.stderr)
                return run.returncode
            [one] = list(results.iterdir())
            gate = harness("gate", "--results", str(results), one.name, "--across", "build", "--baseline-value",
                           "baseline", "--metric", "decode_tps", "--max-regression", "5%", "--format", "json")
            if gate.returncode not in (0, 1):
                print(gate.stdout + gate.stderr, file=sys.stderr)
                return gate.returncode
            [cell] = json.loads(gate.stdout)["cells"]
            failed += gate.returncode == 1
            suspected += bool(cell["suspected"])
            improved += cell["verdict"] == "improvement"
            print(f"{rep:2d}: exit {gate.returncode} {cell['verdict']:<11} ratio {cell['ratio']:.3f} "
                  f"(95% CI {cell['ci']}) p {cell['p']:.2g} n {cell['n']}", flush=True)
            shutil.rmtree(results)
        n = args.repetitions
        low, high = binomtest(failed, n).proportion_ci(confidence_level=0.95, method="exact")
        print(f"A/A false positives: {failed} of {n} gates ({failed / n:.0%}, exact 95% CI {low:.0%}-{high:.0%}); "
              f"suspected (would be re-run by --confirm): {suspected}; improvements: {improved}; "
              f"{args.rounds} rounds per build, {args.tokens} tokens per run; wall {time.monotonic() - started:.0f} s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
