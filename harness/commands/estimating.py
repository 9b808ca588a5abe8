"""What ``harness estimate`` reads: the model's bytes, a fio ladder (from a result set or ``--ladder``), a
cache-hit model (a trace and a budget, or a given share) and the measured decode of the same model and target in
the set. The arithmetic itself is ``harness.analysis.estimate``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.estimate import HitModel, ModelBytes, Span, trace_hits
from harness.analysis.ladder import MB, Ladder, LadderPoint
from harness.errors import UsageError
from harness.results.loader import ResultSet
from harness.results.selection import usable_runs
from harness.units import parse_size

if TYPE_CHECKING:
    import pandas as pd

    from harness.models.inspect import ModelInfo

# which strategy an engine's decode is: llama.cpp streams by mmap, BigMoeOnEdge reads routed experts into a cache
ENGINE_STRATEGY = {"llama-server": "mmap", "bmoe": "direct-cache"}
DECODE_STEPS = ("llama-server", "bmoe", "replay")
_RUNG = re.compile(r"^\s*([0-9.]+[kKmMgG]?)(?:i?[bB])?:([0-9.]+)\s*=\s*([0-9.]+)\s*$")


@dataclass(frozen=True)
class Measured:
    """The measured decode of one cell's runs of this model on this target, in the set (medians per request)."""

    strategy: str
    step: str
    variant: str  # the cell's label (matrix values, cache)
    cache: str
    decode_tps: float
    requests: int
    runs: int
    matched_by: str
    dev_bytes_per_token: float | None = None  # decode's device bytes per token (block stats)
    inflight: float | None = None  # decode's average requests in flight
    io_bytes: float | None = None  # decode's average read request
    read_ahead_kb: int | None = None  # the runs' read_ahead_kb where the matrix set it


def model_bytes(info: ModelInfo) -> ModelBytes:
    if not info.expert_tensors or not info.expert_count or not info.expert_used_count:
        raise UsageError(f"{info.path}: no routed-expert tensors (not a MoE GGUF): nothing streams per token")
    layers = sorted(info.expert_bytes_per_layer)
    kinds = len({t.name.split(".")[2] for t in info.expert_tensors})
    return ModelBytes(info.expert_bytes_per_token, len(layers), info.expert_count, info.expert_used_count,
                      tensors_per_expert=kinds, expert_bytes_per_layer=tuple(info.expert_bytes_per_layer[k]
                                                                              for k in layers),
                      source=f"{Path(info.path).name}, its GGUF header")


def parse_ladder(text: str) -> Ladder:
    """``64k:1=200,64k:2=465,128k:8=1618``: block size, queue depth, MB/s per rung."""
    points = []
    for index, rung in enumerate(filter(None, (r.strip() for r in text.split(",")))):
        match = _RUNG.match(rung)
        if not match:
            raise UsageError(f"--ladder: rung {index + 1} {rung!r}: expected BS:QD=MBPS, e.g. 64k:1=200")
        bs, qd, mb_s = parse_size(match[1]), float(match[2]), float(match[3])
        if bs <= 0 or qd <= 0 or mb_s <= 0:
            raise UsageError(f"--ladder: rung {index + 1} {rung!r}: block size, depth and MB/s must be positive")
        points.append(LadderPoint(bs, qd, mb_s))
    if not points:
        raise UsageError("--ladder: no rungs (expected BS:QD=MBPS,..., e.g. 64k:1=200,64k:4=778)")
    return Ladder(tuple(points), "--ladder")


def set_ladder(one: ResultSet, target: str) -> Ladder:
    """The target's fio read jobs in the set: per job, the median read MB/s of its usable runs (O_DIRECT jobs
    only when there are any: a buffered job on a warm file measures the page cache)."""
    fio, source = _fio_reads(_usable_rows(one, "fio", target)), f"fio in {one.set_id} on {target}"
    if fio.empty:  # every run perturbed (a busy machine): better a marked ladder than none
        fio, source = _fio_reads(_usable_rows(one, "fio", target, True)), source + ", perturbed runs included"
    if fio.empty:
        having = sorted(set(one.table("fio").get("target", [])))
        raise UsageError(f"{one.path}: no fio read rows of target {target!r} (targets with a ladder: "
                         f"{', '.join(having) or 'none'}): run experiments/storage-baseline.yaml there")
    fio = fio.assign(qd=fio["iodepth"] * fio["numjobs"].fillna(1))
    points = []
    for (name, bs, qd), rows in fio.groupby(["job_name", "bs_bytes", "qd"], sort=False):
        points.append(LadderPoint(int(bs), float(qd), float(rows["read_bw_bytes_per_s"].median()) / MB, str(name)))
    return Ladder(tuple(points), source)


def _fio_reads(fio: pd.DataFrame) -> pd.DataFrame:
    if fio.empty:
        return fio
    fio = fio[fio["rw"].isin(["read", "randread"]) & (fio["read_bw_bytes_per_s"].fillna(0) > 0)]
    if "error" in fio:
        fio = fio[fio["error"].fillna(0) == 0]
    if "direct" in fio and (fio["direct"] == 1).any():
        fio = fio[fio["direct"] == 1]
    return fio


def _usable_rows(one: ResultSet, table: str, target: str, include_perturbed: bool = False) -> pd.DataFrame:
    rows = one.table(table)
    if rows.empty or "target" not in rows:
        return rows
    runs = usable_runs(one.table("runs"), include_perturbed)
    if runs.empty:
        return rows.iloc[0:0]
    keep = set(runs.loc[runs["target"] == target, "run_id"])
    return rows[(rows["target"] == target) & rows["run_id"].isin(keep)]


def given_hits(text: str) -> HitModel:
    """``--hits 0.53:0.75`` (or one value): the share of expert bytes served from memory."""
    try:
        values = [float(v) for v in text.split(":")]
    except ValueError:
        raise UsageError(f"--hits: expected SHARE or LOW:HIGH in 0..1, got {text!r}") from None
    if len(values) not in (1, 2) or not all(0 <= v <= 1 for v in values):
        raise UsageError(f"--hits: expected SHARE or LOW:HIGH in 0..1, got {text!r}")
    return HitModel(Span.of(*values), "given with --hits")


def span_option(text: str, option: str, *, size: bool = False) -> Span:
    """``LOW:HIGH`` or one value; sizes (``70k:84k``) with ``size``."""
    try:
        values = [float(parse_size(v)) if size else float(v) for v in text.split(":")]
    except ValueError:
        raise UsageError(f"--{option}: expected VALUE or LOW:HIGH, got {text!r}") from None
    if len(values) not in (1, 2) or min(values) <= 0:
        raise UsageError(f"--{option}: expected VALUE or LOW:HIGH (positive), got {text!r}")
    return Span.of(*values)


def routed_hits(model: ModelBytes, trace_path: Path | None, routing: str | None, budget: int, tokens: int,
                seed: int) -> HitModel:
    """The hit share of an LRU of ``budget`` on a recorded trace, or one synthesized for the model's geometry."""
    from harness.traces.model import read_trace
    from harness.traces.synth import synth_trace

    if trace_path is not None:
        trace = read_trace(trace_path)
        trace.check_fits(model.n_layer, model.n_expert, model.n_used, str(trace_path))
        return trace_hits(trace, budget, model, f"the trace {trace_path.name}")
    from harness.models.errors import ModelError
    from harness.models.routing import parse_routing

    assert routing is not None
    try:
        shape = parse_routing(routing)  # the synthetic models' spelling: zipf alone is DEFAULT_ZIPF_S
    except ModelError:
        shape = None
    if shape is None or shape.kind == "narrow":
        raise UsageError(f"--routing: expected uniform, zipf or zipf:S (e.g. zipf:1.1), got {routing!r}")
    trace = synth_trace(model.n_layer, model.n_expert, model.n_used, tokens, s=shape.s, seed=seed)
    return trace_hits(trace, budget, model, f"a synthetic {shape} trace (seed {seed})")


def model_record(one: ResultSet, target: str, model: Path) -> tuple[str, str] | None:
    """(the set's file name, how it matched) when the target's one GGUF in the set is this model; None when the
    set has none of it (or several GGUFs, whose runs cannot be told apart here)."""
    from harness.campaign.files import describe_model_file

    records = {name: r for name, r in one.manifest.get("files", {}).get(target, {}).items()
               if isinstance(r, dict) and "gguf" in r}
    if len(records) != 1:
        return None
    [(name, record)] = records.items()
    ours = describe_model_file(model)
    if record.get("quick_sha256") == ours.get("quick_sha256"):
        return name, "the same file (quick hash)"
    if record.get("gguf") == ours.get("gguf") and record.get("size_bytes") == model.stat().st_size:
        return name, "the same layout and size (GGUF header), another copy"
    return None


def measured_decode(one: ResultSet, target: str, model: Path) -> list[Measured]:
    """Per cell (variant) of the usable decode runs of this model on ``target``: median decode tok/s and, where
    the block stats were taken, device bytes per token, requests in flight and request size."""
    from harness.results.variants import variants

    matched = model_record(one, target, model)
    requests = _usable_rows(one, "requests", target)
    if matched is None or requests.empty or "decode_tps" not in requests:
        return []
    runs = one.table("runs")
    runs = runs[runs["run_id"].isin(set(requests["run_id"])) & runs["step"].isin(DECODE_STEPS)]
    runs = runs.assign(variant=variants(runs, list(one.manifest.get("matrix") or {})))
    # the run's step, cache condition and cell are the runs table's (a requests row may carry its own copy)
    keep = [c for c in ("run_id", "step", "cache", "variant", "strategy", "read_ahead_kb") if c in runs]
    rows = requests.drop(columns=[c for c in keep if c in requests and c != "run_id"]).merge(runs[keep], on="run_id")
    out: list[Measured] = []
    for (variant, step, cache), group in rows.groupby(["variant", "step", "cache"], sort=True):
        strategy = _strategy(group, str(step))
        tps = group["decode_tps"].dropna()
        if strategy and not tps.empty:
            readahead = _median(group, "read_ahead_kb")
            out.append(Measured(strategy, str(step), str(variant), str(cache), float(tps.median()), len(tps),
                                group["run_id"].nunique(), matched[1],
                                _median(group, "decode_dev_read_bytes_per_token"),
                                _median(group, "decode_dev_avg_inflight"),
                                _median(group, "decode_dev_avg_read_io_bytes"),
                                None if readahead is None else int(readahead)))
    return out


def _median(rows: pd.DataFrame, column: str) -> float | None:
    values = rows[column].dropna() if column in rows else None
    return None if values is None or values.empty else float(values.median())


def _strategy(rows: pd.DataFrame, step: str) -> str:
    """Which strategy a cell measured: the replay's own column (its summary's ``replay_strategy``, or a matrix
    value ``strategy``), else the engine's way of reading."""
    for column in ("replay_strategy", "strategy"):
        if column in rows and rows[column].notna().any():
            return str(rows[column].dropna().iloc[0])
    return ENGINE_STRATEGY.get(step, "")
