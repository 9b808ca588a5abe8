"""Expand an experiment into the ordered list of runs.

Cells are steps x matrix (cartesian product) x cache conditions. Rounds interleave the whole cell
list (A B A B ...), never all-A-then-all-B, because baselines drift between and within sessions
(2.26-2.60 tok/s for one setting across sessions in the seed article). ``repeat`` repeats a cell
back to back inside a round.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from harness.config.experiment import BUILD_AXIS, LoadedExperiment, matrix_cells
from harness.config.rounds import first_rounds
from harness.config.target import Target
from harness.config.template import render
from harness.config.validate import validate
from harness.errors import ConfigError
from harness.results.manifest import RunEntry
from harness.steps import STEPS, step_kind
from harness.units import parse_size


@dataclass(frozen=True)
class Cell:
    step_index: int
    step: str
    label: str  # the step kind, numbered when an experiment has several steps of one kind
    config: Any  # the step's validated, rendered Config
    params: dict[str, Any]
    cache: str
    # the entry of builds: the step's engine runs in this cell; None: the engine as engine: configures it (an
    # experiment without builds:, a step without an engine, or one of another engine than the cell's build)
    build: str | None = None


@dataclass(frozen=True)
class PlannedRun:
    index: int
    run_id: str
    cell: Cell
    round: int
    repeat: int
    estimate_s: float

    @property
    def step(self) -> str:
        return self.cell.step

    @property
    def cache(self) -> str:
        return self.cell.cache

    @property
    def params(self) -> dict[str, Any]:
        return self.cell.params


@dataclass
class Plan:
    experiment: LoadedExperiment
    runs: list[PlannedRun] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)  # in plan order: what a further round runs
    sizes: dict[str, int] = field(default_factory=dict)  # the data files' sizes the estimates used

    @property
    def estimate_s(self) -> float:
        return sum(r.estimate_s for r in self.runs)

    @property
    def most_runs(self) -> int:
        """The runs per target at most: the plan's, or with rounds until tight every cell to ``max``."""
        rounds = self.experiment.experiment.rounds
        return len(self.runs) if isinstance(rounds, int) else len(self.runs) // rounds.min * rounds.max


# More cells than a lab could measure in a month; a larger matrix is a typo or a hostile file.
MAX_MATRIX_CELLS = 10_000


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(value)).strip("-") or "x"


def build_plan(loaded: LoadedExperiment, file_sizes: dict[str, int] | None = None) -> Plan:
    exp, doc = loaded.experiment, loaded.doc
    for key, values in exp.matrix.items():
        if not values:
            raise doc.error(("matrix", key), "the matrix expands to zero runs: this list is empty")
    cells_asked = math.prod(len(values) for values in exp.matrix.values())
    if cells_asked > MAX_MATRIX_CELLS:
        raise doc.error(("matrix",), f"the matrix asks for {cells_asked} cells (the product of its lists); at most "
                                     f"{MAX_MATRIX_CELLS} are planned: split the experiment")
    caches = ["cold", "warm"] if exp.cache == "both" else [exp.cache]
    files = exp.named_files()
    sizes = dict(file_sizes or {})
    for name, spec in files.items():
        if spec.create_bytes is not None:
            sizes.setdefault(name, spec.create_bytes)
        elif spec.synth is not None and spec.synth.size is not None:
            sizes.setdefault(name, parse_size(spec.synth.size))

    kinds = [step_kind(item) for item in exp.steps]
    baseline = {key: (exp.baseline or {}).get(key, values[0]) for key, values in exp.matrix.items()}
    cells: list[Cell] = []
    for step_index, item in enumerate(exp.steps):
        kind = kinds[step_index]
        raw = item[kind]
        label = item.get("label") or (kind if kinds.count(kind) == 1 else f"{kind}{kinds[:step_index + 1].count(kind)}")
        loc = ("steps", step_index, kind)
        step = STEPS[kind]
        step_caches = caches
        if "cache" in item:
            step_caches = ["cold", "warm"] if item["cache"] == "both" else [item["cache"]]
        # keys the step does not vary over stay at the baseline cell's values (e.g. a fio ladder
        # needs no threads axis), so every run still has a complete, comparable set of parameters
        over = item.get("over", list(exp.matrix))
        matrix = {key: (values if key in over else [baseline[key]]) for key, values in exp.matrix.items()}
        for params in matrix_cells(matrix):
            rendered = render(raw or {}, params, doc, loc)
            config = validate(step.Config, rendered, doc, loc)
            check_cell(step, config, loaded, loc)
            build = cell_build(step, config, params, loaded, loc, BUILD_AXIS in over)
            for cache in step_caches:
                cells.append(Cell(step_index, kind, label, config, params, cache, build))
    if not cells:
        raise ConfigError("the experiment expands to zero runs", file=doc.source)

    plan = Plan(loaded, cells=cells, sizes=sizes)
    if exp.energy.idle_s is not None:  # the idle baseline first on every target, before anything warms the board
        idle = STEPS["idle"]
        cell = Cell(-1, "idle", "idle", idle.Config.model_validate({"seconds": exp.energy.idle_s}), baseline, "none")
        plan.runs.append(PlannedRun(1, "0001-idle", cell, 1, 1, idle.estimate_s(cell.config, sizes) + _RUN_OVERHEAD_S))
    for round_ in range(1, first_rounds(exp.rounds) + 1):
        plan.runs.extend(round_runs(plan, cells, round_, len(plan.runs) + 1))
    return plan


def round_runs(plan: Plan, cells: list[Cell], round_: int, first_index: int) -> list[PlannedRun]:
    """One interleaved round of ``cells`` (in plan order, each ``repeat`` times), numbered from ``first_index``:
    the plan's rounds, and a round rounds-until-tight adds (harness.campaign.rounds)."""
    repeat = plan.experiment.experiment.repeat
    runs: list[PlannedRun] = []
    for cell in cells:
        for rep in range(1, repeat + 1):
            index = first_index + len(runs)
            parts = [f"{index:04d}", cell.label, *(_slug(v) for v in cell.params.values()), cell.cache,
                     f"r{round_}"] + ([f"x{rep}"] if repeat > 1 else [])
            estimate = STEPS[cell.step].estimate_s(cell.config, plan.sizes) + _RUN_OVERHEAD_S
            runs.append(PlannedRun(index, "-".join(parts), cell, round_, rep, estimate))
    return runs


def step_engines(step: Any, config: Any) -> set[str]:
    """The engines a run of this step measures: the builds it needs, or the declared engine it names."""
    used = set(step.engines_used(config))
    label = step.engine_label(config)
    return used or ({label} if label else set())


def cell_build(step: Any, config: Any, params: dict[str, Any], loaded: LoadedExperiment,
               loc: tuple[str | int, ...], varies: bool) -> str | None:
    """The build this cell's step runs (``Cell.build``). A step that varies over ``build`` but whose engine is not
    the cell's build's is refused in one line naming both; one that does not vary over it runs the baseline build
    when that is of its engine, else its engine as ``engine:`` configures it."""
    exp = loaded.experiment
    name = exp.build_of(params)
    engines = step_engines(step, config)
    if name is None or not engines:
        return None
    engine = exp.builds[name].engine
    if engine in engines:
        return name
    if varies and BUILD_AXIS in exp.matrix:
        raise loaded.doc.error(loc, f"step {loc[-1]} runs {', '.join(sorted(engines))}, but its cell's build "
                                    f"{name!r} is a {engine} build: give the step over: without {BUILD_AXIS}, or "
                                    f"a build of its engine")
    return None


def check_cell(step: Any, config: Any, loaded: LoadedExperiment, loc: tuple[str | int, ...]) -> None:
    """A cell's config against the step's policy and the experiment's files: one line at its place."""
    exp, doc, files = loaded.experiment, loaded.doc, loaded.experiment.named_files()
    refused = step.check(config, exp)
    if refused:  # a message, or (the place within the step's config, a message)
        where, message = refused if isinstance(refused, tuple) else ((), refused)
        raise doc.error(loc + where, message)
    for name in step.files_read(config):
        if name not in files:
            known = ", ".join(files) or "none"
            raise doc.error(loc + ("file",), f"names file {name!r}, which is not in files: (have: {known})")
        problem = files[name].path is not None and step.path_problem(files[name].path)
        if problem:  # a file made in scratch is checked at preflight, once scratch is known
            raise doc.error(("model",) if name == "model" and exp.model else ("files", name, "path"), problem)


# Cache preparation, collector start/stop and the pull; measured on this machine at well under 2 s.
_RUN_OVERHEAD_S = 1.5


def planned(target: Target, run: PlannedRun) -> RunEntry:
    step = STEPS[run.step]
    entry: RunEntry = {"run_id": run.run_id, "index": run.index, "target": target.name, "step": run.step,
                       "step_label": run.cell.label, "engine": step.engine_label(run.cell.config),
                       "cache": run.cache, "round": run.round, "repeat": run.repeat,
                       "params": run.params, "estimate_s": round(run.estimate_s, 1), "status": "pending"}
    env = step.env(run.cell.config)
    if env:  # only where a step sets one: the manifest of a set without env: is as before
        entry["env"] = env
    return entry
