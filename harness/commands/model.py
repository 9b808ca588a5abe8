"""``harness model synth|inspect``: synthetic MoE GGUFs and what any GGUF holds (metadata only)."""

from __future__ import annotations

import json
from pathlib import Path

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
          seed: int = typer.Option(0, "--seed")) -> None:
    """Write a random-weight qwen3moe GGUF that llama.cpp loads and runs."""
    from harness.models.synth import synth_moe

    try:
        size_bytes = parse_size(size) if size is not None else None
    except ValueError as exc:
        raise UsageError(f"--size: {exc}") from None
    if vocab is not None and not Path(vocab).is_file():
        raise UsageError(f"--vocab: {vocab} does not exist")
    info = synth_moe(out, size_bytes=size_bytes, layers=layers, experts=experts, used=used, hidden=hidden, ff=ff,
                     quant=quant, vocab=Path(vocab) if vocab else 512, seed=seed)
    console.print(f"wrote {out}: {format_size(info.file_bytes)}, {info.layers} layers x {info.experts} experts "
                  f"({info.used} used), {info.quant}; experts {format_size(info.expert_bytes)}, dense "
                  f"{format_size(info.dense_bytes)}, {format_size(info.expert_bytes_per_token)} of experts per token")


@model_app.command()
def inspect(file: Path = typer.Argument(..., help="any GGUF file (only its header is read)"),
            fmt: str = typer.Option("table", "--format", help="table, or json (with every expert slice)")) -> None:
    """Architecture, quant types, expert and dense bytes, expert bytes per token, expert slice ranges."""
    from harness.models.inspect import inspect_gguf

    if not file.is_file():
        raise UsageError(f"{file}: no such file")
    info = inspect_gguf(file)
    if fmt == "json":
        typer.echo(json.dumps(info.to_dict(slices=True, tensors=False), indent=1, default=str))
        return
    if fmt != "table":
        raise UsageError(f"--format: expected table or json, got {fmt!r}")
    table = Table(title=str(file), title_justify="left", show_header=False)
    rows = [("architecture", str(info.architecture)), ("file", format_size(info.file_bytes)),
            ("quant types", ", ".join(f"{k}: {v}" for k, v in info.quant_types.items())),
            ("layers", str(info.block_count)), ("experts (used)", f"{info.expert_count} ({info.expert_used_count})"),
            ("expert bytes", format_size(info.expert_bytes)), ("dense bytes", format_size(info.dense_bytes)),
            ("expert bytes per token", format_size(info.expert_bytes_per_token)),
            ("expert tensors", str(len(info.expert_tensors))), ("expert slices", str(len(info.expert_slices())))]
    for layer, nbytes in list(info.expert_bytes_per_layer.items())[:3]:
        rows.append((f"one expert, layer {layer}", format_size(nbytes)))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
