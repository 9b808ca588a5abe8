"""``harness estimate`` without ``--set`` or ``--ladder``: measure the target's fio ladder on the model file first,
as a small campaign of experiments/storage-baseline.yaml's fio jobs (its result set stays in --results, for
``--set`` next time)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.analysis.ladder import Ladder
from harness.commands import estimating
from harness.commands.common import err_console as console  # stdout keeps --format json clean
from harness.errors import InfrastructureError

# the ladder of experiments/storage-baseline.yaml (the fio step's presets)
JOBS = ["randread-64k-qd1", "randread-64k-qd2", "randread-64k-qd4", "randread-128k-qd8", "read-1m-seq"]


def experiment_text(target: str, model_path: str, runtime_s: float) -> str:
    """The one-run experiment: fio's ladder, read-only, on the model file as the target sees it."""
    doc = {"name": "estimate-ladder", "description": "the fio ladder harness estimate needs, on the model file",
           "targets": [target], "files": {"model": {"path": model_path}}, "cache": "cold", "rounds": 1,
           "steps": [{"fio": {"file": "model", "jobs": JOBS, "runtime_s": runtime_s}}]}
    return json.dumps(doc, indent=1) + "\n"  # JSON is YAML: no second writer of experiment files


def run_ladder(target: str, model_path: str, results: Path, targets_dir: Path | None, runtime_s: float) -> Ladder:
    """Run the ladder campaign on ``target`` and read its ladder back through the loader."""
    from harness.boards.inventory import load_targets, select_targets
    from harness.campaign.orchestrator import Campaign
    from harness.campaign.plan import build_plan
    from harness.campaign.resolve import load_resolved
    from harness.commands.run import RichProgress
    from harness.results.loader import load_result_set

    with tempfile.TemporaryDirectory(prefix="harness-estimate-") as where:
        experiment = Path(where) / "estimate-ladder.yaml"
        experiment.write_text(experiment_text(target, model_path, runtime_s))
        loaded = load_resolved(experiment)
        chosen = select_targets([target], load_targets(targets_dir))
        console.print(f"measuring {target}'s fio ladder on {model_path} ({len(JOBS)} jobs of {runtime_s:g} s)",
                      highlight=False)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[run]}"))
        with Progress(*columns, console=console, transient=True) as progress:
            result = Campaign(build_plan(loaded), chosen, results, progress=RichProgress(progress)).run()
    if not result.complete or set(result.statuses) - {"ok"}:
        raise InfrastructureError(f"the fio ladder on {target} did not complete ({result.path}): "
                                  f"{', '.join(f'{n} {s}' for s, n in sorted(result.statuses.items()))}")
    console.print(f"ladder measured: result set {result.path} (give it as --set next time)", highlight=False)
    return estimating.set_ladder(load_result_set(result.path), target)
