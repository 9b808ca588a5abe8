"""Resolve a loaded experiment against the registries: the step between reading the file (pure data,
``harness.config.experiment``) and planning it (``harness.campaign.plan``).

Every step kind, collector and engine the experiment names must be registered, and its emulation block
must be valid in every matrix cell, so a typo fails with its file and line before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.collectors import check_collectors
from harness.config.declared_engine import Declared, placeholders
from harness.config.experiment import Experiment, LoadedExperiment, load_experiment
from harness.config.rounds import RoundsSpec
from harness.config.yamlsrc import YamlDoc
from harness.emulation.controller import check_emulation
from harness.engines import ENGINES, check_engines
from harness.results.metrics import METRICS
from harness.steps import check_steps
from harness.steps.declared import resolve_declared


def resolve_experiment(loaded: LoadedExperiment) -> LoadedExperiment:
    """``loaded`` itself once every name in it is known (ConfigError with file:line otherwise)."""
    experiment, doc = loaded.experiment, loaded.doc
    check_steps(experiment, doc)
    check_collectors(experiment, doc)
    check_engines(experiment, doc)
    check_emulation(experiment, doc)
    declared = resolve_declared(experiment, doc, loaded.path)  # the run step's declared engines
    check_build_engines(experiment, doc, declared)
    check_rounds(experiment, doc)
    return loaded


def check_rounds(experiment: Experiment, doc: YamlDoc) -> None:
    """rounds: {until: {metric}} names a metric the harness knows (harness/results/metrics.py)."""
    if isinstance(experiment.rounds, RoundsSpec) and experiment.rounds.until.metric not in METRICS:
        raise doc.error(("rounds", "until", "metric"), f"unknown metric {experiment.rounds.until.metric!r} "
                                                        f"(known: {', '.join(METRICS)})")


def check_build_engines(experiment: Experiment, doc: YamlDoc, declared: dict[str, Declared]) -> None:
    """Every build names an engine the harness builds (registered) or a declared one that has a build: block."""
    for name, build in experiment.builds.items():
        loc: tuple[Any, ...] = ("builds", name, "engine")
        if build.engine in ENGINES:
            continue
        if build.engine not in declared:
            known = sorted(set(ENGINES) | set(declared))
            raise doc.error(loc, f"build {name}: unknown engine {build.engine!r} (known: {', '.join(known)}; a "
                                 "declared engine is one of engines/*.yaml or this file's engines:)")
        if declared[build.engine].declaration.build is None:
            raise doc.error(loc, f"build {name}: declared engine {build.engine} has no build: block (its binary is "
                                 "prebuilt), so there is nothing to build")
        commands = declared[build.engine].declaration.build
        if build.source is None and commands is not None and "source_dir" in placeholders(commands.commands):
            raise doc.error(("builds", name), f"build {name}: engine {build.engine}'s build commands use "
                                              "{source_dir}: give the build a source: ({git: URL, commit: SHA} or "
                                              "{path: DIR})")
        if build.cmake is not None:
            raise doc.error(("builds", name, "cmake"), f"build {name}: cmake: is for llama.cpp and BigMoeOnEdge; a "
                                                       f"declared engine's build: commands are its own")


def load_resolved(path: Path) -> LoadedExperiment:
    """Read an experiment file and resolve it: what every command that plans or runs starts from."""
    return resolve_experiment(load_experiment(path))
