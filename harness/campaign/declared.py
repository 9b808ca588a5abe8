"""Declared engines in a campaign: each one the runs use is built on the target and probed there before the first
run (``python3 -m runner.steps.declared prepare``), its probes' raw output kept as the target's facts
(``declared.<engine>.probe.<name>``), and its declaration recorded whole, with its sha256, in the manifest."""

from __future__ import annotations

import json
from typing import Any

from harness.boards.session import TargetSession
from harness.boards.transports import put_bytes
from harness.campaign.context import CampaignContext
from harness.engines.errors import BuildError
from harness.steps.declared import DECLARED, RunStep

PREPARE_TIMEOUT_SLACK_S = 900.0  # probes (a profile pass over the model) beyond the build's own limit


def _first_cells(ctx: CampaignContext) -> dict[str, Any]:
    """engine name -> the first planned run's cell that uses it (its model and values fill the probes)."""
    cells: dict[str, Any] = {}
    for run in ctx.plan.runs:
        if run.step == RunStep.name:
            cells.setdefault(run.cell.config.engine, run.cell)
    return cells


def manifest_entries(ctx: CampaignContext) -> dict[str, Any]:
    """The declarations the runs use, whole: origin, text, its sha256, the validated form."""
    return {name: DECLARED[name].record() for name in sorted(_first_cells(ctx))}


def prepare_on_target(ctx: CampaignContext, session: TargetSession, paths: dict[str, str]) -> dict[str, Any]:
    """Build and probe every declared engine the runs use on this target; the facts to record."""
    facts: dict[str, Any] = {}
    for name, cell in sorted(_first_cells(ctx).items()):
        declaration = DECLARED[name].declaration
        spec = RunStep().runner_spec(cell.config, paths, cell.cache)
        spec.update({"workdir": session.workdir, "probes": {k: list(v) for k, v in declaration.probes.items()}})
        remote = f"{session.workdir}/cache/declared/prepare-{name}.json"
        session.transport.run(["mkdir", "-p", f"{session.workdir}/cache/declared"])
        put_bytes(session.transport, json.dumps(spec).encode(), remote)
        if declaration.build is not None:
            ctx.progress.message(f"{session.target.name}: engine {name}: building (cached after the first time)")
        timeout = (declaration.build.timeout_s if declaration.build else 0.0) + PREPARE_TIMEOUT_SLACK_S
        done = session.transport.run([session.python, "-m", "runner.steps.declared", "prepare", remote],
                                     cwd=session.runner_root, timeout=timeout)
        if done.returncode != 0:
            reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise BuildError(f"target {session.target.name}: engine {name}: {reason}")
        facts.update(engine_facts(name, json.loads(done.stdout)))
    return facts


def engine_facts(name: str, prepared: dict[str, Any]) -> dict[str, Any]:
    """Facts of one prepared engine: where its build is, whether it was built now, and each probe's raw output."""
    facts: dict[str, Any] = {f"declared.{name}.build_dir": prepared.get("build_dir"),
                             f"declared.{name}.built_now_s": prepared.get("built_now_s")}
    for probe, found in (prepared.get("probes") or {}).items():
        facts[f"declared.{name}.probe.{probe}"] = found["stdout"]
        facts[f"declared.{name}.probe.{probe}.returncode"] = found["returncode"]
        if found["returncode"] != 0:
            facts[f"declared.{name}.probe.{probe}.stderr"] = found["stderr"]
    return facts
