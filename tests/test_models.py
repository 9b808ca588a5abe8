"""Synthetic MoE GGUFs and metadata-only inspection, checked against the bytes actually written."""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import random
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from harness.models.errors import ModelError
from harness.models.inspect import inspect_gguf
from harness.models.synth import SynthInfo, TensorSpec, synth_moe, tensor_data
from harness.models.tokenizer import from_gguf

QUANTS = ["f16", "q8_0", "q4_0"]


@pytest.fixture(scope="module", params=QUANTS)
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SynthInfo:
    out = tmp_path_factory.mktemp("models") / f"tiny-{request.param}.gguf"
    return synth_moe(out, layers=4, experts=8, used=2, quant=request.param, seed=7)


def _spec(info: SynthInfo, name: str) -> TensorSpec:
    return next(t for t in info.tensors if t.name == name)


def test_inspect_reports_the_synthetic_layout(tiny: SynthInfo) -> None:
    m = inspect_gguf(Path(tiny.path))
    assert m.architecture == "qwen3moe"
    assert (m.block_count, m.expert_count, m.expert_used_count) == (4, 8, 2)
    assert m.file_bytes == Path(tiny.path).stat().st_size == tiny.file_bytes
    qname = {"f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0"}[tiny.quant]
    # token_embd + per layer q, k, v, output and the three expert stacks; norms and routers stay F32
    assert m.quant_types == {qname: 1 + 4 * 7, "F32": 1 + 4 * 5}
    assert len(m.expert_tensors) == 4 * 3
    kinds = {t.name.split(".")[2] for t in m.expert_tensors}
    assert kinds == {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}
    assert m.expert_bytes == tiny.expert_bytes and m.dense_bytes == tiny.dense_bytes
    assert m.expert_bytes > 10 * m.dense_bytes  # decoding is dominated by routed experts, as in real MoEs


def test_expert_and_dense_bytes_sum_to_the_tensor_bytes(tiny: SynthInfo) -> None:
    m = inspect_gguf(Path(tiny.path))
    assert m.expert_bytes + m.dense_bytes == m.tensor_bytes == sum(t.nbytes for t in m.tensors)
    assert sum(m.quant_type_bytes.values()) == m.tensor_bytes
    # the data section holds every tensor (plus alignment padding) and nothing else
    assert m.data_offset + m.tensor_bytes <= m.file_bytes <= m.data_offset + m.tensor_bytes + 32 * m.n_tensors


def test_expert_bytes_per_token_formula(tiny: SynthInfo) -> None:
    m = inspect_gguf(Path(tiny.path))
    per_layer: dict[int, int] = {}
    for t in m.expert_tensors:
        per_layer[t.layer] = per_layer.get(t.layer, 0) + t.nbytes
    expected = sum(used_share for used_share in (b * 2 // 8 for b in per_layer.values()))
    assert m.expert_bytes_per_token == expected == tiny.expert_bytes_per_token
    one_expert = {layer: b // 8 for layer, b in per_layer.items()}
    assert m.expert_bytes_per_layer == one_expert
    # one expert = gate + up (hidden x ff each) + down (ff x hidden) in the file's quantization
    elems = 3 * tiny.hidden * tiny.ff
    block, size = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}[tiny.quant]
    assert set(one_expert.values()) == {elems // block * size}


def test_expert_slices_point_at_the_written_bytes(tiny: SynthInfo) -> None:
    m = inspect_gguf(Path(tiny.path))
    slices = m.expert_slices()
    assert len(slices) == 4 * 3 * 8
    # slices of one tensor tile it exactly, expert-major
    for t in m.expert_tensors:
        mine = [s for s in slices if s.tensor == t.name]
        assert [s.expert for s in mine] == list(range(8))
        assert mine[0].offset == t.offset and sum(s.length for s in mine) == t.nbytes
        assert all(a.offset + a.length == b.offset for a, b in zip(mine, mine[1:], strict=False))
    picks = [slices[0], slices[-1], *random.Random(1).sample(slices, 10)]
    with open(tiny.path, "rb") as f:
        for s in picks:
            f.seek(s.offset)
            got = f.read(s.length)
            want = tensor_data(_spec(tiny, s.tensor), tiny.seed, s.expert).tobytes()
            assert got == want, f"{s.tensor} expert {s.expert} at {s.offset}"


def test_dense_tensor_offsets_match_written_bytes(tiny: SynthInfo) -> None:
    m = inspect_gguf(Path(tiny.path))
    with open(tiny.path, "rb") as f:
        for t in m.tensors:
            if t.name in ("token_embd.weight", "blk.2.attn_q.weight", "blk.3.ffn_gate_inp.weight"):
                f.seek(t.offset)
                assert f.read(t.nbytes) == tensor_data(_spec(tiny, t.name), tiny.seed).tobytes()


def test_synth_is_deterministic_by_seed(tmp_path: Path) -> None:
    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()
    a = synth_moe(tmp_path / "a.gguf", seed=3, layers=2)
    b = synth_moe(tmp_path / "b.gguf", seed=3, layers=2)
    c = synth_moe(tmp_path / "c.gguf", seed=4, layers=2)
    assert digest(Path(a.path)) == digest(Path(b.path)) != digest(Path(c.path))


@pytest.mark.parametrize("quant", ["f16", "q4_0"])
def test_size_target_within_5_percent(tmp_path: Path, quant: str) -> None:
    target = 50_000_000
    info = synth_moe(tmp_path / "sized.gguf", size_bytes=target, quant=quant)
    assert abs(info.file_bytes - target) <= 0.05 * target
    assert info.expert_bytes > 10 * info.dense_bytes
    m = inspect_gguf(Path(info.path))
    assert (m.block_count, m.expert_count) == (info.layers, info.experts)


def test_size_target_with_fixed_layers_chooses_ff(tmp_path: Path) -> None:
    info = synth_moe(tmp_path / "s.gguf", size_bytes=20e6, layers=2, experts=16, used=4, quant="q8_0")
    assert info.layers == 2 and info.ff % 32 == 0
    assert abs(info.file_bytes - 20e6) <= 0.05 * 20e6


def test_bad_synth_requests_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="unknown quant"):
        synth_moe(tmp_path / "x.gguf", quant="q3_k")
    with pytest.raises(ModelError, match="used <= experts"):
        synth_moe(tmp_path / "x.gguf", experts=2, used=4)
    with pytest.raises(ModelError, match="cannot reach"):
        synth_moe(tmp_path / "x.gguf", size_bytes=10_000, layers=1)
    assert not list(tmp_path.iterdir())  # nothing half-written left behind


def test_inspect_rejects_missing_and_non_gguf_files(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        inspect_gguf(tmp_path / "nope.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all, just some bytes....")
    with pytest.raises(ModelError, match="not a GGUF"):
        inspect_gguf(junk)
    truncated = tmp_path / "trunc.gguf"
    good = synth_moe(tmp_path / "good.gguf", layers=1)
    truncated.write_bytes(Path(good.path).read_bytes()[:2000])
    with pytest.raises(ModelError, match="truncated"):
        inspect_gguf(truncated)


def test_tokenizer_copied_from_another_gguf(tmp_path: Path) -> None:
    src = synth_moe(tmp_path / "src.gguf", layers=1, vocab=300)
    copied = from_gguf(Path(src.path))
    assert copied.n_vocab == 300
    assert copied.kv["tokenizer.ggml.model"].value == "gpt2"
    dst = synth_moe(tmp_path / "dst.gguf", layers=1, vocab=Path(src.path))
    assert dst.vocab_size == 300 and "copied from src.gguf" in dst.tokenizer
    m = inspect_gguf(Path(dst.path))
    assert m.metadata["tokenizer.ggml.tokens"]["n"] == 300
    assert m.metadata["tokenizer.ggml.eos_token_id"] == 299


def test_inspect_other_moe_layouts(tmp_path: Path) -> None:
    """deepseek-style shared experts are dense; gpt-oss-style per-expert biases are expert slices."""
    path = tmp_path / "ds.gguf"
    w = GGUFWriter(path, "deepseek2")
    w.add_block_count(1)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    f16, f32 = np.float16, np.float32
    tensors = {
        "token_embd.weight": np.zeros((16, 64), f16),
        "blk.0.ffn_gate_inp.weight": np.zeros((4, 64), f32),
        "blk.0.ffn_gate_shexp.weight": np.zeros((32, 64), f16),
        "blk.0.ffn_up_shexp.weight": np.zeros((32, 64), f16),
        "blk.0.ffn_down_shexp.weight": np.zeros((64, 32), f16),
        "blk.0.ffn_gate_exps.weight": np.ones((4, 32, 64), f16),
        "blk.0.ffn_gate_exps.bias": np.ones((4, 32), f32),
        "blk.0.ffn_down_exps.weight": np.ones((4, 64, 32), f16),
        "blk.0.exp_probs_b.bias": np.zeros((4,), f32),
    }
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = inspect_gguf(path)
    names = sorted(t.name for t in m.expert_tensors)
    assert names == ["blk.0.ffn_down_exps.weight", "blk.0.ffn_gate_exps.bias", "blk.0.ffn_gate_exps.weight"]
    expert = 4 * 32 * 64 * 2 * 2 + 4 * 32 * 4
    assert m.expert_bytes == expert
    assert m.dense_bytes == m.tensor_bytes - expert
    assert m.expert_bytes_per_layer == {0: expert // 4}
    assert m.expert_bytes_per_token == 2 * expert // 4
    assert m.quant_types == {"F16": 6, "F32": 3}


# --- inspect reads only metadata -------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(path: Path) -> tuple[int, int]:
    """(resident, total) page-cache pages of a file, via mincore on a mapping that is never touched."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_inspect_reads_no_tensor_pages(tmp_path: Path) -> None:
    info = synth_moe(tmp_path / "big.gguf", size_bytes=50_000_000)
    path = Path(info.path)
    _evict(path)
    before, total = resident_pages(path)
    if before > total // 100:
        pytest.skip(f"page cache of {path} cannot be dropped here ({before}/{total} pages stay resident)")
    m = inspect_gguf(path)
    after, _ = resident_pages(path)
    header_pages = (m.header_bytes_read + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    assert m.header_bytes_read < m.data_offset + 16 * 1024 + mmap.PAGESIZE
    assert after - before <= header_pages + 1, f"{after - before} pages for a {m.data_offset}-byte header"
    assert after < total // 100
