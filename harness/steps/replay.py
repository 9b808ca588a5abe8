"""The ``replay`` step: ``runner/native/replay`` reads a routing trace's experts from the model file, per token.

No engine: the program reads, per token and layer, the chosen experts' up, gate and down slices with one I/O
strategy and runs a compute emulation over the bytes (docs/methodology.md, "Replay")::

    steps:
      - replay: {strategy: pread, threads: "{threads}", bs: 64k, tokens: 64,
                 trace: {synth: {routing: zipf, reuse: 0.3, seed: 1}}}
      - replay: {strategy: direct-cache, cache_bytes: 256M, trace: traces/qwen3-decode.trace}

The layout (per layer and kind the tensor's offset and one expert's slice bytes) is read from the controller's
copy of the model (``inspect_gguf``); the trace is synthesized for the model's geometry, or read from a file and
checked against it. Tables: ``requests`` (one row per run, the llama-server columns where they mean the same:
marks, windows, ``decode_tps``, ``decode_dev_read_bytes_per_token``, plus ``replay_*``) and ``tokens`` (one row per
replayed token).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from harness.config.validate import StrictModel
from harness.errors import ConfigError
from harness.parsers import ParseError
from harness.steps.base import Rows, StepKind, register_step
from harness.steps.env import StepEnv, with_env
from harness.steps.replay_rows import replay_rows
from harness.traces.model import Trace, TraceError, read_trace
from harness.traces.synth import synth_trace
from harness.units import parse_size
from runner.contract import RunRecord

STRATEGIES = ("mmap", "mmap-willneed", "pread", "io_uring", "direct-cache", "prefetch")
KINDS = ("up", "gate", "down")
Size = str | int


class SynthTrace(StrictModel):
    routing: str = Field(default="uniform", pattern=r"^(uniform|zipf(:\d+(\.\d+)?)?)$")
    reuse: Annotated[float, Field(ge=0, le=1)] = 0.0
    seed: Annotated[int, Field(ge=0)] = 0


class TraceSource(StrictModel):
    synth: SynthTrace


class ReplayConfig(StrictModel):
    model: str = "model"
    trace: TraceSource | str = Field(default_factory=lambda: TraceSource(synth=SynthTrace()))
    tokens: Annotated[int, Field(ge=1)] = 64
    strategy: Literal["mmap", "mmap-willneed", "pread", "io_uring", "direct-cache", "prefetch"] = "mmap"
    threads: Annotated[int, Field(ge=1, le=256)] = 1
    bs: Size = "64k"                          # pread / io_uring / direct-cache block
    qd: Annotated[int, Field(ge=1, le=4096)] = 4   # io_uring reads in flight
    fadv_random: bool = False                 # readahead off (POSIX_FADV_RANDOM, MADV_RANDOM)
    cache_bytes: Size | None = None           # direct-cache: the LRU expert cache's budget
    predict_p: Annotated[float, Field(ge=0, le=1)] = 1.0   # prefetch: the predictor's per-expert accuracy
    compute: str = Field(default="dot", pattern=r"^(none|dot|spin:\d+(\.\d+)?)$")
    seed: Annotated[int, Field(ge=0)] = 0     # prefetch's wrong guesses
    env: StepEnv = Field(default_factory=dict)
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("bs", "cache_bytes")
    @classmethod
    def _size(cls, value: Size | None) -> Size | None:
        if value is not None and parse_size(value) < 512:
            raise ValueError("expected a size of at least 512 bytes, e.g. 64k")
        return value

    @model_validator(mode="after")
    def _cache_budget(self) -> ReplayConfig:
        if self.strategy == "direct-cache" and self.cache_bytes is None:
            raise ValueError("strategy direct-cache needs cache_bytes (the expert cache's budget, e.g. 256M)")
        return self


@lru_cache(maxsize=8)
def _layout(path: str, size: int, mtime_ns: int) -> tuple[str, tuple[int, int, int]]:
    """The replay layout text of a GGUF and its (n_layer, n_expert, n_used); cached per file version."""
    from harness.models.inspect import inspect_gguf

    info = inspect_gguf(Path(path))
    lines, layers = [], set()
    for tensor in info.expert_tensors:
        kind = next((k for k in KINDS if f"ffn_{k}_exps" in tensor.name), None)
        if kind is not None:
            lines.append(f"{tensor.layer} {kind} {tensor.offset} {tensor.slice_bytes}")
            layers.add(tensor.layer)
    n_expert, n_used = info.expert_count, info.expert_used_count
    if not lines or not n_expert or not n_used:
        raise ConfigError(f"{path}: not a MoE GGUF with ffn_up/gate/down_exps tensors: nothing to replay")
    n_layer = max(layers) + 1
    head = f"# harness-replay-layout v1 n_layer={n_layer} n_expert={n_expert}"
    return "\n".join([head, *lines]) + "\n", (n_layer, n_expert, n_used)


def model_layout(path: str) -> tuple[str, tuple[int, int, int]]:
    local = Path(path)
    if not local.is_file():
        raise ConfigError(f"replay: the model's layout is read from the controller's copy, and {path} is not "
                          "here (give the model as a synth: file or a path the controller can read too)")
    stat = local.stat()
    return _layout(str(local.resolve()), stat.st_size, stat.st_mtime_ns)


def replay_trace(config: ReplayConfig, geometry: tuple[int, int, int]) -> Trace:
    """The trace to replay: synthesized for the geometry, or the file's, checked to fit, cut to ``tokens``."""
    n_layer, n_expert, n_used = geometry
    if isinstance(config.trace, str):
        trace = read_trace(Path(config.trace))
        trace.check_fits(n_layer, n_expert, n_used, f"replay trace {config.trace}")
        return trace.head(config.tokens)
    synth = config.trace.synth
    s = 0.0 if synth.routing == "uniform" else _zipf_s(synth.routing)
    return synth_trace(n_layer, n_expert, n_used, config.tokens, s=s, reuse=synth.reuse, seed=synth.seed)


def _zipf_s(routing: str) -> float:
    from harness.models.routing import parse_routing

    return parse_routing(routing).s


def options(config: ReplayConfig) -> dict[str, Any]:
    return {"strategy": config.strategy, "threads": config.threads, "bs": parse_size(config.bs), "qd": config.qd,
            "fadv_random": config.fadv_random, "predict_p": config.predict_p, "compute": config.compute,
            "seed": config.seed, "tokens": config.tokens,
            "cache_bytes": None if config.cache_bytes is None else parse_size(config.cache_bytes)}


@register_step
class ReplayStep(StepKind):
    name = "replay"
    Config = ReplayConfig
    engine: ClassVar[str | None] = None

    def engine_label(self, config: Any) -> str | None:
        return "replay"

    def files_read(self, config: Any) -> list[str]:
        return [config.model]

    def check(self, config: ReplayConfig, experiment: Any) -> tuple[tuple[str | int, ...], str] | None:
        """A model the controller cannot read (its layout comes from here) or a trace file that does not fit the
        model's geometry (as far as the plan knows it) is refused here, not at the run."""
        spec = experiment.named_files().get(config.model)
        if spec is not None and spec.path is not None and not Path(spec.path).is_file():
            return ("model",), (f"replay reads the model's layout from the controller's copy, and {spec.path} is "
                                "not on this machine (give a synth: model or a path readable here too)")
        if not isinstance(config.trace, str):
            return None
        try:
            trace = read_trace(Path(config.trace))
            if spec is not None and spec.synth is not None:
                trace.check_fits(spec.synth.layers, spec.synth.experts, spec.synth.used, config.trace)
            elif spec is not None and spec.path is not None and Path(spec.path).is_file():
                trace.check_fits(*model_layout(spec.path)[1], config.trace)
        except (TraceError, ConfigError) as exc:
            return ("trace",), str(exc)
        return None

    def estimate_s(self, config: ReplayConfig, file_sizes: dict[str, int]) -> float:
        return 5.0 + config.tokens * 0.1

    def runner_spec(self, config: ReplayConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        return {"model": files[config.model], "cache": cache, **options(config),
                "timeout_s": config.timeout_s or self.estimate_s(config, {}) * 10 + 600, **with_env(config.env)}

    def controller_spec(self, config: ReplayConfig, local_files: dict[str, str]) -> dict[str, Any]:
        layout, geometry = model_layout(local_files[config.model])
        trace = replay_trace(config, geometry)
        return {"layout": layout, "trace": trace.to_text(), "trace_source": trace.source}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "replay.jsonl"
        if not output.exists():
            return {}
        try:
            rec = json.loads(output.read_text().splitlines()[0])
        except (json.JSONDecodeError, IndexError):
            raise ParseError(f"{output.name}: not a replay record", line=1) from None
        row, tokens = replay_rows(run_dir, rec)
        return {"requests": [row], "tokens": tokens}
