"""Synthetic ``qwen3moe`` GGUF files with random weights, for measuring expert streaming without a download.

The weights are noise, but the file is a real model to llama.cpp: it loads, routes tokens through
``expert_used_count`` of ``expert_count`` experts per layer and generates (nonsense) text. What matters for
the harness is the byte layout: routed expert tensors dominate the file, as in real MoE models, so decoding
reads a small, changing subset of a large file.

Every tensor's bytes are a pure function of (seed, tensor index, expert), see ``tensor_data``; tests
regenerate single expert slices to check the offsets reported by ``inspect_gguf``. A ``routing`` other than the
default ``narrow`` (``uniform``, ``zipf:S``) reshapes the few tensors that decide which experts the router picks,
see ``harness.models.routing``; ``narrow`` files are byte for byte those written before routing existed.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, quants
from gguf.constants import GGML_QUANT_SIZES

from harness.models import tokenizer as tok
from harness.models.errors import ModelError
from harness.models.routing import Routing, RoutingPlan, parse_routing, plan_routing

ARCH = "qwen3moe"
# Bump whenever the same arguments would write different bytes (callers key their model caches on it).
# 2: automatic layer count capped at 32.
# A routing other than the default "narrow" changes bytes too; callers add it to their keys (narrow keeps them).
FORMAT_VERSION = 2
ROUTING_KEY = "harness.synth.routing"  # GGUF metadata: the routing asked for (absent: narrow)
QUANTS: dict[str, tuple[GGMLQuantizationType, LlamaFileType]] = {
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
}
ALIGNMENT = 32             # GGUF default; GGUFWriter pads every tensor to it
SIZE_TOLERANCE = 0.05
# 32, not 48: llama.cpp labels any 48-layer qwen3moe "30B.A3B" (and 94 "235B.A22B"), which misleads in reports
_MAX_AUTO_LAYERS = 32


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]        # numpy order: slowest-varying first (the reverse of GGUF's ne)
    qtype: GGMLQuantizationType
    index: int                    # position in the file; part of the RNG seed
    fill: str = "normal"          # "normal" (scaled noise) or "ones" (norm weights)

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.qtype]
        return math.prod(self.shape) // block * size

    @property
    def is_expert(self) -> bool:
        return self.name.endswith("_exps.weight")


@dataclass
class SynthInfo:
    path: str
    architecture: str
    quant: str
    layers: int
    experts: int
    used: int
    hidden: int
    ff: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    tokenizer: str
    seed: int
    routing: str
    file_bytes: int
    expert_bytes: int             # all routed-expert tensors
    dense_bytes: int              # every other tensor
    expert_bytes_per_token: int   # used/experts of the expert bytes: what one decoded token touches
    target_bytes: int | None = None
    seconds: float = 0.0
    tensors: list[TensorSpec] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tensors"] = [{"name": t.name, "shape": list(t.shape), "type": t.qtype.name, "nbytes": t.nbytes}
                        for t in self.tensors]
        return d


def _plan(*, layers: int, experts: int, hidden: int, ff: int, heads: int, kv_heads: int, head_dim: int,
          n_vocab: int, qtype: GGMLQuantizationType, untied: bool = False) -> list[TensorSpec]:
    f32 = GGMLQuantizationType.F32
    specs: list[tuple[str, tuple[int, ...], GGMLQuantizationType, str]] = [
        ("token_embd.weight", (n_vocab, hidden), qtype, "normal")]
    for i in range(layers):
        b = f"blk.{i}"
        specs += [
            (f"{b}.attn_norm.weight", (hidden,), f32, "ones"),
            (f"{b}.attn_q.weight", (heads * head_dim, hidden), qtype, "normal"),
            (f"{b}.attn_k.weight", (kv_heads * head_dim, hidden), qtype, "normal"),
            (f"{b}.attn_v.weight", (kv_heads * head_dim, hidden), qtype, "normal"),
            (f"{b}.attn_output.weight", (hidden, heads * head_dim), qtype, "normal"),
            (f"{b}.attn_q_norm.weight", (head_dim,), f32, "ones"),
            (f"{b}.attn_k_norm.weight", (head_dim,), f32, "ones"),
            (f"{b}.ffn_norm.weight", (hidden,), f32, "ones"),
            # The router stays F32 as in llama.cpp's own quantizations (tiny; routing is precision-sensitive).
            (f"{b}.ffn_gate_inp.weight", (experts, hidden), f32, "normal"),
            (f"{b}.ffn_gate_exps.weight", (experts, ff, hidden), qtype, "normal"),
            (f"{b}.ffn_up_exps.weight", (experts, ff, hidden), qtype, "normal"),
            (f"{b}.ffn_down_exps.weight", (experts, hidden, ff), qtype, "normal"),
        ]
    specs.append(("output_norm.weight", (hidden,), f32, "ones"))
    if untied:  # shaped routing: an output head of its own (see harness.models.routing)
        specs.append(("output.weight", (n_vocab, hidden), qtype, "normal"))
    return [TensorSpec(n, s, q, i, fill) for i, (n, s, q, fill) in enumerate(specs)]


def tensor_data(spec: TensorSpec, seed: int, expert: int | None = None,
                shaping: RoutingPlan | None = None) -> np.ndarray:
    """The bytes written for ``spec`` (one expert's slice if ``expert`` is given), as a numpy array.

    Expert tensors are generated per expert so a 1.6 GB model never needs a float32 copy of a whole tensor.
    ``shaping`` (a model with a routing other than narrow) rewrites the tensors that decide routing.
    """
    shape = spec.shape
    if expert is not None:
        shape = shape[1:]
    if spec.fill == "ones":
        values = np.ones(shape, dtype=np.float32)
    else:
        rng = np.random.default_rng([seed, spec.index, 0 if expert is None else expert + 1])
        # 1/sqrt(fan_in) keeps activations O(1) through the layers, so f16 never overflows into inf/nan.
        values = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / math.sqrt(shape[-1]))
    if shaping is not None:
        values = shaping.shape(spec.name, values)
    if spec.qtype == GGMLQuantizationType.F32:
        return values
    if spec.qtype == GGMLQuantizationType.F16:
        return values.astype(np.float16)
    return quants.quantize(values, spec.qtype)


def _write_tensor(w: GGUFWriter, spec: TensorSpec, seed: int, shaping: RoutingPlan | None) -> None:
    if not spec.is_expert:
        w.write_tensor_data(tensor_data(spec, seed, shaping=shaping))
        return
    first = tensor_data(spec, seed, 0, shaping)
    out = np.empty((spec.shape[0], *first.shape), dtype=first.dtype)
    out[0] = first
    for e in range(1, spec.shape[0]):
        out[e] = tensor_data(spec, seed, e, shaping)
    w.write_tensor_data(out)


def _layout(layers: int, ff: int, geo: dict[str, int], n_vocab: int, qtype: GGMLQuantizationType,
            header: int, untied: bool = False) -> tuple[list[TensorSpec], int]:
    specs = _plan(layers=layers, ff=ff, n_vocab=n_vocab, qtype=qtype, untied=untied, **geo)
    data = sum(-(-t.nbytes // ALIGNMENT) * ALIGNMENT for t in specs)
    ti = sum(8 + len(t.name) + 4 + 8 * len(t.shape) + 4 + 8 for t in specs)
    return specs, header + ti + ALIGNMENT + data


def _solve_size(target: int, layers: int | None, ff: int | None, geo: dict[str, int], n_vocab: int,
                qtype: GGMLQuantizationType, header: int, untied: bool = False) -> tuple[int, int]:
    """Pick (layers, ff) so the file lands within SIZE_TOLERANCE of ``target`` with experts dominating."""
    if layers is not None and ff is not None:
        raise ModelError("with a target size give at most one of layers and ff; the other is chosen to fit")
    hidden, experts = geo["hidden"], geo["experts"]
    bpw = GGML_QUANT_SIZES[qtype][1] / GGML_QUANT_SIZES[qtype][0]

    def total(n_layers: int, n_ff: int) -> int:
        return _layout(n_layers, n_ff, geo, n_vocab, qtype, header, untied)[1]

    if ff is not None:
        per_layer = total(2, ff) - total(1, ff)
        layers = max(1, round((target - (total(1, ff) - per_layer)) / per_layer))
    else:
        if layers is None:  # a default expert width of 2 x hidden, then as many layers as that allows
            per_layer = total(2, 2 * hidden) - total(1, 2 * hidden)
            fixed = total(1, 2 * hidden) - per_layer
            layers = min(_MAX_AUTO_LAYERS, max(1, round((target - fixed) / per_layer)))
        per_ff = 3 * experts * hidden * bpw * layers  # bytes per unit of ff, all layers
        base = total(layers, 32) - per_ff * 32
        # quantization blocks of 32 run along ff in ffn_down_exps
        ff = max(32, int(round((target - base) / per_ff / 32)) * 32)
    got = total(layers, ff)
    if abs(got - target) > SIZE_TOLERANCE * target:
        raise ModelError(f"cannot reach {target} bytes (got {got}) with layers={layers}, ff={ff},"
                         f" hidden={hidden}, experts={experts}; change the fixed dimensions")
    return layers, ff


def _checked_quant(quant: str, used: int, experts: int, hidden: int,
                   ff: int | None) -> tuple[GGMLQuantizationType, LlamaFileType]:
    """The GGML types of ``quant``, once the geometry is one llama.cpp can load (ModelError otherwise)."""
    if quant not in QUANTS:
        raise ModelError(f"unknown quant {quant!r}; choose one of {', '.join(QUANTS)}")
    if not 1 <= used <= experts:
        raise ModelError(f"need 1 <= used <= experts, got used={used}, experts={experts}")
    if hidden < 64 or hidden % 64:
        raise ModelError(f"hidden must be a positive multiple of 64 (attention heads of 64), got {hidden}")
    if ff is not None and (ff < 32 or ff % 32):
        raise ModelError(f"ff must be a positive multiple of 32 (quantization blocks), got {ff}")
    return QUANTS[quant]


def _geometry(experts: int, hidden: int) -> dict[str, int]:
    head_dim = 64
    heads = hidden // head_dim
    kv_heads = max(1, heads // 4) if heads % 4 == 0 else heads  # GQA like Qwen3 where the head count allows
    return {"experts": experts, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}


def _add_metadata(w: GGUFWriter, geo: dict[str, int], *, layers: int, ff: int, used: int, quant: str, seed: int,
                  tokenizer: Any, context_length: int, routing: Routing) -> None:
    """The architecture keys, the description (every parameter), the routing if shaped, and the tokenizer."""
    qtype, ftype = QUANTS[quant]
    params = {"layers": layers, "experts": geo["experts"], "used": used, "hidden": geo["hidden"], "ff": ff,
              "quant": quant, "seed": seed, "tokenizer": tokenizer.source}
    if routing.shaped:  # narrow writes no key, so its files stay byte-identical to those written before routing
        params["routing"] = str(routing)
    w.add_name("harness synthetic qwen3moe")
    w.add_description("harness synth_moe " + json.dumps(params, sort_keys=True))
    if routing.shaped:
        w.add_string(ROUTING_KEY, str(routing))
    w.add_file_type(int(ftype))
    if qtype != GGMLQuantizationType.F16:
        w.add_quantization_version(2)
    w.add_context_length(context_length)
    w.add_embedding_length(geo["hidden"])
    w.add_block_count(layers)
    w.add_head_count(geo["heads"])
    w.add_head_count_kv(geo["kv_heads"])
    w.add_key_length(geo["head_dim"])
    w.add_value_length(geo["head_dim"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    w.add_expert_count(geo["experts"])
    w.add_expert_used_count(used)
    w.add_expert_feed_forward_length(ff)
    for key, kv in tokenizer.kv.items():
        w.add_key_value(key, kv.value, kv.vtype, kv.sub_type)


def _write_gguf(out: Path, specs: list[TensorSpec], seed: int, add_metadata: Callable[[GGUFWriter], None],
                shaping: RoutingPlan | None = None) -> None:
    """Metadata, tensor infos, then the tensors one at a time; the file appears under ``out`` only when whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # never leave a half-written file under the real name
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    w = GGUFWriter(tmp, ARCH)
    try:
        add_metadata(w)
        for s in specs:
            w.add_tensor_info(s.name, s.shape, np.dtype(np.float32), s.nbytes, raw_dtype=s.qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for s in specs:  # one tensor in memory at a time
            _write_tensor(w, s, seed, shaping)
        w.close()
        os.replace(tmp, out)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise


def _shaping(routing: Routing, tokenizer: Any, *, seed: int, layers: int, experts: int, used: int, hidden: int,
             qtype: GGMLQuantizationType) -> RoutingPlan | None:
    """The routing plan of a shaped model (None for narrow), walking only the tokenizer's normal tokens."""
    if not routing.shaped:
        return None
    types = tokenizer.kv.get("tokenizer.ggml.token_type")
    eos = tokenizer.kv.get("tokenizer.ggml.eos_token_id")
    return plan_routing(routing, seed=seed, layers=layers, experts=experts, used=used, hidden=hidden,
                        n_vocab=tokenizer.n_vocab, qtype=qtype,
                        token_types=None if types is None else list(types.value),
                        eos=None if eos is None else int(eos.value))


def synth_moe(
    out: Path,
    *,
    size_bytes: int | float | None = None,
    layers: int | None = None,
    experts: int = 8,
    used: int = 2,
    hidden: int = 256,
    ff: int | None = None,
    quant: str = "f16",
    vocab: int | Path = 512,
    seed: int = 0,
    context_length: int = 4096,
    routing: str | Routing = "narrow",
) -> SynthInfo:
    """Write a random-weight qwen3moe GGUF to ``out`` and describe it.

    Without ``size_bytes`` the defaults are 4 layers and ff = 512. With it, whichever of ``layers``/``ff`` is
    not given is chosen so the file is within 5 % of the target. ``vocab`` is a token count for a generated
    byte-level BPE, or the path of a vocab-only GGUF whose tokenizer is copied. ``routing`` is ``narrow``
    (noise, the original writer), ``uniform`` or ``zipf:S`` (see harness.models.routing).
    """
    t0 = time.monotonic()
    out = Path(out)
    routing = routing if isinstance(routing, Routing) else parse_routing(routing)
    qtype, _ = _checked_quant(quant, used, experts, hidden, ff)
    geo = _geometry(experts, hidden)
    tokenizer = tok.from_gguf(Path(vocab)) if isinstance(vocab, (str, Path)) else tok.generated(vocab)
    n_vocab = tokenizer.n_vocab
    header = 24 + tokenizer.header_bytes() + 1024  # + architecture keys and description
    target = int(size_bytes) if size_bytes is not None else None
    if target is not None:
        layers, ff = _solve_size(target, layers, ff, geo, n_vocab, qtype, header, routing.shaped)
    layers = 4 if layers is None else layers
    ff = 512 if ff is None else ff
    if layers < 1:
        raise ModelError(f"layers must be >= 1, got {layers}")
    specs = _plan(layers=layers, ff=ff, n_vocab=n_vocab, qtype=qtype, untied=routing.shaped, **geo)
    shaping = _shaping(routing, tokenizer, seed=seed, layers=layers, experts=experts, used=used, hidden=hidden,
                       qtype=qtype)
    _write_gguf(out, specs, seed, lambda w: _add_metadata(w, geo, layers=layers, ff=ff, used=used, quant=quant,
                                                          seed=seed, tokenizer=tokenizer,
                                                          context_length=context_length, routing=routing),
                shaping)
    expert = sum(s.nbytes for s in specs if s.is_expert)
    return SynthInfo(
        path=str(out), architecture=ARCH, quant=quant, layers=layers, experts=experts, used=used,
        hidden=hidden, ff=ff, heads=geo["heads"], kv_heads=geo["kv_heads"], head_dim=geo["head_dim"],
        vocab_size=n_vocab, tokenizer=tokenizer.source,
        seed=seed, routing=str(routing), file_bytes=out.stat().st_size, expert_bytes=expert,
        dense_bytes=sum(s.nbytes for s in specs) - expert, expert_bytes_per_token=expert * used // experts,
        target_bytes=target, seconds=round(time.monotonic() - t0, 2), tensors=specs,
    )
