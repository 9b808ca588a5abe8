"""What the BigMoeOnEdge cells add to ``make demo`` (target: at most 3 minutes once the engine is built).

Runs experiments/quickstart.yaml cut down to its bmoe steps (same model, budget, cache condition, rounds and
prompts) on a private local target and prints the wall time of the campaign and of each run. The engine's build
must be cached already (it is the first demo's cost, not the cells'): the script refuses to start a build.

    HARNESS_ENGINE_SOURCES=DIR .venv/bin/python bench/bmoe_demo_cells.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cells_only(text: str) -> str:
    exp = yaml.safe_load(text)
    exp["name"] = "quickstart-bmoe-cells"
    exp["steps"] = [item for item in exp["steps"] if "bmoe" in item]
    return yaml.safe_dump(exp, sort_keys=False)


def main() -> int:
    from harness.campaign.prepare import BUILD_CACHE
    from harness.engines import ENGINES
    from harness.engines.bigmoeonedge.engine import TARGETS
    from runner import enginebuild
    from tests.helpers import private_targets_dir

    engine = ENGINES["bigmoeonedge"]
    spec = engine.spec(None, {})
    reason = engine.unavailable(spec)
    if reason:
        print(f"cannot measure: {reason}")
        return 2
    tree = engine.prepare(spec, BUILD_CACHE / "sources")
    patches = [(str(p), enginebuild.sha256_file(str(p))) for p in tree.patches]
    key = enginebuild.cache_key(tree.identity, engine.flags(tree, list(engine.default_flags)),
                                [sha for _p, sha in patches], enginebuild.compiler_identity())
    if enginebuild.load_cached(str(BUILD_CACHE / key), TARGETS) is None:
        print("the bmoe-cli build is not cached yet: run the demo (or a bmoe campaign) once first")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cells.yaml"
        path.write_text(cells_only((REPO / "experiments" / "quickstart.yaml").read_text()))
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--target", "local", "--targets-dir",
                               str(private_targets_dir()), "--results", str(Path(tmp) / "results")],
                              cwd=REPO, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-2000:])
            return 1
        (result,) = [p for p in (Path(tmp) / "results").iterdir() if p.is_dir()]
        runs = json.loads((result / "manifest.json").read_text())["runs"]
        summary = summarize(result)
    print(f"bmoe cells: {len(runs)} runs, campaign wall time {wall:.0f} s (target <= 180 s)")
    print(summary)
    return 0


def summarize(result: Path) -> str:
    """Per variant: decode tok/s, the device's and the engine's MiB per decoded token, their ratio (medians)."""
    import pandas as pd

    runs = pd.read_parquet(result / "tables" / "runs.parquet")[["run_id", "variant", "step_duration_s"]]
    requests = pd.read_parquet(result / "tables" / "requests.parquet").merge(runs, on="run_id")
    mib = 2**20
    table = requests.groupby("variant").agg(
        requests=("decode_tps", "size"), decode_tps=("decode_tps", "median"),
        dev_mib_per_token=("decode_dev_read_bytes_per_token", lambda s: s.median() / mib),
        engine_mib_per_token=("engine_read_bytes_per_token", lambda s: s.median() / mib),
        dev_to_engine=("decode_dev_to_engine_read_ratio", "median"))
    steps = runs.groupby("variant")["step_duration_s"].sum().rename("step_s_total")
    return table.join(steps).to_string(float_format=lambda v: f"{v:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
