"""What every part of a campaign reads: the plan and its experiment, the targets, the set id, what preflight
prepared (engine builds, synthetic models), the runs a resumed set keeps or adopts, and where messages go (a stop
request is stopping.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.campaign.plan import Plan, PlannedRun
from harness.collectors import collector_configs
from harness.config.experiment import Experiment
from harness.config.target import Target
from harness.engines.declaredsource import DeclaredSource
from harness.errors import ConfigError
from harness.results.store import new_set_id


class Progress(Protocol):
    # called again with a larger total when rounds until tight add a round (harness.campaign.rounds)
    def target_started(self, target: str, total: int) -> None: ...
    def run_started(self, target: str, run: PlannedRun) -> None: ...
    def run_finished(self, target: str, run: PlannedRun, status: str, error: str | None) -> None: ...
    def message(self, text: str) -> None: ...


class QuietProgress:
    def target_started(self, target: str, total: int) -> None: ...
    def run_started(self, target: str, run: PlannedRun) -> None: ...
    def run_finished(self, target: str, run: PlannedRun, status: str, error: str | None) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class CampaignContext:
    plan: Plan
    targets: list[Target]
    progress: Progress
    scratch: str | None = None  # --scratch: where created data files go (None: under the target's workdir)
    set_id: str = ""
    collectors: dict[str, Any] = field(default_factory=dict)
    builds: dict[str, Any] = field(default_factory=dict)  # engine name -> BuildInfo (controller-side builds)
    engine_specs: dict[str, Any] = field(default_factory=dict)  # engine name -> EngineSpec the steps need
    build_specs: dict[str, Any] = field(default_factory=dict)  # build name -> EngineSpec (registered engines)
    declared_sources: dict[str, DeclaredSource] = field(default_factory=dict)  # build name -> its prepared tree
    # target name -> build name -> the builder's record of a named build (builds:) made for that target
    target_builds: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    synth: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # file name -> (path, description)
    keep: set[tuple[str, str]] = field(default_factory=set)  # (target, run_id) already done in a resumed set
    resumed_running: set[tuple[str, str]] = field(default_factory=set)  # runs a dead controller left running
    reclaim: bool = False  # --resume: take back a lease (labgrid place) this user's dead controller left locked
    retry_perturbed: int = 0  # --retry-perturbed N: a perturbed run is measured again at its round's end, N times

    def __post_init__(self) -> None:
        loaded = self.plan.experiment
        self.collectors = self.collectors or collector_configs(self.experiment, loaded.doc)
        self.set_id = self.set_id or new_set_id(self.experiment.name, loaded.text)

    @property
    def experiment(self) -> Experiment:
        return self.plan.experiment.experiment

    @property
    def resumed(self) -> bool:
        """A resumed set: a run's directory on a target may hold an earlier attempt."""
        return bool(self.keep or self.resumed_running)

    def file_error(self, name: str, message: str) -> ConfigError:
        """A one-line error at a named file's place in the experiment file (``model:`` or ``files: NAME: path``)."""
        loc = ("model",) if name == "model" and self.experiment.model else ("files", name, "path")
        return self.plan.experiment.doc.error(loc, message)
