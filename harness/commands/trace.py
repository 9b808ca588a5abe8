"""``harness trace synth|record|stats``: routing traces made, recorded from llama.cpp, and measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from harness.commands.common import console
from harness.errors import UsageError
from harness.units import format_size, parse_size

trace_app = typer.Typer(no_args_is_help=True, help="Routing traces: synthesize, record from llama.cpp, measure.")


def _routing_skew(routing: str) -> float:
    """``uniform`` -> 0, ``zipf`` / ``zipf:S`` -> S (the synthetic model's spelling, without ``narrow``)."""
    from harness.models.errors import ModelError
    from harness.models.routing import parse_routing

    try:
        parsed = parse_routing(routing)
    except ModelError as exc:
        raise UsageError(f"--routing: expected uniform, zipf or zipf:S, got {routing!r}") from exc
    if not parsed.shaped:
        raise UsageError(f"--routing: expected uniform, zipf or zipf:S, got {routing!r}")
    return parsed.s if parsed.kind == "zipf" else 0.0


def _geometry(model: Path | None, layers: int | None, experts: int | None, used: int | None) -> tuple[int, int, int]:
    if model is not None:
        if any(v is not None for v in (layers, experts, used)):
            raise UsageError("--model or --layers/--experts/--used, not both")
        info = _inspect(model)
        if not (info.block_count and info.expert_count and info.expert_used_count):
            raise UsageError(f"--model: {model} is not a MoE model (no expert_count/expert_used_count)")
        return info.block_count, info.expert_count, info.expert_used_count
    if layers is None or experts is None or used is None:
        raise UsageError("give --model GGUF, or all of --layers, --experts and --used")
    return layers, experts, used


def _inspect(model: Path) -> Any:
    from harness.models.errors import ModelError
    from harness.models.inspect import inspect_gguf

    try:
        return inspect_gguf(model)
    except (ModelError, OSError) as exc:
        raise UsageError(f"--model: {model}: {exc}") from None


@trace_app.command()
def synth(out: Path = typer.Option(..., "--out", help="trace file to write"),
          model: Path = typer.Option(None, "--model", help="take layers, experts and used from this GGUF"),
          layers: int = typer.Option(None, "--layers"), experts: int = typer.Option(None, "--experts"),
          used: int = typer.Option(None, "--used", help="experts chosen per token and layer"),
          tokens: int = typer.Option(256, "--tokens", help="decoded tokens"),
          routing: str = typer.Option("uniform", "--routing", help="uniform, zipf:S (rank r chosen ~ r^-S) or zipf"),
          reuse: float = typer.Option(0.0, "--reuse", help="0..1: chance a slot keeps one of the previous token's"),
          seed: int = typer.Option(0, "--seed")) -> None:
    """Write a seeded synthetic routing trace."""
    from harness.traces.model import write_trace
    from harness.traces.synth import synth_trace

    n_layer, n_expert, n_used = _geometry(model, layers, experts, used)
    trace = synth_trace(n_layer, n_expert, n_used, tokens, s=_routing_skew(routing), reuse=reuse, seed=seed)
    write_trace(trace, out)
    console.print(f"wrote {out}: {trace.tokens} tokens x {n_layer} layers, {n_used} of {n_expert} experts "
                  f"({trace.source})", highlight=False)


@trace_app.command()
def record(model: Path = typer.Argument(..., help="GGUF MoE model llama.cpp runs"),
           prompts: Path = typer.Argument(..., help='JSONL prompts, {"prompt": ...} per line'),
           out: Path = typer.Option(..., "--out", help="trace file to write"),
           n_predict: int = typer.Option(64, "-n", help="decoded tokens per prompt (fewer if the model stops)"),
           threads: int = typer.Option(2, "--threads"),
           ctx: int = typer.Option(2048, "--ctx", help="context size (prompt + decoded tokens must fit)")) -> None:
    """Record which experts llama.cpp's decode chooses, per token and layer, on THIS machine (the controller):
    builds llama.cpp (the harness's default build, cached) and a small recorder against it, then decodes each
    prompt (its raw text, no chat template) greedily, reading the ffn_moe_topk routing nodes through llama.cpp's
    eval callback. Only decode tokens are recorded, the prompts' one after another."""
    from harness.campaign.prepare import BUILD_CACHE
    from harness.engines import ENGINES
    from harness.engines.llamacpp.recorder import build_recorder
    from harness.traces.model import write_trace
    from harness.traces.record import read_prompts, record_trace

    if not model.is_file():
        raise UsageError(f"{model}: no such model file")
    if n_predict <= 0 or threads <= 0 or ctx <= 0:
        raise UsageError("-n, --threads and --ctx must be positive")
    texts = read_prompts(prompts)
    say = lambda line: console.print(line, highlight=False)  # noqa: E731  # a one-line progress printer
    engine = ENGINES["llama.cpp"]
    recorder = build_recorder(engine.build(engine.spec(None), Path.cwd(), BUILD_CACHE, say), say)
    trace = record_trace(recorder, model, texts, n_predict, threads, ctx)
    write_trace(trace, out)
    console.print(f"wrote {out}: {trace.tokens} decoded tokens of {len(texts)} prompts x {trace.n_layer} layers, "
                  f"{trace.n_used} of {trace.n_expert} experts ({trace.source})", highlight=False)


def _capacities(cache: str | None, cache_experts: str | None, model_info: Any, trace: Any) -> tuple[list[int], bool]:
    """(capacities, in bytes?) from --cache (bytes, needs --model) or --cache-experts; by default 1, 2, 4 and 8
    tokens' worth of experts."""
    if cache is not None and cache_experts is not None:
        raise UsageError("--cache or --cache-experts, not both")
    if cache is not None:
        if model_info is None:
            raise UsageError("--cache is in bytes: give --model GGUF for the experts' sizes (or use --cache-experts)")
        try:
            return [parse_size(v.strip()) for v in cache.split(",") if v.strip()], True
        except ValueError as exc:
            raise UsageError(f"--cache: {exc}") from None
    if cache_experts is not None:
        try:
            sizes = [int(v) for v in cache_experts.split(",") if v.strip()]
        except ValueError:
            raise UsageError(f"--cache-experts: expected counts like 64,128, got {cache_experts!r}") from None
        if any(s <= 0 for s in sizes):
            raise UsageError("--cache-experts: counts must be positive")
        return sizes, False
    per_token = trace.n_layer * trace.n_used
    return [per_token * k for k in (1, 2, 4, 8)], False


@trace_app.command()
def stats(trace_file: Path = typer.Argument(..., metavar="TRACE", help="harness trace or BigMoeOnEdge route trace"),
          model: Path = typer.Option(None, "--model", help="GGUF the trace routes: expert sizes, geometry checked"),
          cache: str = typer.Option(None, "--cache", help="LRU sizes in bytes, e.g. 256M,1G (needs --model)"),
          cache_experts: str = typer.Option(None, "--cache-experts", help="LRU sizes in experts, e.g. 64,128"),
          warmup: int = typer.Option(0, "--warmup", help="first tokens fill the caches uncounted (steady state)"),
          fmt: str = typer.Option("table", "--format", help="table or json")) -> None:
    """Per-layer popularity and reuse distance of a trace, and the hit rates of LRU expert caches."""
    from harness.analysis.trace_stats import trace_report
    from harness.traces.bmoe import load_trace

    if fmt not in ("table", "json"):
        raise UsageError(f"--format: expected table or json, got {fmt!r}")
    trace = load_trace(trace_file)
    if not 0 <= warmup < trace.tokens:
        raise UsageError(f"--warmup: expected 0..{trace.tokens - 1} (the trace has {trace.tokens} tokens), "
                         f"got {warmup}")
    info = _inspect(model) if model is not None else None
    if info is not None:
        trace.check_fits(info.block_count, info.expert_count, info.expert_used_count, str(trace_file))
    capacities, in_bytes = _capacities(cache, cache_experts, info, trace)
    report = trace_report(trace, capacities, info.expert_bytes_per_layer if in_bytes else None, warmup)
    if fmt == "json":
        typer.echo(json.dumps(report, indent=1))
        return
    _print_layers(report)
    _print_caches(report)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _print_layers(report: dict[str, Any]) -> None:
    t = report["trace"]
    table = Table(title=f"{escape(t['source'])}: {t['tokens']} tokens, {t['n_layer']} layers, {t['n_used']} of "
                        f"{t['n_expert']} experts", title_justify="left")
    columns = [("distinct", "distinct_experts"), ("top-4", "top4_share"), (f"top-k ({t['n_used']})", "topk_share"),
               ("effective", "effective_experts"), ("reuse med", "reuse_median"), ("reuse p90", "reuse_p90"),
               ("at d=1", "reuse_d1_share"), ("never reused", "never_reused")]
    pct = {"top4_share", "topk_share", "reuse_d1_share", "never_reused"}
    table.add_column("layer", justify="right")
    for name, _key in columns:
        table.add_column(name, justify="right")
    for layer in report["layers"]:
        table.add_row(str(layer["layer"]), *((_pct if key in pct else _num)(layer[key]) for _name, key in columns))
    summary = report["summary"]
    table.add_row("mean", *((_pct if key in pct else _num)(summary.get(key, {}).get("mean"))
                            for _name, key in columns), style="bold")
    console.print(table)


def _print_caches(report: dict[str, Any]) -> None:
    if not report["cache"]:
        return
    warmup = report["cache_warmup_tokens"]
    start = f"counted after {warmup} warm-up tokens" if warmup else "cold start"
    table = Table(title=f"LRU expert cache (all layers in one cache, {start})", title_justify="left")
    for name in ("capacity", "experts", "hit rate", "byte hit rate", "hits", "accesses"):
        table.add_column(name, justify="right")
    for row in report["cache"]:
        size = format_size(row["capacity"]) if row["unit"] == "bytes" else f"{row['capacity']} experts"
        table.add_row(size, f"{row['capacity_experts']:.0f}", _pct(row["hit_rate"]), _pct(row["byte_hit_rate"]),
                      str(row["hits"]), str(row["accesses"]))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
