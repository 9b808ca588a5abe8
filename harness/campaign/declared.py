"""Declared engines in a campaign: each one the runs use is built on the target and probed there before the first
run (``python3 -m runner.steps.declared prepare``), its probes' raw output kept as the target's facts
(``declared.<engine>.probe.<name>``), and its declaration recorded whole, with its sha256, in the manifest.

A named build of a declared engine (``builds:``) is prepared the same way, once per target, from its source tree
(``harness.campaign.declaredsource``: here for a target that shares the controller's files, pushed as one archive
to a board); its facts are ``declared.<engine>[<build>]...`` and its identity goes to ``targets[T].builds``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.boards.session import TargetSession
from harness.boards.transports import put_bytes
from harness.campaign.context import CampaignContext
from harness.engines.errors import BuildError
from harness.steps.declared import DECLARED, RunStep

PREPARE_TIMEOUT_SLACK_S = 900.0  # probes (a profile pass over the model) beyond the build's own limit


def _first_cells(ctx: CampaignContext) -> dict[tuple[str, str | None], Any]:
    """(engine name, named build or None) -> the first planned run's cell that uses it (its model and values fill
    the probes)."""
    cells: dict[tuple[str, str | None], Any] = {}
    for run in ctx.plan.runs:
        if run.step == RunStep.name:
            cells.setdefault((run.cell.config.engine, run.cell.build), run.cell)
    return cells


def manifest_entries(ctx: CampaignContext) -> dict[str, Any]:
    """The declarations the runs use, whole: origin, text, its sha256, the validated form."""
    return {name: DECLARED[name].record() for name in sorted({name for name, _build in _first_cells(ctx)})}


def build_fields(ctx: CampaignContext, session: TargetSession, build: str | None) -> dict[str, Any]:
    """What a run step's spec says instead of the declaration's own build when it runs the named ``build``: the
    build's key (declaration + source + patches) and where its source tree is on this target."""
    source = ctx.declared_sources.get(build) if build else None
    if source is None or source.tree is None:
        return {}
    key = source.build_key(DECLARED[source.engine].declaration)
    if session.transport.shares_controller_files:
        return {"build_key": key, "source": {"dir": source.tree}}
    remote = f"{session.workdir}/cache/declared/sources/{source.key}.tar.gz"
    if not session.transport.exists(remote):  # sent once per board; a cut push never has the final name
        from harness.engines.llamacpp.remote import _push_tree

        ctx.progress.message(f"{session.target.name}: build {build}: pushing its source to {remote}")
        session.transport.run(["mkdir", "-p", os.path.dirname(remote)])
        _push_tree(session.transport, Path(source.tree), remote + ".partial")
        session.transport.run(["mv", "-f", remote + ".partial", remote])
    return {"build_key": key, "source": {"archive": remote}}


def prepare_on_target(ctx: CampaignContext, session: TargetSession, paths: dict[str, str]) -> dict[str, Any]:
    """Build and probe every declared engine the runs use on this target; the facts to record."""
    facts: dict[str, Any] = {}
    for (name, build), cell in sorted(_first_cells(ctx).items(), key=lambda item: (item[0][0], item[0][1] or "")):
        declaration = DECLARED[name].declaration
        spec = RunStep().runner_spec(cell.config, paths, cell.cache)
        fields = build_fields(ctx, session, build)
        spec.update(fields)
        spec.update({"workdir": session.workdir, "probes": {k: list(v) for k, v in declaration.probes.items()}})
        label = name if build is None else f"{name}[{build}]"
        remote = f"{session.workdir}/cache/declared/prepare-{name}{'' if build is None else '-' + build}.json"
        session.transport.run(["mkdir", "-p", f"{session.workdir}/cache/declared"])
        put_bytes(session.transport, json.dumps(spec).encode(), remote)
        if declaration.build is not None:
            ctx.progress.message(f"{session.target.name}: engine {label}: building (cached after the first time)")
        timeout = (declaration.build.timeout_s if declaration.build else 0.0) + PREPARE_TIMEOUT_SLACK_S
        done = session.transport.run([session.python, "-m", "runner.steps.declared", "prepare", remote],
                                     cwd=session.runner_root, timeout=timeout)
        if done.returncode != 0:
            reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise BuildError(f"target {session.target.name}: engine {label}: {reason}")
        prepared = json.loads(done.stdout)
        facts.update(engine_facts(label, prepared))
        if build is not None:
            record_build(ctx, session.target.name, build, fields, prepared)
    return facts


def record_build(ctx: CampaignContext, target: str, build: str, fields: dict[str, Any],
                 prepared: dict[str, Any]) -> None:
    """The named build's record for the manifest (``harness.campaign.builds.identity`` reads it), with what each
    run's spec says of it (``run_fields``: :func:`build_fields`, asked once per target)."""
    source = ctx.declared_sources.get(build)
    binary = prepared.get("binary") or ""
    ctx.target_builds.setdefault(target, {})[build] = {
        "source": source.identity if source else {}, "commit": source.commit if source else None,
        "patches": source.patches if source else [], "key": fields.get("build_key") or prepared.get("build_key"),
        "run_fields": fields,
        "cached": prepared.get("built_now_s") is None, "build_dir": prepared.get("build_dir"),
        "binaries": {os.path.basename(binary): binary} if binary else {},
        "binary_sha256": {os.path.basename(binary): prepared.get("binary_sha256") or ""} if binary else {}}


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
