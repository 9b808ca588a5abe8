"""What the controller sends the runner for one run (spec.json, the run spec of runner/contract.py), and how long
the run may take."""

from __future__ import annotations

from typing import Any

from harness.boards.session import TargetSession
from harness.campaign import builds
from harness.campaign.context import CampaignContext
from harness.campaign.plan import PlannedRun
from harness.collectors import COLLECTORS
from harness.emulation import controller as emulation
from harness.steps import STEPS
from harness.steps.declared import RunStep
from runner.contract import CONTRACT_VERSION, EngineLocation, RunSpec

# what a run may take beyond its step's own timeout (cache drop or prefetch of a big model, emulation set-up,
# collectors starting and stopping) before the controller's watchdog stops it
RUN_SLACK_S = 900.0


def build_spec(ctx: CampaignContext, session: TargetSession, run: PlannedRun, files: dict[str, str],
               remote_dir: str) -> RunSpec:
    step = STEPS[run.step]
    return {
        "contract": CONTRACT_VERSION,  # a runner of another major version refuses the spec (runner/contract.py)
        "run_id": run.run_id, "set_id": ctx.set_id, "target": session.target.name,
        "params": run.params, "cache": run.cache, "round": run.round, "repeat": run.repeat,
        "cache_files": [files[name] for name in step.files_read(run.cell.config)],
        "block_device": session.target.block_device,
        "native_bin": session.native_bin,
        "collectors": [COLLECTORS[name].runner_spec(cfg) for name, cfg in ctx.collectors.items()],
        "step": step_spec(ctx, session, run, files),
        "engines": engines_on(ctx, session, run),
        "emulate": emulation.runner_spec(ctx.experiment, run.params, ctx.plan.experiment.doc),
        "run_dir": remote_dir,
    }


def step_spec(ctx: CampaignContext, session: TargetSession, run: PlannedRun, files: dict[str, str]) -> dict[str, Any]:
    """The step's part of the spec, with the run's named builds placed: an equivalence side's ``bin_dir``, a
    declared engine's build key and source (``harness.campaign.builds``, ``harness.campaign.declared``)."""
    step = STEPS[run.step]
    spec = {"kind": run.step, **step.runner_spec(run.cell.config, files, run.cache)}
    # the controller's copies: a synthetic model's cached file here, a path model where the target shares our files
    spec.update(step.controller_spec(run.cell.config, {**files, **{name: p for name, (p, _) in ctx.synth.items()}}))
    builds.place_sides(ctx, session, spec)
    if run.step == RunStep.name and run.cell.build:
        spec.update(ctx.target_builds[session.target.name][run.cell.build].get("run_fields") or {})
    return spec


def engines_on(ctx: CampaignContext, session: TargetSession, run: PlannedRun) -> dict[str, EngineLocation]:
    """Where the engine binaries are on this target: built there (boards) or here (local); the run's own build
    (``builds:``) in its engine's place."""
    return builds.locations(ctx, session, run)


def run_limit_s(ctx: CampaignContext, spec: RunSpec | None) -> float:
    """The watchdog's limit: run_timeout_s, or the step's own timeouts plus RUN_SLACK_S (the default step timeout
    when the spec is not known: an adopted run's unreadable spec.json)."""
    if ctx.experiment.run_timeout_s is not None:
        return ctx.experiment.run_timeout_s
    step = spec["step"] if spec is not None else {}
    return float(step.get("timeout_s") or 3600.0) + float(step.get("health_timeout_s") or 0.0) + RUN_SLACK_S
