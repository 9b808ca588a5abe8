"""``harness model synth|inspect``: synthetic MoE GGUFs and what any GGUF holds (metadata only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from harness.commands.common import console
from harness.errors import UsageError
from harness.units import format_size, parse_size

model_app = typer.Typer(no_args_is_help=True, help="Make synthetic MoE models and inspect GGUF files.")


@model_app.command()
def synth(out: Path = typer.Option(..., "--out", help="GGUF file to write"),
          size: str = typer.Option(None, "--size", help="target file size, e.g. 1.6G (picks layers/ff)"),
          layers: int = typer.Option(None, "--layers"), experts: int = typer.Option(8, "--experts"),
          used: int = typer.Option(2, "--used"), hidden: int = typer.Option(256, "--hidden"),
          ff: int = typer.Option(None, "--ff"),
          quant: str = typer.Option("f16", "--quant", help="f16, q8_0 or q4_0"),
          vocab: str = typer.Option(None, "--vocab", help="vocab-only GGUF to copy the tokenizer from"),
          seed: int = typer.Option(0, "--seed"),
          routing: str = typer.Option("narrow", "--routing",
                                      help="router choice distribution: narrow (noise, the default), uniform, "
                                           "zipf:S (the r-th most popular expert of a layer gets a share ~ r^-S) "
                                           "or zipf (the S most like real models' routing)")) -> None:
    """Write a random-weight qwen3moe GGUF that llama.cpp loads and runs."""
    from harness.models.errors import ModelError
    from harness.models.routing import parse_routing
    from harness.models.synth import synth_moe

    try:
        parse_routing(routing)
    except ModelError as exc:
        raise UsageError(f"--{exc}") from None

    try:
        size_bytes = parse_size(size) if size is not None else None
    except ValueError as exc:
        raise UsageError(f"--size: {exc}") from None
    if vocab is not None and not Path(vocab).is_file():
        raise UsageError(f"--vocab: {vocab} does not exist")
    info = synth_moe(out, size_bytes=size_bytes, layers=layers, experts=experts, used=used, hidden=hidden, ff=ff,
                     quant=quant, vocab=Path(vocab) if vocab else 512, seed=seed, routing=routing)
    console.print(f"wrote {out}: {format_size(info.file_bytes)}, {info.layers} layers x {info.experts} experts "
                  f"({info.used} used), {info.quant}, routing {info.routing}; experts {format_size(info.expert_bytes)}"
                  f", dense {format_size(info.dense_bytes)}, {format_size(info.expert_bytes_per_token)} of experts"
                  " per token")


@model_app.command()
def inspect(file: Path = typer.Argument(..., help="any GGUF file (only its header is read)"),
            fmt: str = typer.Option("table", "--format", help="table, or json (with every expert slice)"),
            route_trace: Path = typer.Option(None, "--route-trace",
                                             help="a BigMoeOnEdge --route-trace CSV of this model: print how it "
                                                  "routed (per layer, over the decoded tokens)"),
            steps: int = typer.Option(None, "--steps", min=1,
                                      help="with --route-trace: only the first N decoded tokens")) -> None:
    """Architecture, quant types, expert and dense bytes, expert bytes per token, expert slice ranges; with
    --route-trace, how the model routed in a BigMoeOnEdge run."""
    from harness.models.inspect import inspect_gguf
    from harness.models.synth import ROUTING_KEY

    if not file.is_file():
        raise UsageError(f"{file}: no such file")
    if fmt not in ("table", "json"):
        raise UsageError(f"--format: expected table or json, got {fmt!r}")
    info = inspect_gguf(file)
    routed = _routing(route_trace, steps) if route_trace is not None else None
    if fmt == "json":
        described = info.to_dict(slices=True, tensors=False)
        if routed is not None:
            described["route_trace"] = {"summary": routed[0], "layers": routed[1].to_dict(orient="records")}
        typer.echo(json.dumps(described, indent=1, default=str))
        return
    table = Table(title=str(file), title_justify="left", show_header=False)
    rows = [("architecture", str(info.architecture)), ("file", format_size(info.file_bytes)),
            ("quant types", ", ".join(f"{k}: {v}" for k, v in info.quant_types.items())),
            ("layers", str(info.block_count)), ("experts (used)", f"{info.expert_count} ({info.expert_used_count})"),
            ("expert bytes", format_size(info.expert_bytes)), ("dense bytes", format_size(info.dense_bytes)),
            ("expert bytes per token", format_size(info.expert_bytes_per_token)),
            ("expert tensors", str(len(info.expert_tensors))), ("expert slices", str(len(info.expert_slices())))]
    if ROUTING_KEY in info.metadata or str(info.metadata.get("general.description", "")).startswith("harness synth"):
        rows.append(("routing (synthetic)", str(info.metadata.get(ROUTING_KEY, "narrow"))))
    for layer, nbytes in list(info.expert_bytes_per_layer.items())[:3]:
        rows.append((f"one expert, layer {layer}", format_size(nbytes)))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    if routed is not None:
        _print_routing(route_trace, *routed)


def _routing(trace: Path, steps: int | None) -> tuple[dict[str, Any], Any]:
    """The summary and per-layer table of a route trace's decoded tokens (UsageError when unreadable)."""
    from harness.analysis.routing import decode_window, routing_by_layer, routing_summary
    from harness.parsers import ParseError
    from harness.parsers.bmoe_route import parse_bmoe_route

    try:
        rows = parse_bmoe_route(trace.read_bytes())
    except OSError as exc:
        raise UsageError(f"--route-trace: {trace}: {exc.strerror}") from None
    except ParseError as exc:
        raise UsageError(f"--route-trace: {trace}: {exc}") from None
    window = decode_window(rows, steps)
    if window.empty:
        raise UsageError(f"--route-trace: {trace} has no decoded tokens (phase 1 rows)")
    return routing_summary(window), routing_by_layer(window)


def _print_routing(trace: Path, summary: dict[str, Any], per_layer: Any) -> None:
    head = (f"routing in {trace.name}: {summary['arch']}, {summary['layers']} MoE layers, {summary['n_expert']} "
            f"experts ({summary['n_expert_used']} used), {summary['tokens']} decoded tokens")
    table = Table(title=head, title_justify="left")
    for column in ("figure", "mean", "min", "max"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    labels = {"distinct_experts": "distinct experts per layer", "uniform_distinct": "  same if uniform",
              "top4_share": "top-4 share of selections", "reuse_prev": "reuse of the previous token's",
              "effective_experts": "effective experts (exp entropy)"}
    for key, label in labels.items():
        figure = summary[key]
        pct = key in ("top4_share", "reuse_prev")
        table.add_row(label, *(f"{figure[s]:.1%}" if pct else f"{figure[s]:.1f}" for s in ("mean", "min", "max")))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
