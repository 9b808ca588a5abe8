"""``harness estimate MODEL --target T``: the decode ceiling each read strategy allows on a target, from the
model's expert bytes, the target's fio ladder and a cache-hit model, every assumption printed; beside it the
measured decode of the same model and target where the set has one (docs/methodology.md, "The decode
estimate")."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from harness.analysis.estimate import (
    HitModel,
    ModelBytes,
    Span,
    StrategyEstimate,
    StrategyKnobs,
    estimate_all,
    range_error,
)
from harness.analysis.ladder import MB, Ladder
from harness.commands import estimating
from harness.commands.common import ResultsOpt, TargetsDirOpt, console
from harness.errors import UsageError
from harness.units import parse_size

SetOpt = typer.Option(None, "--set", metavar="SET",
                      help="a result set (path or id) whose fio table has the target's ladder; its decode runs "
                           "of this model on the target are shown beside the estimate")
LadderOpt = typer.Option(None, "--ladder", metavar="BS:QD=MBPS,...",
                         help="the target's fio ladder by hand, e.g. 64k:1=200,64k:2=465,64k:4=778,128k:8=1618")
TraceOpt = typer.Option(None, "--trace", help="a routing trace of this model (harness-trace v1) for the cache model")
RoutingOpt = typer.Option(None, "--routing",
                          help="uniform, zipf:S or zipf (S=1.25, as the synthetic models): a synthetic trace of the "
                               "model's shape")
BudgetOpt = typer.Option(None, "--budget", metavar="SIZE", help="memory for cached experts (with --trace/--routing)")
HitsOpt = typer.Option(None, "--hits", metavar="LOW:HIGH",
                       help="the share of expert bytes served from memory, given (instead of a trace)")
ComputeOpt = typer.Option(None, "--compute-ms", min=0.0, help="compute per token in ms (default: I/O alone)")
InflightOpt = typer.Option("1.0:1.7", "--mmap-inflight", help="mmap's requests in flight (the seed's Orin)")
FaultOpt = typer.Option("70k:84k", "--mmap-io", help="mmap's read request size (the seed's Orin)")
FormatOpt = typer.Option("table", "--format", help="table or json")
RuntimeOpt = typer.Option(3.0, "--ladder-runtime", min=0.5, metavar="SECONDS",
                          help="without --set or --ladder: seconds per fio job of the ladder run first")
OnTargetOpt = typer.Option(None, "--model-path", metavar="PATH",
                           help="without --set or --ladder: the model's path on the target (default: MODEL's)")


@dataclass
class Compared:
    """One measured cell beside the strategy's estimate: errors are 0 inside the estimated range, else nearest
    end / measured - 1 (positive: the estimate is too high); None for a warm start (the model resident before
    decode, which the estimate does not model)."""

    strategy: str
    step: str
    variant: str
    cache: str
    measured_tok_s: float
    requests: int
    matched_by: str
    error: float | None
    dev_bytes_per_token: float | None
    dev_bytes_error: float | None
    inflight: float | None
    io_bytes: float | None
    read_ahead_kb: int | None


@dataclass
class Row:
    estimate: StrategyEstimate
    measured: list[Compared] = field(default_factory=list)


def estimate(model: Path = typer.Argument(..., help="a GGUF file (only its header is read)"),
             target: str = typer.Option(..., "--target", help="a target name (targets/NAME.yaml)"),
             set_name: str = SetOpt, results: Path = ResultsOpt, ladder_text: str = LadderOpt,
             trace: Path = TraceOpt, routing: str = RoutingOpt, budget: str = BudgetOpt, hits: str = HitsOpt,
             tokens: int = typer.Option(256, "--tokens", min=1, help="tokens of the synthetic trace"),
             seed: int = typer.Option(0, "--seed"),
             threads: int = typer.Option(4, "--threads", min=1, help="pread, direct-cache, prefetch threads"),
             bs: str = typer.Option("128k", "--bs", help="pread, io_uring, direct-cache, prefetch block size"),
             qd: int = typer.Option(4, "--qd", min=1, help="io_uring queue depth"),
             readahead: str = typer.Option("128k", "--readahead",
                                           help="the target's read_ahead_kb: the window a fault reads (mmap) and "
                                                "mmap-willneed's request; measured cells of another are left out"),
             predict_p: float = typer.Option(1.0, "--predict-p", min=0.0, max=1.0, help="prefetch accuracy"),
             compute_ms: float = ComputeOpt, mmap_inflight: str = InflightOpt, mmap_io: str = FaultOpt,
             targets_dir: Path = TargetsDirOpt, fmt: str = FormatOpt, ladder_runtime: float = RuntimeOpt,
             model_path: str = OnTargetOpt) -> None:
    """Estimate decode tok/s per read strategy (device bytes per token / throughput at the depth it reaches).
    The ladder comes from --set (a set with the target's fio ladder) or --ladder; without either, fio's ladder
    is measured on the model file on the target first (a campaign, ~a minute; its set stays in --results)."""
    if fmt not in ("table", "json"):
        raise UsageError(f"--format: expected table or json, got {fmt!r}")
    _check_target(target, targets_dir)
    info = _inspect(model)
    shape = estimating.model_bytes(info)
    one = _load_set(set_name, results) if set_name is not None else None
    ladder = (_ladder(one, target, ladder_text) if one is not None or ladder_text is not None else
              _measure_ladder(target, model_path or str(model.resolve()), results, targets_dir, ladder_runtime))
    page_cache = _hit_model(shape, trace, routing, budget, hits, tokens, seed)
    knobs = StrategyKnobs(threads=threads, bs_bytes=_size(bs, "bs"), qd=qd,
                          readahead_bytes=_size(readahead, "readahead"),
                          predict_p=predict_p, mmap_inflight=estimating.span_option(mmap_inflight, "mmap-inflight"),
                          mmap_io=estimating.span_option(mmap_io, "mmap-io", size=True))
    rows = [Row(e) for e in estimate_all(shape, ladder, page_cache, knobs,
                                          None if compute_ms is None else compute_ms / 1e3)]
    measured = estimating.measured_decode(one, target, model) if one is not None else []
    for row in rows:
        row.measured = [_compared(row.estimate, m) for m in measured if m.strategy == row.estimate.strategy
                        and (m.read_ahead_kb is None or m.read_ahead_kb * 1024 == knobs.readahead_bytes)]
    if fmt == "json":
        typer.echo(json.dumps(_finite(_as_json(model, target, shape, ladder, page_cache, rows)), indent=1))
        return
    _print(model, target, shape, page_cache, rows, one is not None)


def _compared(e: StrategyEstimate, m: estimating.Measured) -> Compared:
    cold = m.cache != "warm"
    tok_error = range_error(e.tok_s, m.decode_tps) if cold else None
    dev_error = (range_error(e.device_bytes_per_token, m.dev_bytes_per_token)
                 if cold and m.dev_bytes_per_token else None)
    return Compared(m.strategy, m.step, m.variant, m.cache, m.decode_tps, m.requests, m.matched_by, tok_error,
                    m.dev_bytes_per_token, dev_error, m.inflight, m.io_bytes, m.read_ahead_kb)


def _check_target(name: str, targets_dir: Path | None) -> None:
    from harness.boards.inventory import load_targets

    inventory = load_targets(targets_dir)
    if name not in inventory:
        raise UsageError(f"--target: no target {name!r} (targets: {', '.join(sorted(inventory)) or 'none'})")


def _inspect(model: Path) -> Any:
    from harness.models.inspect import inspect_gguf

    if not model.is_file():
        raise UsageError(f"{model}: no such file")
    return inspect_gguf(model)


def _load_set(name: str, results: Path) -> Any:
    from harness.results.loader import find_result_set, load_result_set

    return load_result_set(find_result_set(name, results))


def _ladder(one: Any, target: str, text: str | None) -> Ladder:
    if text is not None:
        return estimating.parse_ladder(text)
    return estimating.set_ladder(one, target)


def _measure_ladder(target: str, model_path: str, results: Path, targets_dir: Path | None,
                    runtime_s: float) -> Ladder:
    from harness.commands.estimate_ladder import run_ladder

    return run_ladder(target, model_path, results, targets_dir, runtime_s)


def _hit_model(shape: ModelBytes, trace: Path | None, routing: str | None, budget: str | None, hits: str | None,
               tokens: int, seed: int) -> HitModel:
    if hits is not None and (trace is not None or routing is not None):
        raise UsageError("--hits gives the hit share; --trace and --routing model it: give one of them")
    if trace is not None and routing is not None:
        raise UsageError("--trace and --routing both give the routing: give one")
    if hits is not None:
        return estimating.given_hits(hits)
    if trace is None and routing is None:
        if budget is not None:
            raise UsageError("--budget needs a routing to cache: --trace TRACE or --routing uniform|zipf[:S]")
        return HitModel(Span.of(0.0), "none assumed: no --trace, --routing or --hits, so every expert byte "
                                      "comes from the device (a cold page cache)")
    if budget is None:
        raise UsageError("--trace/--routing need --budget SIZE (the memory the experts may be cached in)")
    return estimating.routed_hits(shape, trace, routing, _size(budget, "budget"), tokens, seed)


def _size(text: str, option: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise UsageError(f"--{option}: {exc}") from None
    if value <= 0:
        raise UsageError(f"--{option}: expected a positive size, got {text!r}")
    return value


def _finite(value: Any) -> Any:
    """JSON has no infinity (a ceiling with nothing to read and no compute): null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _as_json(model: Path, target: str, shape: ModelBytes, ladder: Ladder, hits: HitModel,
             rows: list[Row]) -> dict[str, Any]:
    return {"model": str(model), "target": target, "model_bytes": asdict(shape), "ladder": asdict(ladder),
            "hits": {"share": asdict(hits.share), "source": hits.source},  # not the trace it was computed on
            "strategies": [{**asdict(r.estimate), "measured": [asdict(m) for m in r.measured]} for r in rows]}


def _print(model: Path, target: str, shape: ModelBytes, hits: HitModel, rows: list[Row], with_set: bool) -> None:
    console.print(f"[bold]decode estimate[/]: {model.name} on {target}: {shape.expert_bytes_per_token / MB:.0f} MB "
                  f"of experts per token, {hits.share.text('{:.0%}')} served from memory", highlight=False)
    for row in rows:
        e = row.estimate
        table = Table(title=f"{e.strategy}" + ("  (clamped to the ladder)" if e.clamped else ""),
                      title_justify="left")
        for column in ("figure", "estimate", "measured", "error"):
            table.add_column(column, justify="left" if column == "figure" else "right")
        device = Span(e.device_bytes_per_token.low / MB, e.device_bytes_per_token.high / MB)
        table.add_row("device MB per token", device.text("{:.1f}"), "", "")
        table.add_row("throughput MB/s", e.throughput_mb_s.text("{:.0f}"), "", "")
        table.add_row("decode ceiling tok/s", e.tok_s.text(), "", "")
        for m in (m for m in row.measured if m.cache != "warm"):
            table.add_row(f"{m.step} {m.variant} ({m.requests} req.): tok/s", "", f"{m.measured_tok_s:.2f}",
                          _error(m.error))
            if m.dev_bytes_per_token is not None:
                pattern = (f" ({m.inflight:.1f} in flight, {m.io_bytes / 1024:.0f} KiB)"
                           if m.inflight and m.io_bytes else "")
                table.add_row(f"  device MB per token{pattern}", "", f"{m.dev_bytes_per_token / MB:.1f}",
                              _error(m.dev_bytes_error))
        console.print(table)
        for sentence in e.assumptions:
            console.print(f"  - {sentence}", highlight=False, markup=False)
    warm = sum(m.cache == "warm" for r in rows for m in r.measured)
    if warm:
        console.print(f"{warm} warm measured cells left out of the tables (the model resident before decode: not "
                      "what the estimate models; in --format json)", highlight=False)
    if with_set and not any(r.measured for r in rows):
        console.print("no measured decode of this model on this target in the set (matched by the manifest's "
                      "file record: quick hash, or the same GGUF layout and size)", highlight=False)


def _error(value: float | None) -> str:
    if value is None:
        return ""
    return "in range" if value == 0 else f"{value:+.0%}"


def register(app: typer.Typer) -> None:
    app.command()(estimate)
