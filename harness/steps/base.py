"""What every step shares: the :class:`StepKind` base, the registry of steps by name, and the
structural check of an experiment's ``steps:`` list against that registry.

The controller side of a step validates its config, expands it into a concrete spec for the runner
(presets, file paths, cache-dependent options), estimates its duration, and turns the run directory
the runner produced into table rows. The target side lives in ``runner/steps``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from harness.config.validate import StrictModel
from harness.registry import Registry, check_implemented
from runner.contract import RunRecord

Rows = list[dict[str, Any]]


class StepKind(ABC):
    """A kind of step; ``estimate_s`` and ``runner_spec`` are what every kind must say (checked when it
    registers), the rest has a default."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictModel]]
    required_tools: ClassVar[tuple[str, ...]] = ()  # programs the target must have for this step
    engine: ClassVar[str | None] = None  # engine build the step runs (e.g. "llama.cpp"), made before the runs

    def engine_label(self, config: Any) -> str | None:
        """The engine a run of this step with ``config`` measures, as the runs table names it (runs of two
        engines are two variants even when the engine is not a matrix key)."""
        return self.engine

    def engines_used(self, config: Any) -> set[str]:
        """Engine builds a run of this step with ``config`` needs (a step that compares engines names several)."""
        return {self.engine} if self.engine else set()

    def env(self, config: Any) -> dict[str, str]:
        """What a run of this step with ``config`` adds to its engine process's environment (``env:``), as the
        manifest's run entry and the runs table record it; a step of several processes each with its own
        (equivalence's sides) records them in its own table instead."""
        return dict(getattr(config, "env", None) or {})

    def files_read(self, config: Any) -> list[str]:
        """Named files (keys of the experiment's files) whose cache state the run controls."""
        return [config.file] if getattr(config, "file", None) else []

    def builds_named(self, config: Any) -> set[str]:
        """Entries of the experiment's ``builds:`` the config names itself (an equivalence side's ``build:``), beside
        the cell's own build (``Cell.build``)."""
        return set()

    def check(self, config: Any, experiment: Any) -> str | tuple[tuple[str | int, ...], str] | None:
        """What is wrong with a validated config in this experiment (a policy, not a type), or None; a tuple
        names the place within the step's config too (its line in the error)."""
        return None

    def path_problem(self, path: str) -> str | None:
        """Why this step's program cannot be given ``path`` (a file it reads), or None."""
        return None

    @abstractmethod
    def estimate_s(self, config: Any, file_sizes: dict[str, int]) -> float:
        """Seconds one run of this step with ``config`` takes (the plan's estimate)."""

    @abstractmethod
    def runner_spec(self, config: Any, files: dict[str, str], cache: str) -> dict[str, Any]:
        """The step's part of the runner's spec: concrete options, files by path, the cache condition."""

    def controller_spec(self, config: Any, local_files: dict[str, str]) -> dict[str, Any]:
        """More of the step's spec, read from the controller's copies of the named files (``local_files``: name ->
        path here; a model's layout for replay), merged over ``runner_spec``'s; nothing for most steps."""
        return {}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        """Table rows from one run directory (``run_id`` is added by the caller)."""
        return {}


STEPS: Registry[StepKind] = Registry("step")


def register_step(cls: type[StepKind]) -> type[StepKind]:
    check_implemented(cls, "step")
    STEPS.add(cls.name, cls(), cls)
    return cls


# Keys a step item may carry beside its kind: which matrix keys it varies over (the others stay at
# the baseline cell's values), a cache condition of its own, and a label (run ids, the runs table's step_label,
# variant labels of other engines' runs: two configurations of one step told apart by name).
STEP_ITEM_KEYS = {"over", "cache", "label"}
_CACHES = ("cold", "warm", "both", "none")
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,39}")


def step_kind(item: dict[str, Any]) -> str:
    return next(key for key in item if key not in STEP_ITEM_KEYS)


def check_steps(experiment: Any, doc: Any) -> None:
    """Structural checks; the typed validation happens per matrix cell in ``harness.campaign.plan``."""
    for index, item in enumerate(experiment.steps):
        loc = ("steps", index)
        kinds = [key for key in item if key not in STEP_ITEM_KEYS] if isinstance(item, dict) else []
        if len(kinds) != 1:
            raise doc.error(loc, "each step is a mapping with one key, the step kind, e.g. '- fio: {...}' "
                                 "(optionally with over: [matrix keys] and cache:)")
        kind = kinds[0]
        if kind not in STEPS:
            raise doc.error(loc + (kind,), STEPS.unknown_message(kind))
        config = item[kind]
        if config is not None and not isinstance(config, dict):
            raise doc.error(loc + (kind,), "expected a mapping of step options")
        over = item.get("over", list(experiment.matrix))
        if not isinstance(over, list) or any(key not in experiment.matrix for key in over):
            raise doc.error(loc + ("over",), f"expected a list of matrix keys (have: {', '.join(experiment.matrix)})")
        if item.get("cache", "both") not in _CACHES:
            raise doc.error(loc + ("cache",), f"expected one of {', '.join(_CACHES)}")
        label = item.get("label")
        if label is not None and (not isinstance(label, str) or not _LABEL.fullmatch(label)):
            raise doc.error(loc + ("label",), "expected a short name of letters, digits and '-' (e.g. bmoe-cache256)")
        labels = [other.get("label") for other in experiment.steps if isinstance(other, dict)]
        if label is not None and labels.count(label) > 1:
            raise doc.error(loc + ("label",), f"label {label!r} is used by another step")
