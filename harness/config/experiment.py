"""The experiment YAML: what to run, where, in which order, with which collectors.

Pure data: this module validates the file's shape and nothing else. The names it holds (step kinds,
collectors, engines) and the emulation block are checked against their registries later, by
``harness.campaign.resolve``, so a new kind needs no change here.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.config.rounds import Rounds
from harness.config.validate import StrictModel, validate
from harness.config.validity import ValidityLimits, off_to_none
from harness.config.yamlsrc import YamlDoc, load_yaml
from harness.units import parse_size

Scalar = str | int | float | bool
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RESERVED_PARAMS = {"run_id", "target", "step", "cache", "round", "repeat", "status", "index"}
# the matrix axis whose values name entries of builds: (an ordinary axis otherwise: labels, tables, over:)
BUILD_AXIS = "build"


class SynthSpec(StrictModel):
    """A synthetic qwen3moe GGUF (``harness model synth``), made once and cached by its parameters."""

    size: str | int | None = Field(default=None, description="target file size, e.g. 1.6G")
    layers: Annotated[int, Field(ge=1)] | None = None
    experts: Annotated[int, Field(ge=1)] = 8
    used: Annotated[int, Field(ge=1)] = 2
    hidden: Annotated[int, Field(ge=64)] = 256
    ff: Annotated[int, Field(ge=32)] | None = None
    quant: Literal["f16", "q8_0", "q4_0"] = "f16"
    seed: int = 0
    routing: str = Field(default="narrow", pattern=r"^(narrow|uniform|zipf(:\d+(\.\d+)?)?)$",
                         description="router choice distribution: narrow (noise), uniform, zipf (the exponent most "
                                     "like real models') or zipf:S, e.g. zipf:1.1")

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | int | None) -> str | int | None:
        if value is not None and parse_size(value) <= 0:
            raise ValueError("expected a positive size like 1.6G")
        return value


class FileSpec(StrictModel):
    """A file the steps read: an existing ``path`` on the target, one to ``create`` in scratch, or a
    ``synth``etic MoE model."""

    path: str | None = None
    create: str | int | None = Field(default=None, description="size of a data file to create, e.g. 1G")
    synth: SynthSpec | None = None

    @field_validator("create")
    @classmethod
    def _size(cls, value: str | int | None) -> str | int | None:
        if value is not None and parse_size(value) <= 0:
            raise ValueError("expected a positive size like 1G")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> FileSpec:
        if sum(v is not None for v in (self.path, self.create, self.synth)) != 1:
            raise ValueError("give exactly one of 'path' (an existing file), 'create' (a size) or 'synth'")
        return self

    @property
    def create_bytes(self) -> int | None:
        return None if self.create is None else parse_size(self.create)


class EngineSpec(StrictModel):
    """How to build an engine: ``source`` (for llama.cpp {sdist: ...} | {git: URL, commit: SHA} | {path: DIR};
    none: the engine's default, filled in by ``harness.engines``), extra cmake flags, patches (paths relative
    to the experiment file). ``optional``: when the engine's source cannot be had here (no network, no archive),
    the campaign says so in one line and runs without the steps that use it, instead of failing."""

    source: dict[str, str] | None = None
    cmake: list[str] | None = None
    patches: list[str] = Field(default_factory=list)
    optional: bool = False


class BuildSpec(EngineSpec):
    """One named build of ``builds:``: an ``engine`` (llama.cpp, bigmoeonedge or a declared one) and how to build
    it (EngineSpec's fields: source, cmake, patches). Two builds are two cells of the ``build`` axis; two builds with
    the same inputs are one build in the cache."""

    engine: str

    def engine_spec(self) -> EngineSpec:
        """The build as the engine's builders take it (without ``engine``)."""
        return EngineSpec(**self.model_dump(exclude={"engine"}))


class FioPolicy(StrictModel):
    """What custom fio jobs may do. ``allow_exec``: options that run commands or write files (exec_prerun,
    write_*_log, ...); off unless the experiment turns it on, and the manifest records it."""

    allow_exec: bool = False


class EnergyConfig(StrictModel):
    """``energy:``: ``idle_s`` seconds of the board left idle, with the collectors on, before the first run on each
    target: its mean power is the baseline the energy table subtracts (docs/methodology.md, Energy). Off (no idle
    window, the *above idle* columns null) unless given."""

    idle_s: Annotated[float, Field(gt=0, le=3600)] | None = None


class Experiment(StrictModel):
    name: Annotated[str, Field(pattern=_NAME.pattern)]
    description: str = ""
    targets: list[str] = Field(default_factory=lambda: ["local"], min_length=1)
    expect: dict[str, Any] = Field(default_factory=dict)
    model: str | FileSpec | None = None
    files: dict[str, FileSpec] = Field(default_factory=dict)
    engine: dict[str, EngineSpec] = Field(default_factory=dict)  # engine name -> spec (names: harness.engines)
    # named builds (name -> engine + how to build it), selected per cell by the `build` matrix axis
    builds: dict[str, BuildSpec] = Field(default_factory=dict)
    # engines declared in YAML for the run step: name -> a declaration file (relative to this file) or inline
    # (validated by harness.steps.declared.resolve_declared, with this file's lines)
    engines: dict[str, str | dict[str, Any]] = Field(default_factory=dict)
    matrix: dict[str, list[Scalar]] = Field(default_factory=dict)
    # the cell every other cell is compared with (same session, same round); default: the first cell
    baseline: dict[str, Scalar] | None = None
    repeat: Annotated[int, Field(ge=1)] = 1
    # a fixed number, or {min, max, until}: rounds until every cell's interval is tight (harness.config.rounds)
    rounds: Rounds = 1
    cache: Literal["cold", "warm", "both", "none"] = "cold"
    collect: dict[str, dict[str, Any] | None] | list[str] = Field(default_factory=list)
    # board emulation (harness.emulation.controller): memory / I/O budget and read_ahead_kb; values may be templates
    emulate: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = Field(min_length=1)
    # the controller's watchdog: a runner without DONE this long after its start is stopped and the run
    # failed (default: the step's own timeout + RUN_SLACK_S for cache preparation and collectors)
    run_timeout_s: Annotated[float, Field(gt=0)] | None = None
    fio: FioPolicy = Field(default_factory=FioPolicy)
    # interference limits: a run beyond one is marked perturbed and left out of summaries (off: none)
    validity: ValidityLimits | None = Field(default_factory=ValidityLimits)
    energy: EnergyConfig = Field(default_factory=EnergyConfig)

    @field_validator("validity", mode="before")
    @classmethod
    def _validity_off(cls, value: Any) -> Any:
        return off_to_none(value)

    @field_validator("matrix")
    @classmethod
    def _matrix_names(cls, value: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for key in value:
            if not _NAME.match(key) or key in RESERVED_PARAMS:
                raise ValueError(f"matrix key {key!r} is reserved or not a plain name")
        return value

    @model_validator(mode="after")
    def _baseline_in_matrix(self) -> Experiment:
        for key, value in (self.baseline or {}).items():
            if key not in self.matrix:
                raise ValueError(f"baseline names {key!r}, which is not a matrix key")
            if value not in self.matrix[key]:
                raise ValueError(f"baseline {key}={value!r} is not one of the matrix values {self.matrix[key]}")
        return self

    @model_validator(mode="after")
    def _model_is_a_file(self) -> Experiment:
        if self.model is not None and "model" in self.files:
            raise ValueError("'model' is given twice: as model: and as files.model")
        return self

    def build_of(self, params: dict[str, Any]) -> str | None:
        """The build a cell with matrix values ``params`` selects: its ``build`` value, the only build when there
        is no ``build`` axis, or None (no ``builds:``: every step runs its engine as ``engine:`` configures it)."""
        if not self.builds:
            return None
        if BUILD_AXIS in params:
            return str(params[BUILD_AXIS])
        return next(iter(self.builds)) if len(self.builds) == 1 else None

    def named_files(self) -> dict[str, FileSpec]:
        files = dict(self.files)
        if isinstance(self.model, str):
            files["model"] = FileSpec(path=self.model)
        elif self.model is not None:
            files["model"] = self.model
        return files

    def collectors(self) -> dict[str, dict[str, Any]]:
        if isinstance(self.collect, list):
            return {name: {} for name in self.collect}
        return {name: dict(cfg or {}) for name, cfg in self.collect.items()}


def matrix_cells(matrix: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the matrix values (the cartesian product), in the matrix's key order."""
    keys = list(matrix)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(matrix[k] for k in keys))]


class LoadedExperiment:
    """An experiment plus the source it came from (for error lines and the manifest copy)."""

    def __init__(self, experiment: Experiment, doc: YamlDoc, path: Path, text: str) -> None:
        self.experiment, self.doc, self.path, self.text = experiment, doc, path, text
        # builds whose source --build-source replaced (harness.config.buildsource): name -> the source given
        self.build_sources: dict[str, dict[str, str]] = {}


def load_experiment(path: Path) -> LoadedExperiment:
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "an experiment must be a mapping with name, steps, ...")
    experiment = validate(Experiment, doc.data, doc)
    for name in experiment.files:
        # a file name becomes <scratch>/<name>.bin: with '/' or '..' it would create (and delete) a file anywhere
        if not _NAME.match(name) or ".." in name:
            raise doc.error(("files", name), f"file name {name!r} is not a plain name (letters, digits, '_', '-', "
                                             "'.'; no '/' or '..'): the harness creates it in its scratch directory")
    check_builds(experiment, doc)
    # steps, collectors, engines and emulation are checked against their registries by
    # harness.campaign.resolve.resolve_experiment, before anything is planned or run
    return LoadedExperiment(experiment, doc, path, path.read_text(encoding="utf-8"))


def check_builds(experiment: Experiment, doc: YamlDoc) -> None:
    """``builds:`` against the matrix: plain names, a ``build`` axis whose values all name a build (unless there is
    exactly one build), one line at the place. Engines are checked against the registries by resolve."""
    for name in experiment.builds:
        if not _NAME.match(name):
            raise doc.error(("builds", name), f"build name {name!r} is not a plain name (letters, digits, '_', '-', "
                                              "'.'): it is a matrix value and a word of cell labels")
    values = experiment.matrix.get(BUILD_AXIS)
    if not experiment.builds:
        return  # no builds: `build` is an ordinary axis, as it always was
    if values is None:
        if len(experiment.builds) > 1:
            raise doc.error(("builds",), f"{len(experiment.builds)} builds but no '{BUILD_AXIS}' matrix axis to "
                                         f"choose between them (add it to matrix:, with values among "
                                         f"{', '.join(experiment.builds)})")
        return
    for index, value in enumerate(values):
        if not isinstance(value, str) or value not in experiment.builds:
            raise doc.error(("matrix", BUILD_AXIS, index), f"build {value!r} is not in builds: (have: "
                                                           f"{', '.join(experiment.builds)})")
