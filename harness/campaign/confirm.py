"""A second look at suspected regressions: the set's own experiment, only some of its cells, N more rounds.

``harness gate --confirm N`` calls this when a cell looks like a regression. The cells (a step of one matrix cell
and cache condition, named by one of the set's runs) are planned again from the set's experiment, in N
interleaved rounds, and run on the same targets as a new result set beside the original, whose manifest says
``confirms: <set id>``. The caller then decides on both sets' observations together. Anything that keeps the
runs from being measured (a board unreachable, a lease lost, a run not ok) is an InfrastructureError (exit 3):
a confirmation that did not happen is neither a regression nor a pass.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.boards.inventory import load_targets, targets_of_set
from harness.boards.lease import DEFAULT_WAIT_S
from harness.campaign.orchestrator import Campaign, CampaignResult
from harness.campaign.plan import Plan, build_plan
from harness.campaign.resolve import load_resolved
from harness.config.buildsource import with_recorded_sources
from harness.config.experiment import LoadedExperiment
from harness.errors import HarnessError, InfrastructureError, UsageError
from harness.results import INCOMPLETE_SUFFIX
from harness.results.loader import is_result_set, read_manifest
from harness.results.manifest import Manifest
from harness.results.store import ResultSetWriter

# a planned cell to re-run: step label, params (JSON, sorted keys), cache; not results.cell.CellKey, which names
# a measured cell (target, engine, matrix values, cache)
PlanCell = tuple[str, str, str]


def experiment_of(set_path: Path, manifest: Manifest) -> LoadedExperiment:
    """The set's experiment: the original file when it is unchanged (relative paths in it still resolve as they
    did), else the copy the set stores; with the ``--build-source`` values the set was started with, so a
    confirmation builds and re-runs the builds the set measured (CI's two revisions), not the file's own sources."""
    original = Path(manifest["experiment"]["path"])
    unchanged = original.exists() and \
        hashlib.sha256(original.read_bytes()).hexdigest() == manifest["experiment"]["sha256"]
    copy = set_path / "experiment.yaml"
    if not unchanged and not copy.exists():
        raise UsageError(f"{set_path}: neither the experiment {original} (unchanged) nor its copy experiment.yaml "
                         "is there: cannot plan a confirmation")
    loaded = load_resolved(original if unchanged else copy)
    return with_recorded_sources(loaded, manifest.get("build_sources"))


def _plan_cell(step_label: str, params: dict[str, Any], cache: str) -> PlanCell:
    return step_label, json.dumps(params, sort_keys=True, default=str), cache


def confirmation_plan(loaded: LoadedExperiment, cells: set[PlanCell], rounds: int) -> Plan:
    """The experiment's runs of ``cells`` only, in ``rounds`` interleaved rounds, numbered from 1."""
    more = LoadedExperiment(loaded.experiment.model_copy(update={"rounds": rounds}), loaded.doc, loaded.path,
                            loaded.text)
    more.build_sources = dict(loaded.build_sources)  # recorded in the confirmation's manifest too
    chosen = [run for run in build_plan(more).runs if _plan_cell(run.cell.label, run.params, run.cache) in cells]
    plan = Plan(more)
    for index, run in enumerate(chosen, start=1):
        run_id = f"{index:04d}-{run.run_id.split('-', 1)[1]}"
        plan.runs.append(dataclasses.replace(run, index=index, run_id=run_id))
    return plan


def confirm(set_path: Path, run_ids: Iterable[tuple[str, str]], rounds: int, *, targets_dir: Path | None = None,
            progress: Any = None, lease_wait_s: float = DEFAULT_WAIT_S) -> Path:
    """Re-run the cells of the given (target, run id)s of the set at ``set_path``; the new set's path."""
    manifest = read_manifest(set_path)
    wanted = set(run_ids)
    entries = [run for run in manifest["runs"] if (run["target"], run["run_id"]) in wanted]
    cells = {_plan_cell(run["step_label"], run.get("params") or {}, run["cache"]) for run in entries}
    plan = confirmation_plan(experiment_of(set_path, manifest), cells, rounds)
    if not plan.runs:
        raise UsageError(f"{set_path}: none of the cells to confirm is in its experiment any more")
    names = sorted({run["target"] for run in entries})
    targets = targets_of_set([t for t in manifest["targets"] if t["name"] in names], load_targets(targets_dir),
                             source=str(set_path))  # a labgrid place picked by tags: the same place again
    campaign = Campaign(plan, targets, set_path.parent, scratch=manifest.get("scratch"), progress=progress,
                        lease_wait_s=lease_wait_s)
    result: CampaignResult | None = None
    try:
        result = campaign.run()
    except HarnessError as exc:
        raise InfrastructureError(f"confirmation of {manifest['set_id']} on {', '.join(names)}: {exc}") from exc
    finally:
        _mark_confirms(set_path.parent, campaign.ctx.set_id, manifest["set_id"], rounds)
    if result.interrupted:
        raise KeyboardInterrupt  # the user stopped it: the caller exits as an interrupted command does
    bad = {status: n for status, n in result.statuses.items() if status != "ok"}
    if not result.complete or bad:
        said = ", ".join(f"{n} {status}" for status, n in sorted(bad.items())) or "incomplete"
        raise InfrastructureError(f"confirmation set {result.path}: runs not ok ({said}); see its manifest")
    return result.path


def _mark_confirms(results_dir: Path, set_id: str, confirms: str, rounds: int) -> None:
    """Say in the new set's manifest which set it confirms (complete or not, once it exists)."""
    for path in (results_dir / set_id, results_dir / (set_id + INCOMPLETE_SUFFIX)):
        if is_result_set(path):
            ResultSetWriter.reopen(path, read_manifest(path)).mark_confirms(confirms, rounds)
