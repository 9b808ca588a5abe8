"""Routing a synthetic qwen3moe on purpose: which experts its router picks, as a distribution asked for.

With noise weights the residual stream is dominated by the attention and expert outputs, which change slowly
from token to token, so the router keeps picking much the same few experts ("narrow", the writer's original
behaviour, kept byte for byte). A shaped model instead reserves the first ``reserved`` coordinates of the
residual stream for the token's identity:

* ``token_embd`` writes there a constant 1 (coordinate 0, the router's bias input) and a random code per
  token; ``attn_output`` and ``ffn_down_exps`` have zero rows there, so no layer overwrites them and every
  layer's router sees exactly the current token's code (scaled by RMSNorm, which leaves a ranking unchanged);
* ``ffn_gate_inp`` reads only those coordinates: random weights on the code plus a per-expert bias on the
  constant, the biases fitted here so that over the vocabulary each expert is chosen as often as the asked
  distribution says (``uniform``, or ``zipf:S``: the r-th most popular expert of a layer gets a share of the
  selections proportional to r^-S; each layer has its own popularity order);
* an untied ``output.weight`` makes greedy decoding walk a fixed random cycle through the vocabulary (the
  next token is the current one's successor), so decoding never sticks on one token and consecutive tokens
  route independently, as the real traces show (the previous token predicts no better than popularity).

Everything is a pure function of (seed, geometry, tokenizer) and is computed on the values llama.cpp reads
back (codes rounded through the file's quantization), so the fit is the router's real choice distribution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType, quants

from harness.models.errors import ModelError

_ROUTING_RE = re.compile(r"^(narrow|uniform|zipf(?::(\d+(?:\.\d+)?))?)$")
# ``zipf`` alone: the exponent whose routing, measured like the real traces (Qwen3-30B-A3B, Gemma-4-26B-A4B at
# 128 experts, 6 used, over 24 decoded tokens), comes closest to theirs; see the routing table in docs/measurements.md
DEFAULT_ZIPF_S = 1.25
_POOL = 4096          # tokens the biases are fitted on (the whole vocabulary when smaller)
_FIT_STEPS = 300
TOKEN_NORMAL = 1


@dataclass(frozen=True)
class Routing:
    """``narrow`` (unshaped noise), ``uniform`` or ``zipf`` with exponent ``s``."""

    kind: str = "narrow"
    s: float = 0.0

    def __str__(self) -> str:
        return f"zipf:{self.s:g}" if self.kind == "zipf" else self.kind

    @property
    def shaped(self) -> bool:
        return self.kind != "narrow"


def parse_routing(text: str) -> Routing:
    """``narrow``, ``uniform``, ``zipf:S`` (S >= 0, e.g. zipf:1.1) or ``zipf`` (DEFAULT_ZIPF_S); ModelError
    otherwise."""
    match = _ROUTING_RE.match(str(text).strip())
    if match is None:
        raise ModelError(f"routing: expected narrow, uniform, zipf or zipf:S (e.g. zipf:1.1), got {text!r}")
    if match.group(1).startswith("zipf"):
        return Routing("zipf", float(match.group(2)) if match.group(2) is not None else DEFAULT_ZIPF_S)
    return Routing(match.group(1))


def reserved_dims(hidden: int) -> int:
    """Residual coordinates kept for the token code: whole quantization blocks of 32, at most a quarter."""
    return 64 if hidden >= 256 else 32


def target_inclusion(experts: int, used: int, s: float) -> np.ndarray:
    """Per popularity rank, the probability that one token's top-``used`` contains that expert.

    Shares of selections proportional to rank^-s, times ``used``; a share that would exceed one selection per
    token is capped at 1 and the excess spread over the others in proportion (water filling)."""
    weights = np.arange(1, experts + 1, dtype=np.float64) ** -s
    incl = np.zeros(experts)
    capped = np.zeros(experts, dtype=bool)
    for _ in range(experts):
        free = used - capped.sum()
        incl[~capped] = weights[~capped] / weights[~capped].sum() * free
        incl[capped] = 1.0
        over = incl > 1.0
        if not over.any():
            break
        capped |= over
    return incl


def _as_read(values: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """``values`` as llama.cpp will read them back from a tensor of type ``qtype``."""
    if qtype == GGMLQuantizationType.F32:
        return values
    if qtype == GGMLQuantizationType.F16:
        return values.astype(np.float16).astype(np.float32)
    return quants.dequantize(quants.quantize(values, qtype), qtype).astype(np.float32)


def _top(scores: np.ndarray, used: int) -> np.ndarray:
    return np.argpartition(-scores, used - 1, axis=1)[:, :used]


def fit_biases(codes: np.ndarray, weights: np.ndarray, target: np.ndarray, used: int) -> np.ndarray:
    """Biases b such that top-``used`` of ``codes @ weights.T + b`` picks expert e in a ``target[e]`` share
    of the rows (multiplicative updates on the log ratio; the best of the steps is kept)."""
    base = codes @ weights.T
    bias = np.log(target + 1e-9)
    best, best_err = bias.copy(), np.inf
    for _ in range(_FIT_STEPS):
        counts = np.bincount(_top(base + bias, used).ravel(), minlength=len(target)) / len(codes)
        err = np.abs(counts - target).sum()
        if err < best_err:
            best, best_err = bias.copy(), err
        bias += 0.5 * (np.log(target + 1e-4) - np.log(counts + 1e-4))
    return best


@dataclass
class RoutingPlan:
    """The shaped tensors of one synthetic model (see the module text)."""

    routing: Routing
    reserved: int
    hidden: int
    codes: np.ndarray        # (n_vocab, reserved) f32, column 0 = 1: what token_embd holds there
    gates: list[np.ndarray]  # per layer (experts, reserved) f32: the router's only non-zero columns
    successor: np.ndarray    # (n_vocab,) greedy next token; -1 for tokens outside the walk

    def shape(self, name: str, values: np.ndarray) -> np.ndarray:
        """``values`` (a tensor's noise, or one expert's slice) as the shaped model has it."""
        r = self.reserved
        if name == "token_embd.weight":
            values[:, :r] = self.codes
        elif name.endswith(".ffn_gate_inp.weight"):
            values = np.zeros_like(values)
            values[:, :r] = self.gates[int(name.split(".")[1])]
        elif name.endswith((".attn_output.weight", ".ffn_down_exps.weight")):
            values[..., :r, :] = 0.0  # nothing overwrites the token code in the residual stream
        elif name == "output.weight":
            values = np.zeros_like(values)
            walk = self.successor >= 0
            # logit(successor(t)) = code(t) . code(t) beats code(t) . code(u) for every other u
            values[self.successor[walk], 1:r] = self.codes[walk, 1:r]
        return values


def _walk(tokenizer_types: list[int] | None, n_vocab: int, eos: int | None,
          rng: np.random.Generator) -> np.ndarray:
    """A random cycle through every normal token (control tokens and EOS are never produced)."""
    ids = np.arange(n_vocab)
    normal = np.ones(n_vocab, dtype=bool) if tokenizer_types is None else np.asarray(tokenizer_types) == TOKEN_NORMAL
    if eos is not None and 0 <= eos < n_vocab:
        normal[eos] = False
    order = rng.permutation(ids[normal])
    successor = np.full(n_vocab, -1, dtype=np.int64)
    successor[order] = np.roll(order, -1)
    return successor


def plan_routing(routing: Routing, *, seed: int, layers: int, experts: int, used: int, hidden: int,
                 n_vocab: int, qtype: GGMLQuantizationType, token_types: list[int] | None = None,
                 eos: int | None = None) -> RoutingPlan:
    """The shaped router, token codes and walk for ``routing`` (a ``narrow`` routing is not planned)."""
    if not routing.shaped:
        raise ModelError("narrow routing is the unshaped model; there is nothing to plan")
    r = reserved_dims(hidden)
    rng = np.random.default_rng([seed, 0x5EED, 1])
    codes = rng.standard_normal((n_vocab, r), dtype=np.float32)
    codes[:, 0] = 1.0
    codes = _as_read(codes, qtype)
    successor = _walk(token_types, n_vocab, eos, rng)
    walk_tokens = np.flatnonzero(successor >= 0)
    pool = walk_tokens if len(walk_tokens) <= _POOL else rng.choice(walk_tokens, _POOL, replace=False)
    target_by_rank = target_inclusion(experts, used, routing.s if routing.kind == "zipf" else 0.0)
    gates = []
    for layer in range(layers):
        layer_rng = np.random.default_rng([seed, 0x5EED, 2, layer])
        weights = layer_rng.standard_normal((experts, r - 1)).astype(np.float32) / np.float32(np.sqrt(r))
        target = target_by_rank[np.argsort(layer_rng.permutation(experts))]  # this layer's popularity order
        bias = fit_biases(codes[pool, 1:], weights, target, used)
        gates.append(np.column_stack([bias, weights]).astype(np.float32))
    return RoutingPlan(routing=routing, reserved=r, hidden=hidden, codes=codes, gates=gates, successor=successor)


def planned_inclusion(plan: RoutingPlan, layer: int, used: int) -> np.ndarray:
    """Per expert, the share of walk tokens whose top-``used`` at ``layer`` contains it (what the fit reached)."""
    walk = np.flatnonzero(plan.successor >= 0)
    scores = plan.codes[walk] @ plan.gates[layer].T
    return np.bincount(_top(scores, used).ravel(), minlength=plan.gates[layer].shape[0]) / len(walk)
