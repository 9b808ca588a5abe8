"""The ``equivalence`` step: the same prompts decoded greedily under two sides, outputs compared token for token.

    steps:
      - equivalence:
          a: {engine: llama.cpp, args: [-t, 2], memory: 512M}     # mmap, streamed under a 512 MiB budget
          b: {engine: llama.cpp, args: [-t, 2, --no-mmap]}        # fully resident, no budget of its own
          prompts: experiments/prompts/quickstart.jsonl           # {"prompt": ...} per line, or an inline list
          n_predict: 16
        cache: none                                               # each side starts cold by itself

A side names its ``engine`` (one with a greedy generator on the runner: ``runner/steps/generators.py``), the
engine's own ``args``, the ``model`` (a named file, ``model`` by default) and optionally ``memory``: a budget of
its own (a cgroup with memory.max; inside the run's ``emulate: {memory}`` budget when there is one).
Decoding is greedy (``temperature`` 0) with a fixed ``seed``; a side may set its own temperature or seed, which
is how one checks that the comparison can fail. Both sides run one after the other, each from a cold page cache.

Outputs are compared as token ids where both engines give them (llama-server's ``return_tokens``), otherwise as
text, byte for byte (the UTF-8 of each text; a token piece that is no valid UTF-8 is U+FFFD on both sides, as
llama-server's JSON cannot carry it). Table ``equivalence``: one row per prompt (``identical``,
``first_divergence_pos``: a token index, or a byte offset when compared as text; ``a_token``/``b_token`` there: ids
as text, or a short excerpt of each text; ``a_n``/``b_n`` tokens or bytes; both outputs; each side's settings and
whether it started cold). The run record's summary holds the verdict (``pass``/``fail``) and the first divergence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator

from harness.config.validate import StrictModel
from harness.emulation.controller import MIN_MEMORY_BYTES
from harness.parsers import ParseError
from harness.steps.base import Rows, StepKind, register_step
from harness.steps.llamacpp import Prompts
from harness.steps.requests import Arg, refuse_owned
from harness.units import format_size, parse_size
from runner.contract import RunRecord
from runner.steps.generators import GENERATORS

# what each engine's generator sets itself: refused in a side's args
OWNED_ARGS = {
    "llama.cpp": ("-m", "--model", "--host", "--port"),
    "bigmoeonedge": ("-m", "--model", "-p", "--prompt", "-n", "--n-predict", "--seed", "--temp", "--progress",
                     "--session"),
}


class SideConfig(StrictModel):
    engine: str = "llama.cpp"
    build: str | None = None  # an entry of the experiment's builds: (of this engine); none: the cell's build
    model: str = "model"
    args: list[Arg] = Field(default_factory=list)
    memory: str | int | None = Field(default=None, description="this side's memory budget, e.g. 512M; none: none")
    seed: int | None = None  # the step's seed unless set
    temperature: Annotated[float, Field(ge=0)] = 0.0  # greedy; > 0 only to show that a divergence is found

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        if value not in GENERATORS:
            raise ValueError(f"no greedy generator for engine {value!r} (known: {', '.join(sorted(GENERATORS))})")
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | int | None) -> str | int | None:
        if value is not None and parse_size(value) < MIN_MEMORY_BYTES:
            raise ValueError(f"expected a memory budget of at least {format_size(MIN_MEMORY_BYTES)}, like 512M")
        return value

    @model_validator(mode="after")
    def _owned(self) -> SideConfig:
        refuse_owned(self.args, tuple(OWNED_ARGS.get(self.engine, ())), self.engine)
        return self


class EquivalenceConfig(StrictModel):
    a: SideConfig
    b: SideConfig
    prompts: Annotated[Prompts, Field(min_length=1)]  # given as a JSONL path or inline
    n_predict: Annotated[int, Field(ge=1)] = 16
    seed: int = 42
    # both sides decode exactly n_predict tokens where the engine allows it, so a stop is not mistaken for a match
    ignore_eos: bool = True
    health_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    timeout_s: Annotated[float, Field(gt=0)] | None = None


@register_step
class EquivalenceStep(StepKind):
    name = "equivalence"
    Config = EquivalenceConfig
    # llama.cpp for the model checks every llama.cpp step gets (a GGUF file); the builds the sides need are
    # engines_used: the campaign makes each and puts its bin_dir in the spec
    engine: ClassVar[str | None] = "llama.cpp"

    def engines_used(self, config: EquivalenceConfig) -> set[str]:
        return {config.a.engine, config.b.engine}

    def builds_named(self, config: EquivalenceConfig) -> set[str]:
        return {side.build for side in (config.a, config.b) if side.build is not None}

    def check(self, config: EquivalenceConfig, experiment: Any) -> tuple[tuple[str | int, ...], str] | None:
        builds = getattr(experiment, "builds", None) or {}
        for name, side in (("a", config.a), ("b", config.b)):
            if side.build is None:
                continue
            if side.build not in builds:
                return (name, "build"), f"side {name}: build {side.build!r} is not in builds: " \
                                        f"(have: {', '.join(builds) or 'none'})"
            if builds[side.build].engine != side.engine:
                return (name, "build"), f"side {name}: build {side.build} is a {builds[side.build].engine} build, " \
                                        f"the side's engine is {side.engine}"
        return None

    def files_read(self, config: EquivalenceConfig) -> list[str]:
        return list(dict.fromkeys([config.a.model, config.b.model]))

    def estimate_s(self, config: EquivalenceConfig, file_sizes: dict[str, int]) -> float:
        per_side = 10.0 + len(config.prompts) * (1.0 + config.n_predict * 0.1)
        return 2 * per_side

    def runner_spec(self, config: EquivalenceConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        sides = {}
        for name, side in (("a", config.a), ("b", config.b)):
            sides[name] = {"engine": side.engine, "model": files[side.model], "args": list(side.args),
                           "memory_bytes": None if side.memory is None else parse_size(side.memory),
                           "seed": config.seed if side.seed is None else side.seed,
                           "temperature": side.temperature, "ignore_eos": config.ignore_eos}
            if side.build is not None:  # the campaign adds the build's bin_dir (harness.campaign.spec)
                sides[name]["build"] = side.build
        return {"sides": sides, "prompts": list(config.prompts), "n_predict": config.n_predict,
                "health_timeout_s": config.health_timeout_s,
                "timeout_s": config.timeout_s or self.estimate_s(config, {}) * 10 + 1200}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "equivalence.jsonl"
        if not output.exists():
            return {}
        sides = (record.get("spec") or {}).get("step", {}).get("sides") or {}
        measured = (record.get("summary") or {}).get("sides") or {}
        rows = []
        for number, line in enumerate(output.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(equivalence_row(json.loads(line), sides, measured))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ParseError(f"{output.name}: bad comparison record ({exc})", line=number) from None
        return {"equivalence": rows}


def equivalence_row(rec: dict[str, Any], sides: dict[str, Any],
                    measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``equivalence`` row: the comparison of one prompt's two outputs, with each side's settings and, from the
    run record, the model's residency when the side started (cold unless another process held it mapped)."""
    row = {key: rec[key] for key in ("prompt_index", "prompt", "compared_as", "identical", "first_divergence_pos",
                                     "a_token", "b_token", "a_n", "b_n")}
    for name in ("a", "b"):
        tokens = rec.get(f"{name}_tokens")
        row[f"{name}_output"] = json.dumps(tokens) if row["compared_as"] == "ids" else rec.get(f"{name}_text")
        side = sides.get(name) or {}
        row[f"{name}_engine"] = side.get("engine")
        row[f"{name}_args"] = " ".join(str(arg) for arg in side.get("args") or [])
        row[f"{name}_memory_bytes"] = side.get("memory_bytes")
        row[f"{name}_temperature"] = side.get("temperature")
        row[f"{name}_seed"] = side.get("seed")
        cache = ((measured or {}).get(name) or {}).get("cache") or {}
        row[f"{name}_residency_before_pct"] = cache.get("residency_before_pct")
        row[f"{name}_cold_reached"] = cache.get("cold_reached")
    return row
