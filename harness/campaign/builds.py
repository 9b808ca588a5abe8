"""Named builds in a campaign (the experiment's ``builds:``): which ones the runs need, each built once per target
into the content-hashed cache (here for a target that shares the controller's files, on the board otherwise), where
each is on a target, and the identity the manifest records for it (``targets[T].builds[NAME]``).

A build of llama.cpp or BigMoeOnEdge goes through that engine's builder (the one ``engine:`` uses), so a build
whose inputs equal another's is the same cache entry. A build of a declared engine is made by its declaration's
build commands on the target (``harness.campaign.declared``) from a source tree prepared here
(``harness.engines.declaredsource``): its identity is recorded when the target has built it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.campaign.context import CampaignContext
from harness.campaign.plan import PlannedRun
from harness.config.experiment import EngineSpec, Experiment
from harness.engines import ENGINES
from harness.engines.declaredsource import DeclaredSource, prepare_tree
from harness.results.manifest import BuildIdentity
from harness.steps import STEPS
from runner.contract import EngineLocation


def builds_of(run: PlannedRun) -> set[str]:
    """The named builds one run needs: its cell's and any its step's config names (an equivalence side's)."""
    named = set(STEPS[run.step].builds_named(run.cell.config))
    return named | ({run.cell.build} if run.cell.build else set())


def builds_needed(experiment: Experiment, runs: Iterable[PlannedRun]) -> dict[str, EngineSpec]:
    """name -> the EngineSpec its engine's builder takes (defaults filled in), for the builds the runs need of
    registered engines (llama.cpp, bigmoeonedge); declared engines' builds are ``declared_builds_needed``."""
    names = sorted(set().union(set(), *(builds_of(run) for run in runs)))
    found = {}
    for name in names:
        build = experiment.builds[name]
        if build.engine in ENGINES:
            found[name] = ENGINES[build.engine].spec(build.engine_spec(), experiment.engine)
    return found


def default_engines(experiment: Experiment, runs: Iterable[PlannedRun]) -> set[str]:
    """The engines runs need as ``engine:`` configures them: every engine a step uses but the one its cell's
    build replaces (an experiment without ``builds:``: every engine, as before builds existed)."""
    needed: set[str] = set()
    for run in runs:
        used = set(STEPS[run.step].engines_used(run.cell.config))
        if run.cell.build:
            used.discard(experiment.builds[run.cell.build].engine)
        needed |= used
    return needed


def identity(engine: str, record: dict[str, Any], cached: bool) -> BuildIdentity:
    """What the manifest says of one build on one target, from the builder's record (local or board)."""
    sums = record.get("binary_sha256") or {}
    return {"engine": engine, "source": record.get("source") or {}, "commit": record.get("commit"),
            "patches": [{"path": p["path"], "sha256": p["sha256"]} for p in record.get("patches") or []],
            "flags": list(record.get("cmake_flags") or record.get("flags") or []), "key": str(record.get("key")),
            "cached": cached,
            "binaries": {name: {"path": path, "sha256": sums.get(name, "")}
                         for name, path in (record.get("binaries") or {}).items()}}


def build_locally(ctx: CampaignContext, specs: dict[str, EngineSpec], local_targets: list[str]) -> None:
    """Build (or find cached) every named build here, once, for the targets that share this machine's files."""
    from harness.campaign.prepare import BUILD_CACHE

    experiment_dir = ctx.plan.experiment.path.parent
    records: dict[str, dict[str, Any]] = {}
    for name, spec in specs.items():
        engine = ctx.experiment.builds[name].engine
        ctx.progress.message(f"build {name} ({engine}): building from {spec.source} (cached after the first time)")
        info = ENGINES[engine].build(spec, experiment_dir, BUILD_CACHE, ctx.progress.message)
        records[name] = {**info.to_dict(), "cached": bool(info.cached)}
    for target in local_targets:
        ctx.target_builds.setdefault(target, {}).update(records)


def build_on_board(ctx: CampaignContext, session: Any, specs: dict[str, EngineSpec]) -> None:
    """Build (or find built) every named build on a board, into the board's cache (same keys as here)."""
    from harness.campaign.prepare import BUILD_CACHE

    experiment_dir = ctx.plan.experiment.path.parent
    records = ctx.target_builds.setdefault(session.target.name, {})
    for name, spec in specs.items():
        engine = ctx.experiment.builds[name].engine
        ctx.progress.message(f"{session.target.name}: build {name} ({engine})")
        record = ENGINES[engine].build_on_target(session, spec, experiment_dir, BUILD_CACHE / "sources",
                                                 ctx.progress.message)
        records[name] = {**record, "cached": not record.get("built", True)}


def identities(ctx: CampaignContext, target: str) -> dict[str, BuildIdentity]:
    """Every named build made for ``target`` (registered and declared engines), as the manifest records them."""
    return {name: identity(ctx.experiment.builds[name].engine, record, bool(record.get("cached")))
            for name, record in sorted(ctx.target_builds.get(target, {}).items())}


def bin_dir(record: dict[str, Any]) -> str:
    return str(Path(next(iter(record["binaries"].values()))).parent)


def locations(ctx: CampaignContext, session: Any, run: PlannedRun) -> dict[str, EngineLocation]:
    """Where the engines of ``run`` are on this target: each engine's ``engine:`` build, except the run's own
    build, which takes its engine's place."""
    builds = session.engines or {name: build.to_dict() for name, build in ctx.builds.items()}
    found: dict[str, EngineLocation] = {name: {"bin_dir": bin_dir(build), "commit": build.get("commit")}
                                        for name, build in builds.items()}
    name = run.cell.build
    if name and ctx.experiment.builds[name].engine in ENGINES:
        record = ctx.target_builds[session.target.name][name]
        found[ctx.experiment.builds[name].engine] = {"bin_dir": bin_dir(record), "commit": record.get("commit")}
    return found


def place_sides(ctx: CampaignContext, session: Any, step: dict[str, Any]) -> None:
    """An equivalence side that names a build runs that build's binaries (its ``bin_dir``, which the runner
    prefers to the run's engine location)."""
    for side in (step.get("sides") or {}).values():
        if side.get("build"):
            side["bin_dir"] = bin_dir(ctx.target_builds[session.target.name][side["build"]])


def prepare_declared_sources(ctx: CampaignContext) -> dict[str, DeclaredSource]:
    """build name -> its prepared source, for every named build of a declared engine the runs use."""
    from harness.campaign.prepare import BUILD_CACHE

    names = sorted({name for run in ctx.plan.runs for name in builds_of(run)
                    if ctx.experiment.builds[name].engine not in ENGINES})
    experiment_dir = ctx.plan.experiment.path.parent
    found = {}
    for name in names:
        build = ctx.experiment.builds[name]
        patches = [(experiment_dir / p).resolve() for p in build.patches]
        if patches and not build.source:
            raise ctx.plan.experiment.doc.error(("builds", name, "patches"), f"build {name}: patches need a "
                                                "source: (git + commit, or path) to be applied to")
        if not build.source:
            found[name] = DeclaredSource(build.engine, None, "")
            continue
        ctx.progress.message(f"build {name} ({build.engine}): preparing its source {json.dumps(build.source)}")
        found[name] = prepare_tree(build.engine, build.source, patches, BUILD_CACHE)
    return found
