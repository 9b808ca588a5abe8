"""Everything checked and prepared before a result set exists: expectation names, engines built and models
synthesized, each target's lease, session, tools, collectors, workdir space, named files and emulation. A
campaign that cannot run stops here (exit 2), leaving nothing behind."""

from __future__ import annotations

import threading

from harness.boards.session import TargetSession, open_session
from harness.boards.transports import kind_of
from harness.campaign import files, space
from harness.campaign.context import CampaignContext
from harness.collectors.platform import preflight as collector_preflight
from harness.config.target import Target
from harness.emulation import controller as emulation
from harness.errors import ToolMissingError
from harness.steps import STEPS


def preflight(ctx: CampaignContext, lease_wait_s: float) -> list[TargetSession]:
    """Everything that can be checked before a result set exists: names, tools, reachability."""
    check_expectation_names(ctx)
    prepare_engines_and_models(ctx)
    tools = sorted({tool for run in ctx.plan.runs for tool in STEPS[run.step].required_tools})
    sessions: list[TargetSession] = []
    try:
        for target in ctx.targets:
            sessions.append(open_target(ctx, target, lease_wait_s))
            check_target(ctx, sessions[-1], tools)
        prepare_remote(ctx, sessions)
        ctx.targets = [session.target for session in sessions]  # resolved: labgrid places named, addresses known
    except BaseException:
        for session in sessions:
            session.close()
        raise
    return sessions


def open_target(ctx: CampaignContext, target: Target, lease_wait_s: float) -> TargetSession:
    # the board's lease comes first: nothing on a board changes while another campaign holds it
    session = open_session(target, lease_for=ctx.set_id, lease_wait_s=lease_wait_s, on_wait=ctx.progress.message,
                           reclaim=ctx.reclaim)
    if hasattr(session.transport, "on_event"):  # remote transports report reconnects
        session.transport.on_event = ctx.progress.message
    return session


def check_target(ctx: CampaignContext, session: TargetSession, tools: list[str]) -> None:
    target = session.target
    facts = session.platform.probe(session, [], tools)
    # a required collector that cannot run on this target stops here; optional ones are skipped
    collector_preflight(target.name, ctx.collectors, facts, ctx.progress.message)
    space.check_workdir_space(session)
    files.check_directories(ctx, session)
    missing = [tool for tool in tools if not facts.get(f"tool_{tool}")]
    if missing:
        raise ToolMissingError(f"target {target.name}: {', '.join(missing)} not installed "
                               f"(needed by the experiment's steps; apt-get install {' '.join(missing)})")
    files.check_existing(ctx, session)
    # a machine that cannot emulate the board refuses here, before a set exists (exit 2)
    paths = [s.path for s in ctx.experiment.named_files().values() if s.path is not None]
    emulation.preflight(session, ctx.experiment, ctx.plan.experiment.doc, paths + [ctx.scratch or session.workdir])


def check_expectation_names(ctx: CampaignContext) -> None:
    from harness.boards.platforms import PLATFORMS

    doc = ctx.plan.experiment.doc
    for target in ctx.targets:
        known = PLATFORMS[target.platform].expectations
        for name in ctx.experiment.expect:
            if name not in known:
                raise doc.error(("expect", name), f"unknown expectation {name!r} for platform "
                                f"{target.platform} (known: {', '.join(known)})")


def prepare_engines_and_models(ctx: CampaignContext) -> None:
    """Build the engines the steps use and synthesize models, once, cached across campaigns.

    The controller builds only for a target that shares its files (local); boards build their own
    (``prepare_remote``)."""
    from harness.campaign.builds import build_locally, builds_needed, default_engines, prepare_declared_sources
    from harness.campaign.prepare import build_engines, drop_unavailable, engines_needed, synth_model

    # each engine as engine: configures it, where a run does not run a named build of it instead
    ctx.engine_specs = engines_needed(ctx.experiment, default_engines(ctx.experiment, ctx.plan.runs))
    dropped = drop_unavailable(ctx.engine_specs, ctx.progress.message)
    if dropped:  # before the set exists: the manifest's plan and every table simply lack those runs
        ctx.plan.runs = [run for run in ctx.plan.runs if not STEPS[run.step].engines_used(run.cell.config) & dropped]
    ctx.build_specs = builds_needed(ctx.experiment, ctx.plan.runs)
    local = [t.name for t in ctx.targets if kind_of(t).shares_controller_files]
    if (ctx.engine_specs or ctx.build_specs) and local:
        files.check_local_models(ctx, local[0])  # a wrong model is told before a build of minutes, not after it
        ctx.builds = build_engines(ctx.engine_specs, ctx.plan.experiment.path.parent, ctx.progress.message)
        build_locally(ctx, ctx.build_specs, local)
    ctx.declared_sources = prepare_declared_sources(ctx)  # trees for declared engines' builds, here, once
    for name, spec in ctx.experiment.named_files().items():
        if spec.synth is not None:
            path, info = synth_model(spec.synth, ctx.progress.message)
            ctx.synth[name] = (str(path), info)


def prepare_remote(ctx: CampaignContext, sessions: list[TargetSession]) -> None:
    """Engines built on each board and synthetic models pushed to it, boards in parallel (a build on a
    board takes minutes); both are skipped when the board already has them."""
    from harness.campaign.builds import build_on_board
    from harness.campaign.prepare import prepare_target

    remote = [s for s in sessions if not s.transport.shares_controller_files]
    if not remote or not (ctx.engine_specs or ctx.synth or ctx.build_specs):
        return
    experiment_dir = ctx.plan.experiment.path.parent
    errors: list[BaseException] = []

    def prepare(session: TargetSession) -> None:
        try:
            prepare_target(session, ctx.engine_specs, ctx.synth, experiment_dir, ctx.progress.message)
            build_on_board(ctx, session, ctx.build_specs)
        except BaseException as exc:  # noqa: BLE001 - re-raised below in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(s,), daemon=True) for s in remote]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
