"""The gate's A/A false-positive rate when rounds run until the answer is tight: naive stopping vs the rule.

Simulated campaigns of two cells measured alike (A/A: baseline and candidate drawn from one distribution), one
observation per cell per round, interleaved. The distribution is a real set's: the decode tok/s of every request of
tests/data/harness/quickstart-4950e0 (llama-server on the synthetic model, 8 cells, 48 requests), each divided by
its cell's mean, resampled with replacement (seeded). Each campaign runs ``--min`` rounds, then one more at a time
until both cells' intervals are tight (harness.analysis.sequential.look, the campaign's own function) or ``--max``
rounds; then harness's gate (harness.analysis.gate.decide, decode_tps higher is better, 5 %) decides B against A.
Policies: ``fixed`` (always --max rounds, no looks), ``naive`` (each look at 95 %), ``bonferroni`` (each look at
1 - 0.05 / looks: the campaign's rule). Counted per policy: gate regressions (false positives: the CI job would
fail), improvements (the mirror image), insufficient verdicts (fewer than 5 values a side), the mean rounds run, and
how often a cell's stopping-time interval at its stated 95 % misses the distribution's true mean (what the rule
is for).

    nice -n 10 .venv/bin/python bench/rounds_aa.py [--campaigns 2000] [--min 2] [--max 12] [--target 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SET = REPO / "tests" / "data" / "harness" / "quickstart-4950e0" / "tables"


def relative_decode_tps() -> np.ndarray:
    """Every request's decode tok/s over its cell's mean (cell: the run's cache, read_ahead_kb and threads)."""
    requests = pd.read_parquet(SET / "requests.parquet")
    runs = pd.read_parquet(SET / "runs.parquet")
    cells = [c for c in ("cache", "read_ahead_kb", "threads") if c in runs]
    data = requests[["run_id", "decode_tps"]].merge(runs[["run_id", *cells]], on="run_id")
    return (data["decode_tps"] / data.groupby(cells)["decode_tps"].transform("mean")).to_numpy(dtype=float)


def campaign(rng: np.random.Generator, pool: np.ndarray, policy: str, args: argparse.Namespace) -> dict[str, object]:
    from harness.analysis.gate import decide
    from harness.analysis.sequential import Rule, halfwidth_pct, look, look_confidence, looks

    draws = rng.choice(pool, size=(2, args.max)) * 100  # A and B, one value per round
    n_looks = looks(args.min, args.max)
    rounds = args.max
    if policy != "fixed":
        for k in range(args.min, args.max + 1):
            tight = [look(draws[side, :k], k, target_pct=args.target, confidence=0.95, n_looks=n_looks,
                          rule=cast(Rule, policy)).tight for side in (0, 1)]
            if all(tight):
                rounds = k
                break
    a, b = draws[0, :rounds], draws[1, :rounds]
    decision = decide(a, b, higher_is_better=True, threshold=0.05, resamples=args.resamples,
                      seed=int(rng.integers(10**9)))
    level = look_confidence(0.95, n_looks, "naive" if policy == "fixed" else cast(Rule, policy))
    truth = float(pool.mean()) * 100
    missed = sum(abs(float(side.mean()) - truth) / float(side.mean()) * 100 > halfwidth_pct(side, level)
                 for side in (a, b))
    return {"verdict": decision.verdict, "rounds": rounds, "missed": missed}


def main() -> int:
    from scipy.stats import binomtest

    parser = argparse.ArgumentParser()
    parser.add_argument("--campaigns", type=int, default=2000)
    parser.add_argument("--min", type=int, default=2)
    parser.add_argument("--max", type=int, default=12)
    parser.add_argument("--target", type=float, default=5.0, help="ci_halfwidth_pct")
    parser.add_argument("--resamples", type=int, default=2000, help="the gate's bootstrap (its default: 2000)")
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    pool = relative_decode_tps()
    print(f"distribution: {len(pool)} requests of {SET.parent.name}, relative decode tok/s, CV "
          f"{pool.std(ddof=1) / pool.mean():.1%}; {args.campaigns} A/A campaigns per policy, rounds {args.min}-"
          f"{args.max}, ci_halfwidth_pct {args.target:g}, gate decode_tps 5 %")
    for policy in ("fixed", "naive", "bonferroni"):
        started = time.monotonic()
        rng = np.random.default_rng(args.seed)  # every policy sees the same draws
        out = pd.DataFrame([campaign(rng, pool, policy, args) for _ in range(args.campaigns)])
        n = args.campaigns
        false = int((out["verdict"] == "regression").sum())
        low, high = binomtest(false, n).proportion_ci(confidence_level=0.95, method="exact")
        missed = int(out["missed"].sum())
        mlow, mhigh = binomtest(missed, 2 * n).proportion_ci(confidence_level=0.95, method="exact")
        print(f"{policy:<10} gate false positives {false}/{n} = {false / n:.2%} (95% CI {low:.2%}-{high:.2%}); "
              f"improvements {int((out['verdict'] == 'improvement').sum())}; insufficient "
              f"{int((out['verdict'] == 'insufficient').sum())}; mean rounds {out['rounds'].mean():.1f}; "
              f"stopping-time interval missed the mean {missed}/{2 * n} = {missed / (2 * n):.2%} "
              f"(95% CI {mlow:.2%}-{mhigh:.2%}); {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
