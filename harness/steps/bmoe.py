"""The ``bmoe`` step: BigMoeOnEdge's ``bmoe-cli`` on the experiment's model, one process per prompt.

The engine's flags are typed here and rendered to its command line (spellings from its cli/main.cpp); the harness
always adds ``--progress`` (a BMOE_PROGRESS line per token) and ``--csv`` (its metrics file), and owns the model,
the prompt and ``-n``::

    steps:
      - bmoe: {moe_stream: true, cache_mb: 0, threads: "{threads}", n_predict: 32,
               prompts: experiments/prompts/quickstart.jsonl}
      - bmoe: {cache_mb: 256, force_cache: true, io_threads: 4, dense_weights: mmap, prefetch: 1}

``overlap`` needs the expert-ready hook of the engine's llama.cpp fork: built against a stock llama.cpp (the
harness's default tree) bmoe-cli refuses it ("--overlap requires the bmoe llama.cpp fork") and the run fails with
that line. Tables: ``requests`` (one row per prompt: the engine's own numbers from its log, via
harness/parsers/bmoe.py, with llama-server's column names where they mean the same, plus the block-stat windows
``request_``, ``prefill_``, ``decode_`` as for llama-server; and the cross-check of the engine's read bytes per
token against the device's: ``engine_read_bytes_per_token``, ``decode_dev_read_bytes_per_token``,
``decode_dev_to_engine_read_ratio``) and ``tokens`` (one row per BMOE_PROGRESS line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from harness.config.validate import StrictModel
from harness.parsers.bmoe import bmoe_request_row, parse_bmoe_log
from harness.steps.base import Rows, StepKind, register_step
from harness.steps.env import StepEnv, with_env
from harness.steps.llamacpp import Prompts
from harness.steps.requests import (
    Arg,
    cache_reached,
    json_records,
    mark_columns,
    mark_windows,
    per_token,
    place_columns,
    refuse_owned,
)
from runner.contract import RunRecord

# what the step sets itself: extra args may not
OWNED = ("-m", "--model", "-p", "--prompt", "-n", "--n-predict", "--progress", "--csv", "--session")


class BmoeConfig(StrictModel):
    model: str = "model"
    moe_stream: bool = True                 # --moe-stream: stream routed experts with the engine's own reader
    cache_mb: Annotated[int, Field(ge=0)] | Literal["auto"] | None = None   # --cache-mb N|auto (0: no cache)
    cache_ceil_mb: Annotated[int, Field(ge=0)] | None = None                # --cache-ceil-mb (auto's ceiling)
    # --force-cache: the engine refuses a cache under 1500 MiB (smaller than a real model's routed working set per
    # token); a small model's working set is smaller, so a small cache is meaningful there
    force_cache: bool = False
    io_threads: Annotated[int, Field(ge=1)] | None = None                   # --io-threads
    odirect: bool = True                    # False: --no-odirect (expert reads through the page cache)
    dense_weights: Literal["mmap", "warm", "anon"] | None = None           # --dense-weights
    overlap: bool = False                   # --overlap (needs the fork's expert-ready hook)
    prefetch: Annotated[int, Field(ge=0)] | None = None                     # --prefetch LAYERS
    threads: Annotated[int, Field(ge=1)] | None = None                      # -t
    n_predict: Annotated[int, Field(ge=1)] = 32                              # -n
    prompt: str | None = None               # one prompt, or
    prompts: Prompts | None = None          # a JSONL file ({"prompt": ...} per line) or an inline list
    seed: Annotated[int, Field(ge=0)] | None = None                         # --seed
    temp: Annotated[float, Field(ge=0)] = 0.0                               # --temp (0: greedy, comparable runs)
    args: list[Arg] = Field(default_factory=list)                           # any other bmoe-cli flags
    env: StepEnv = Field(default_factory=dict)                              # added to bmoe-cli's environment
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[Arg]) -> list[Arg]:
        return refuse_owned(value, OWNED)

    @model_validator(mode="after")
    def _one_prompt_source(self) -> BmoeConfig:
        if (self.prompt is None) == (self.prompts is None):
            raise ValueError("give exactly one of prompt (a string) or prompts (a JSONL file or a list)")
        return self

    def prompt_list(self) -> list[str]:
        return [self.prompt] if self.prompt is not None else list(self.prompts or [])


def bmoe_args(config: BmoeConfig) -> list[str]:
    """bmoe-cli's flags for ``config`` (without model, prompt, -n, --progress and --csv: the runner adds those)."""
    optional: list[tuple[str, Any]] = [("-t", config.threads), ("--cache-mb", config.cache_mb),
                                       ("--cache-ceil-mb", config.cache_ceil_mb), ("--io-threads", config.io_threads),
                                       ("--dense-weights", config.dense_weights), ("--prefetch", config.prefetch),
                                       ("--seed", config.seed), ("--temp", config.temp)]
    argv = ["--moe-stream"] if config.moe_stream else []
    argv += [item for flag, value in optional if value is not None for item in (flag, str(value))]
    argv += [] if config.odirect else ["--no-odirect"]
    argv += ["--force-cache"] if config.force_cache else []
    argv += ["--overlap"] if config.overlap else []
    return argv + [str(a) for a in config.args]


@register_step
class BmoeStep(StepKind):
    name = "bmoe"
    Config = BmoeConfig
    engine: ClassVar[str | None] = "bigmoeonedge"  # the campaign builds it and puts its bin_dir in the spec

    def files_read(self, config: Any) -> list[str]:
        return [config.model]

    def estimate_s(self, config: BmoeConfig, file_sizes: dict[str, int]) -> float:
        return 5.0 + len(config.prompt_list()) * (5.0 + config.n_predict * 0.2)

    def runner_spec(self, config: BmoeConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        return {"model": files[config.model], "args": bmoe_args(config), "prompts": config.prompt_list(),
                "n_predict": config.n_predict, "cache": cache,
                "timeout_s": config.timeout_s or self.estimate_s(config, {}) * 10 + 600, **with_env(config.env)}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "bmoe.jsonl"
        if not output.exists():
            return {}
        requests, tokens = [], []
        for prompt in json_records(output, "prompt record"):
            row, token_rows = prompt_rows(run_dir, prompt)
            requests.append(row)
            tokens += token_rows
        return {"requests": requests, "tokens": tokens}


def prompt_rows(run_dir: Path, prompt: dict[str, Any]) -> tuple[dict[str, Any], Rows]:
    """One ``requests`` row and the ``tokens`` rows of one bmoe-cli process."""
    log = (run_dir / prompt["stdout"]).read_bytes()
    stderr = run_dir / prompt["stderr"]
    parsed = parse_bmoe_log(log + b"\n" + (stderr.read_bytes() if stderr.exists() else b""))
    index = prompt["index"]
    row = bmoe_request_row(parsed["summary"][0]) if parsed["summary"] else {}
    row.update(place_columns(prompt))
    # the runner measures residency before every prompt, warm ones too: warm_reached as for llama-server
    row.update(cache_reached(prompt.get("cache"), prompt.get("residency_before_pct")))
    marks = prompt.get("marks") or {}
    row.update(mark_columns(marks))
    row.update(mark_windows(marks))
    row.update(read_bytes_check(row, len(parsed["tokens"])))
    tokens = [{**token, "request": index} for token in parsed["tokens"]]
    return row, tokens


def read_bytes_check(row: dict[str, Any], progress_lines: int) -> dict[str, Any]:
    """The device's bytes per decoded token (block stats from the first token to the exit: ``progress_lines - 1``
    tokens, as llama-server's decode window) against the engine's own count, and their ratio: above 1 the device
    moved more than the engine read (page-cache misses of the dense weights, read-ahead, other readers), below 1
    the engine's reads were served from memory."""
    out = per_token(row, progress_lines - 1)
    out["decode_dev_to_engine_read_ratio"] = None
    engine = row.get("engine_read_bytes_per_token")
    if engine and out["decode_dev_read_bytes_per_token"] is not None:
        out["decode_dev_to_engine_read_ratio"] = out["decode_dev_read_bytes_per_token"] / engine
    return out
