"""The llama.cpp steps: ``llama-bench`` (all of its rows kept) and ``llama-server`` (measured per request).

Both read the binaries of the experiment's llama.cpp build from the run spec (``engines.llama.cpp.bin_dir``,
filled by the campaign) and the model from the experiment's named files (``model`` by default). ``args`` are
the engine's own command-line arguments, templated from the matrix (``["-t", "{threads}"]``); the options the
harness owns (model, output format, host, port) are refused there. ``env`` adds variables to the engine's
environment, templated the same way (harness/steps/env.py says which names are refused and why).

    steps:
      - llama-bench: {args: [-p, 16, -n, 32, -t, "{threads}", -r, 3, -lm, mmap]}
      - llama-bench: {args: [-t, "{threads}"], env: {HARNESS_EXPERT_PREAD: "131072"}}   # a strategy switched on
      - llama-server:
          args: [-t, "{threads}", -c, 512]
          prompts: experiments/prompts/short.jsonl    # {"prompt": ...} per line, or an inline list
          n_predict: 32
          requests_per_prompt: 1                      # > 1: all prompts, then all again
          decode_window: [129, 256]                   # optional: decode measured over these output tokens too
          ignore_eos: true                            # the default: always n_predict tokens
          request: {top_k: 1}                         # optional extra /completion fields

Tables: ``bench`` (one row per llama-bench test, every key of the build kept, plus ``test``, ``avg_tps``,
``stddev_tps``, ``samples_tps``, ``model_size_bytes``), ``bench_samples`` (one row per repetition),
``requests`` (one row per request: llama-server ``timings`` with ``prefill_tps``/``decode_tps``; for the
windows ``request_``, ``prefill_``, ``decode_`` and ``window_``: seconds, ``dev_read_bytes``, ``dev_read_ios``,
``dev_avg_read_io_bytes``, ``dev_avg_inflight``, ``dev_read_bytes_per_s``, and the server's ``majflt``,
``utime_s``, ``stime_s``; ``residency_before_pct``, ``cold_reached``/``warm_reached``, ``output_sha256``,
per-token device bytes and faults) and ``tokens`` (arrival time of every streamed token).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, field_validator, model_validator

from harness.config.validate import StrictModel
from harness.parsers import ParseError, parse
from harness.parsers.cachedrop import cache_drop_columns
from harness.parsers.llama_bench import sample_rows
from harness.parsers.llama_server import timings_row
from harness.steps.base import Rows, StepKind, register_step
from harness.steps.env import StepEnv, refuse_owned_env, with_env
from harness.steps.requests import (
    Arg,
    cache_reached,
    mark_columns,
    mark_windows,
    per_token,
    place_columns,
    refuse_owned,
    window,
)
from runner.contract import RunRecord

REPO_ROOT = Path(__file__).resolve().parents[2]


# llama-server reads these as -m, --host and --port (common/arg.cpp's set_env), the flags the harness sets: the
# command line wins, with a warning, so a user's value would be silently ignored
SERVER_OWNED_ENV = ("LLAMA_ARG_MODEL", "LLAMA_ARG_HOST", "LLAMA_ARG_PORT")


class LlamaBenchConfig(StrictModel):
    model: str = "model"
    args: list[Arg] = Field(default_factory=list)
    env: StepEnv = Field(default_factory=dict)  # added to llama-bench's environment (harness/steps/env.py)
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[Arg]) -> list[Arg]:
        return refuse_owned(value, ("-m", "--model", "-o", "--output"))


def load_prompts(path: str) -> list[str]:
    """``{"prompt": ...}`` per line; a relative path is looked up from the current directory, then the repo."""
    candidates = [Path(path)] if Path(path).is_absolute() else [Path.cwd() / path, REPO_ROOT / path]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        where = ", ".join(dict.fromkeys(str(p.parent) for p in candidates))
        raise ValueError(f"prompts file {path} not found (looked in {where})")
    prompts = []
    for number, line in enumerate(found.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{found}:{number}: invalid JSON ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise ValueError(f'{found}:{number}: expected {{"prompt": "..."}}')
        prompts.append(item["prompt"])
    if not prompts:
        raise ValueError(f"{found}: no prompts")
    return prompts


# prompts given inline (a list) or as a JSONL file's path, read when the config is validated
Prompts = Annotated[list[str], BeforeValidator(lambda value: load_prompts(value) if isinstance(value, str) else value)]


class LlamaServerConfig(StrictModel):
    model: str = "model"
    args: list[Arg] = Field(default_factory=list)
    prompts: Annotated[Prompts, Field(min_length=1)]  # given as a JSONL path or inline
    env: StepEnv = Field(default_factory=dict)  # added to llama-server's environment (harness/steps/env.py)
    n_predict: Annotated[int, Field(ge=1)] = 32
    requests_per_prompt: Annotated[int, Field(ge=1)] = 1
    # measure decode over output tokens a..b as well (InferSSD reports tokens 129-256)
    decode_window: tuple[int, int] | None = None
    # every request decodes exactly n_predict tokens (as llama-bench's tg does), so decode numbers stay
    # comparable across variants even when a change moves the point where the model would stop
    ignore_eos: bool = True
    # extra /completion fields (e.g. {top_k: 1}); prompt, n_predict and stream belong to the harness
    request: dict[str, Any] = Field(default_factory=dict)
    health_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[Arg]) -> list[Arg]:
        return refuse_owned(value, ("-m", "--model", "--host", "--port"))

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return refuse_owned_env(value, SERVER_OWNED_ENV, "llama-server")

    @model_validator(mode="after")
    def _window(self) -> LlamaServerConfig:
        if self.decode_window is not None:
            a, b = self.decode_window
            if not 2 <= a <= b <= self.n_predict:
                raise ValueError(f"decode_window [{a}, {b}]: need 2 <= first <= last <= n_predict ({self.n_predict});"
                                 " token 1 comes out of prefill")
        return self

    @field_validator("request")
    @classmethod
    def _request(cls, value: dict[str, Any]) -> dict[str, Any]:
        owned = sorted(set(value) & {"prompt", "stream", "n_predict"})
        if owned:
            raise ValueError(f"{', '.join(owned)} are set by the harness (prompts, n_predict; always streamed)")
        return value


class _LlamaStep(StepKind):
    engine: ClassVar[str | None] = "llama.cpp"  # the campaign builds it and puts its bin_dir in the spec

    def files_read(self, config: Any) -> list[str]:
        return [config.model]


@register_step
class LlamaBenchStep(_LlamaStep):
    name = "llama-bench"
    Config = LlamaBenchConfig

    def estimate_s(self, config: LlamaBenchConfig, file_sizes: dict[str, int]) -> float:
        # load + a few passes over the model; only for `harness plan`
        return 10.0 + 4 * file_sizes.get(config.model, 0) / 200e6

    def runner_spec(self, config: LlamaBenchConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        return {"model": files[config.model], "args": list(config.args), "timeout_s": config.timeout_s or 3600.0,
                **with_env(config.env)}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "bench.jsonl"
        if not output.exists() or not output.read_bytes().strip():
            return {}
        rows = parse("llama-bench", output.read_bytes())
        return {"bench": rows, "bench_samples": sample_rows(rows)}


@register_step
class LlamaServerStep(_LlamaStep):
    name = "llama-server"
    Config = LlamaServerConfig

    def estimate_s(self, config: LlamaServerConfig, file_sizes: dict[str, int]) -> float:
        requests = len(config.prompts) * config.requests_per_prompt
        return 10.0 + requests * (1.0 + config.n_predict * 0.1)

    def runner_spec(self, config: LlamaServerConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        # prompts travel inside the spec: the target needs no copy of the prompts file
        return {"model": files[config.model], "args": list(config.args), "prompts": list(config.prompts),
                "n_predict": config.n_predict, "requests_per_prompt": config.requests_per_prompt,
                "cache": cache, "request": {"ignore_eos": config.ignore_eos, **config.request},
                "health_timeout_s": config.health_timeout_s,
                "decode_window": list(config.decode_window) if config.decode_window else None,
                "timeout_s": config.timeout_s or self.estimate_s(config, {}) * 10 + 600, **with_env(config.env)}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "requests.jsonl"
        if not output.exists():
            return {}
        rows, tokens = [], []
        for number, line in enumerate(output.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    request = json.loads(line)
                    rows.append(request_row(request))
                    tokens += token_rows(request)
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ParseError(f"{output.name}: bad request record ({exc})", line=number) from None
        return {"requests": rows, "tokens": tokens}


def request_row(rec: dict[str, Any]) -> dict[str, Any]:
    """One ``requests`` row: the shared columns (harness/steps/requests.py) and llama-server's own ``timings``.

    The decode window runs from the first streamed token (sampled at the end of prefill) to the final
    message, so it holds ``predicted_n - 1`` generated tokens.
    """
    marks = rec.get("marks") or {}
    row: dict[str, Any] = {**place_columns(rec), **mark_columns(marks)}
    # the server's executable and libraries (those not wholly cached, up to 64 MiB each) were read into the cache
    # first, so that a request's faults are the model's; where that failed the row says why (older records: None)
    row["engine_files_error"] = (rec.get("engine_files") or {}).get("error")
    row.update(cache_reached(rec.get("cache"), rec.get("residency_before_pct")))
    if rec.get("cache") == "cold":
        # where the kernel cannot page out a mapping, rows say so
        row["pageout_error"] = (rec.get("pageout") or {}).get("error")
        row.update(cache_drop_columns((rec.get("pageout") or {}).get("cache_drop")))  # macOS: purge, allowed?
    if rec.get("content") is not None:
        # same model, prompt and greedy sampling: variants that only move bytes must print the same text
        row["output_sha256"] = hashlib.sha256(rec["content"].encode("utf-8", errors="replace")).hexdigest()
    row.update(timings_row(rec) if rec.get("timings") else {})
    row.update(mark_windows(marks))
    window_marks = (marks.get("window_start"), marks.get("window_end"))
    if rec.get("decode_window") or any(window_marks):
        row.update(window(*window_marks, "window_"))
        first_token, last_token = rec.get("decode_window") or (None, None)
        row["window_first_token"], row["window_last_token"] = first_token, last_token
        if first_token and row["window_s"]:
            row["window_tps"] = (last_token - first_token + 1) / row["window_s"]
    times, counts = rec.get("token_ns") or [], rec.get("token_counts") or []
    # the client's view of decode speed: tokens after the first over the time they took to arrive
    if len(times) >= 2 and times[-1] > times[0]:
        row["decode_client_tps"] = (counts[-1] - counts[0]) / ((times[-1] - times[0]) / 1e9)
    row.update(per_token(row, (row.get("predicted_n") or 0) - 1))
    return row


def token_rows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per streamed message that carried tokens: running ``token`` count, arrival time, gap."""
    rows, previous = [], None
    for t_ns, count in zip(rec.get("token_ns") or [], rec.get("token_counts") or [], strict=True):
        rows.append({"request": rec["index"], "token": count, "t_ns": t_ns,
                     "gap_ms": None if previous is None else (t_ns - previous) / 1e6})
        previous = t_ns
    return rows
