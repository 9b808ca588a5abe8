"""What a GGUF costs to stream: expert vs dense bytes, expert bytes per token, each expert slice's byte range.

Works on any GGUF from its header alone (see gguf_header: no tensor page is read). Routed-expert tensors are
recognised by name (``blk.N.<name>_exps.*``, also ``_chexps``) and by their slowest-varying dimension being
the expert count; shared experts (``_shexp``), routers and everything else count as dense.

Layout fact used for slices: ggml stores ne[0] fastest, so in a 3-D ``[ne0, ne1, n_expert]`` tensor expert e
occupies the contiguous bytes ``[e * nbytes / n_expert, (e + 1) * nbytes / n_expert)``.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES

from harness.models.errors import ModelError
from harness.models.gguf_header import RawTensor, read_header

_EXPERT_RE = re.compile(r"^blk\.(\d+)\.([A-Za-z0-9_]+_(?:ch)?exps)\.")


class ExpertSlice(NamedTuple):
    layer: int
    tensor: str     # full tensor name, e.g. blk.3.ffn_up_exps.weight
    expert: int
    offset: int     # absolute file offset
    length: int     # bytes


@dataclass
class Tensor:
    name: str
    type: str
    ne: list[int]
    offset: int     # absolute file offset
    nbytes: int


@dataclass
class ExpertTensor(Tensor):
    layer: int = 0
    n_experts: int = 0
    slice_bytes: int = 0


@dataclass
class ModelInfo:
    path: str
    file_bytes: int
    gguf_version: int
    architecture: str | None
    name: str | None
    file_type: int | None
    alignment: int
    data_offset: int
    n_tensors: int
    block_count: int | None
    expert_count: int | None
    expert_used_count: int | None
    quant_types: dict[str, int]            # ggml type -> number of tensors
    quant_type_bytes: dict[str, int]       # ggml type -> bytes
    tensor_bytes: int
    expert_bytes: int
    dense_bytes: int
    expert_bytes_per_layer: dict[int, int]  # bytes of ONE expert of that layer (all its expert tensors)
    expert_bytes_per_token: int             # sum over layers of used/experts x the layer's expert bytes
    expert_tensors: list[ExpertTensor] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    header_bytes_read: int = 0

    def expert_slices(self) -> list[ExpertSlice]:
        """One row per (layer, expert tensor, expert), in file order."""
        return [ExpertSlice(t.layer, t.name, e, t.offset + e * t.slice_bytes, t.slice_bytes)
                for t in self.expert_tensors for e in range(t.n_experts)]

    def to_dict(self, *, slices: bool = False, tensors: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not tensors:
            d.pop("tensors")
        if slices:
            d["expert_slices"] = [s._asdict() for s in self.expert_slices()]
        return d


def type_name(t: int) -> str:
    try:
        return GGMLQuantizationType(t).name
    except ValueError:
        return f"type{t}"


def _sizes(tensors: list[RawTensor], data_bytes: int) -> list[int]:
    """Byte size of each tensor; for a type this gguf version does not know, the gap to the next tensor."""
    order = sorted(range(len(tensors)), key=lambda i: tensors[i].offset)
    nxt = {i: tensors[order[k + 1]].offset if k + 1 < len(order) else data_bytes for k, i in enumerate(order)}
    sizes = []
    for i, t in enumerate(tensors):
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(t.ggml_type)]
            sizes.append(math.prod(t.ne) // block * type_size)
        except (ValueError, KeyError):
            sizes.append(max(0, nxt[i] - t.offset))
    return sizes


def _metadata(kv: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in kv.items():
        if isinstance(v, dict):  # summarized large array
            out[k] = {"array_type": v["array"], "n": v["n"]}
        elif isinstance(v, str) and len(v) > 4096:
            out[k] = v[:4096] + "..."
        else:
            out[k] = v
    return out


def inspect_gguf(path: Path) -> ModelInfo:
    """Describe a GGUF from its metadata only; raises ModelError if it is missing or not a GGUF."""
    path = Path(path)
    h = read_header(path)
    file_bytes = os.stat(path).st_size
    if h.tensors and h.data_offset > file_bytes:
        raise ModelError(f"{path}: truncated (header ends past the end of the file)")
    arch = h.kv.get("general.architecture")
    prefix = f"{arch}." if isinstance(arch, str) else "\0"
    n_exp = h.kv.get(prefix + "expert_count")
    n_used = h.kv.get(prefix + "expert_used_count")
    sizes = _sizes(h.tensors, file_bytes - h.data_offset) if h.tensors else []

    candidates = [i for i, t in enumerate(h.tensors) if _EXPERT_RE.match(t.name) and len(t.ne) >= 2]
    if not n_exp and candidates:  # no expert_count key: trust the most common stacking dimension
        n_exp = Counter(h.tensors[i].ne[-1] for i in candidates).most_common(1)[0][0]

    tensors: list[Tensor] = []
    experts: list[ExpertTensor] = []
    for i, t in enumerate(h.tensors):
        tensor = Tensor(name=t.name, type=type_name(t.ggml_type), ne=list(t.ne), offset=h.data_offset + t.offset,
                        nbytes=sizes[i])
        tensors.append(tensor)
        m = _EXPERT_RE.match(t.name)
        if m and len(t.ne) >= 2 and n_exp and t.ne[-1] == n_exp and sizes[i] % n_exp == 0:
            experts.append(ExpertTensor(**vars(tensor), layer=int(m.group(1)), n_experts=n_exp,
                                        slice_bytes=sizes[i] // n_exp))
    experts.sort(key=lambda e: e.offset)

    per_layer: dict[int, int] = {}
    for e in experts:
        per_layer[e.layer] = per_layer.get(e.layer, 0) + e.slice_bytes
    expert_bytes = sum(e.nbytes for e in experts)
    tensor_bytes = sum(sizes)
    qcount = Counter(tensor.type for tensor in tensors)
    qbytes: Counter[str] = Counter()
    for tensor in tensors:
        qbytes[tensor.type] += tensor.nbytes
    used = n_used if isinstance(n_used, int) else 0
    block_count = h.kv.get(prefix + "block_count")
    file_type = h.kv.get("general.file_type")
    return ModelInfo(
        path=str(path), file_bytes=file_bytes, gguf_version=h.version,
        architecture=arch if isinstance(arch, str) else None,
        name=h.kv.get("general.name") if isinstance(h.kv.get("general.name"), str) else None,
        file_type=file_type if isinstance(file_type, int) else None,
        alignment=h.alignment, data_offset=h.data_offset, n_tensors=len(h.tensors),
        block_count=block_count if isinstance(block_count, int) else None,
        expert_count=n_exp or None, expert_used_count=n_used if isinstance(n_used, int) else None,
        quant_types=dict(qcount), quant_type_bytes=dict(qbytes), tensor_bytes=tensor_bytes,
        expert_bytes=expert_bytes, dense_bytes=tensor_bytes - expert_bytes,
        expert_bytes_per_layer=dict(sorted(per_layer.items())),
        expert_bytes_per_token=used * sum(per_layer.values()),
        expert_tensors=experts, tensors=tensors, metadata=_metadata(h.kv),
        header_bytes_read=h.header_bytes_read,
    )
