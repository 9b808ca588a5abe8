"""Resolve a loaded experiment against the registries: the step between reading the file (pure data,
``harness.config.experiment``) and planning it (``harness.campaign.plan``).

Every step kind, collector and engine the experiment names must be registered, and its emulation block
must be valid in every matrix cell, so a typo fails with its file and line before anything runs.
"""

from __future__ import annotations

from pathlib import Path

from harness.collectors import check_collectors
from harness.config.experiment import LoadedExperiment, load_experiment
from harness.emulation.controller import check_emulation
from harness.engines import check_engines
from harness.steps import check_steps
from harness.steps.declared import resolve_declared


def resolve_experiment(loaded: LoadedExperiment) -> LoadedExperiment:
    """``loaded`` itself once every name in it is known (ConfigError with file:line otherwise)."""
    experiment, doc = loaded.experiment, loaded.doc
    check_steps(experiment, doc)
    check_collectors(experiment, doc)
    check_engines(experiment, doc)
    check_emulation(experiment, doc)
    resolve_declared(experiment, doc, loaded.path)  # the run step's declared engines
    return loaded


def load_resolved(path: Path) -> LoadedExperiment:
    """Read an experiment file and resolve it: what every command that plans or runs starts from."""
    return resolve_experiment(load_experiment(path))
