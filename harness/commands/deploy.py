"""``harness deploy TARGET [--experiment FILE]``: push the runner and build its native tools on targets; with an
experiment, also build its engines on the boards and push its synthetic models (each skipped when unchanged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from harness.boards.inventory import load_targets, select_targets
from harness.boards.lease import DEFAULT_WAIT_S
from harness.boards.session import open_session
from harness.campaign.prepare import BUILD_CACHE, build_engines, prepare_target
from harness.campaign.resolve import load_resolved
from harness.commands.common import TargetsDirOpt, console
from harness.engines import ENGINES


def deploy(target: list[str] = typer.Argument(..., help="target name or tag:X"),
           targets_dir: Path = TargetsDirOpt,
           lease_wait: float = typer.Option(DEFAULT_WAIT_S, "--lease-wait", metavar="SECONDS",
                                            help="how long to wait for a board another campaign holds"),
           experiment: Path | None = typer.Option(None, "--experiment", "-e", metavar="FILE",
                                                  help="also build this experiment's engines on the boards and "
                                                       "push its synthetic models")) -> None:
    """Push runner/ to each target's workdir and build it there; unchanged files are not sent again."""
    needs = _experiment_needs(experiment) if experiment is not None else None
    for chosen in select_targets(target, load_targets(targets_dir)):
        # under the board's lease: a campaign running there must not see its runner change
        session = open_session(chosen, lease_for="deploy", lease_wait_s=lease_wait, on_wait=console.print)
        try:
            info = session.deployed
            if needs is not None and info is not None:
                prepare_target(session, *needs[:3], console.print)
                _report_engines(chosen.name, session.engines, session.models)
                _named_builds(needs[3], session, needs[2], chosen.name)
        finally:
            session.close()
        if info is None:
            console.print(f"{chosen.name}: runs from this checkout (local transport); native tools built")
            if needs is not None:  # this machine builds its own engines, into the local build cache
                for engine, build in build_engines(needs[0], needs[2], console.print).items():
                    what = "already built (cache hit)" if build.cached else "built"
                    console.print(f"{chosen.name}: {engine} {what}, key {build.key[:12]}, binaries in "
                                  f"{build.dir}/build/bin", highlight=False)
                _named_builds(needs[3], None, needs[2], chosen.name)
            continue
        sent = info["transferred_files"]
        what = f"{len(sent)} files sent ({info['transferred_bytes']} bytes)" if sent else "no files sent (unchanged)"
        built = "native tools built" if info["built"] else "no build needed"
        console.print(f"{chosen.name}: {what}, {info['removed_files'] and len(info['removed_files']) or 0} removed, "
                      f"{built}; tree {info['tree_hash'][:12]} in {info['remote_root']} "
                      f"({info['compiler']}) in {info['duration_s']:.2f} s", highlight=False)


Needs = tuple[dict[str, Any], dict[str, tuple[str, dict[str, Any]]], Path, dict[str, tuple[str, Any]]]


def _experiment_needs(path: Path) -> Needs:
    """The engines an experiment's steps use, its synthetic models (made here, cached) and its named builds of
    llama.cpp or BigMoeOnEdge (name -> (engine, EngineSpec)); a declared engine's builds are made by its campaign."""
    from harness.campaign.builds import builds_needed, default_engines
    from harness.campaign.plan import build_plan
    from harness.campaign.prepare import drop_unavailable, engines_needed, synth_model

    loaded = load_resolved(path)
    exp = loaded.experiment
    runs = build_plan(loaded).runs
    engines = engines_needed(exp, default_engines(exp, runs))
    drop_unavailable(engines, console.print)  # an optional engine that cannot be had here: one line, as run says
    models = {name: (str(p), info) for name, spec in exp.named_files().items() if spec.synth is not None
              for p, info in [synth_model(spec.synth, console.print)]}
    named = {name: (exp.builds[name].engine, spec) for name, spec in builds_needed(exp, runs).items()}
    return engines, models, path.resolve().parent, named


def _named_builds(named: dict[str, tuple[str, Any]], session: Any, experiment_dir: Path, target: str) -> None:
    """Each named build made (or found cached) here (``session`` None: a target sharing this machine's files) or
    on the session's board, in one line each."""
    for name, (engine, spec) in named.items():
        if session is None:
            info = ENGINES[engine].build(spec, experiment_dir, BUILD_CACHE, console.print)
            key, cached = info.key, info.cached
        else:
            record = ENGINES[engine].build_on_target(session, spec, experiment_dir, BUILD_CACHE / "sources",
                                                     console.print)
            key, cached = record["key"], not record["built"]
        what = "already built (cache hit)" if cached else "built"
        console.print(f"{target}: build {name} ({engine}) {what}, key {str(key)[:12]}", highlight=False)


def _report_engines(name: str, engines: dict[str, dict[str, Any]], models: dict[str, str]) -> None:
    for engine, build in engines.items():
        what = "built" if build["built"] else "already built (cache hit)"
        console.print(f"{name}: {engine} {what}, key {build['key'][:12]}, {build['transferred_bytes']} bytes sent, "
                      f"binaries in {build['dir']}/build/bin ({build['duration_s']:.1f} s)", highlight=False)
    for file, remote in models.items():
        console.print(f"{name}: model {file} at {remote}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(deploy)
