"""runner/native/replay on a small file with a hand-made layout: what each strategy reads, the page-cache and
expert-cache hits it reports, and its refusals of bad input.

Real reads of a real file on the disk (tmp_path is not tmpfs here; the file is synced so that dropping its pages
makes the next read hit the device). The ``dot`` compute sums every byte the program read: the checksum is the
proof that a strategy read exactly the trace's slices, whatever its block size or alignment.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.traces.model import Trace
from harness.traces.synth import synth_trace

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="replay is Linux/Android only")

N_LAYER, N_EXPERT, N_USED = 3, 16, 2
SLICES = {"up": 20011, "gate": 20011, "down": 24579}  # odd sizes: slices start anywhere within a page
HEAD = 4096 + 123
STRATEGIES = ["mmap", "mmap-willneed", "pread", "io_uring", "direct-cache", "prefetch"]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A random file and its layout (layout.txt beside it): per layer up, gate, down tensors of N_EXPERT slices."""
    size = HEAD + N_LAYER * N_EXPERT * sum(SLICES.values()) + 777
    path = tmp_path / "model.bin"
    path.write_bytes(np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8).tobytes())
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    lines, offset = [f"# harness-replay-layout v1 n_layer={N_LAYER} n_expert={N_EXPERT}"], HEAD
    for layer in range(N_LAYER):
        for kind, slice_bytes in SLICES.items():
            lines.append(f"{layer} {kind} {offset} {slice_bytes}")
            offset += N_EXPERT * slice_bytes
    (tmp_path / "layout.txt").write_text("\n".join(lines) + "\n")
    return path


def layout_of(model: Path) -> dict[tuple[int, str], tuple[int, int]]:
    rows = [line.split() for line in (model.parent / "layout.txt").read_text().splitlines()[1:]]
    return {(int(layer), kind): (int(off), int(size)) for layer, kind, off, size in rows}


def write_trace(model: Path, trace: Trace) -> Path:
    path = model.parent / "trace.txt"
    path.write_text(trace.to_text())
    return path


def expected(model: Path, trace: Trace) -> tuple[int, int]:
    """Bytes per token and the sum of every byte the trace's slices hold (what dot sums)."""
    data, layout = model.read_bytes(), layout_of(model)
    total = 0
    for token in range(trace.tokens):
        for layer in range(N_LAYER):
            for kind in SLICES:
                off, size = layout[(layer, kind)]
                for e in trace.experts[token, layer]:
                    total += sum(data[off + int(e) * size: off + (int(e) + 1) * size])
    return N_LAYER * N_USED * sum(SLICES.values()), total


def replay(native: Path, model: Path, trace: Path, strategy: str, *extra: str) -> tuple[list[dict], dict]:
    out = model.parent / f"out-{strategy}.jsonl"
    done = subprocess.run([str(native / "replay"), "--model", str(model), "--layout", str(model.parent / "layout.txt"),
                           "--trace", str(trace), "--out", str(out), "--strategy", strategy, *extra],
                          capture_output=True, text=True, timeout=120)
    if strategy == "io_uring" and done.returncode == 2 and "refuses" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return lines[:-1], lines[-1]["summary"]


def drop(native: Path, model: Path) -> None:
    subprocess.run([str(native / "cachectl"), "drop", str(model)], check=True, timeout=60)


def with_options(strategy: str) -> list[str]:
    return ["--cache-bytes", str(1 << 30)] if strategy == "direct-cache" else []


@pytest.mark.parametrize("how", STRATEGIES)  # not "strategy": labgrid's pytest plugin owns that fixture name
def test_each_strategy_reads_exactly_the_traces_slices(native: Path, model: Path, how: str) -> None:
    trace = synth_trace(N_LAYER, N_EXPERT, N_USED, 5, s=1.0, reuse=0.3, seed=3)
    per_token, checksum = expected(model, trace)
    tokens, summary = replay(native, model, write_trace(model, trace), how, "--threads", "3", "--bs", "8192",
                             *with_options(how))
    assert [t["bytes"] for t in tokens] == [per_token] * 5
    assert summary["bytes_per_token"] == per_token and summary["tokens"] == 5
    assert summary["checksum"] == checksum  # every byte of every chosen slice summed once, nothing else
    assert summary["strategy"] == how and summary["tok_s"] > 0


def test_a_warm_pread_hits_the_page_cache_and_a_cold_one_does_not(native: Path, model: Path) -> None:
    trace = write_trace(model, synth_trace(N_LAYER, N_EXPERT, N_USED, 1, seed=1))
    drop(native, model)
    _, cold = replay(native, model, trace, "pread", "--fadv-random")
    _, warm = replay(native, model, trace, "pread")  # the cold run just read these slices
    assert cold["cache_hit_pct"] < 5.0
    assert warm["cache_hit_pct"] > 99.0


def test_a_cache_holding_every_expert_hits_everything_on_a_repeated_trace(native: Path, model: Path) -> None:
    once = synth_trace(N_LAYER, N_EXPERT, N_USED, 4, seed=2)
    twice = Trace(N_LAYER, N_EXPERT, N_USED, np.concatenate([once.experts, once.experts]), "repeated")
    budget = N_LAYER * N_EXPERT * sum(SLICES.values())
    tokens, _ = replay(native, model, write_trace(model, twice), "direct-cache", "--cache-bytes", str(budget))
    assert tokens[0]["cache_hit_bytes"] == 0  # nothing cached before the first token
    assert tokens[0]["self_read_bytes"] >= tokens[0]["bytes"]  # O_DIRECT: from storage, 4 KiB-aligned
    assert all(t["cache_hit_bytes"] == t["bytes"] for t in tokens[4:])
    assert all(t["self_read_bytes"] == 0 for t in tokens[4:])  # a hit reads nothing


def test_a_cache_of_one_expert_hits_only_within_a_layer_never_across(native: Path, model: Path) -> None:
    trace = synth_trace(N_LAYER, N_EXPERT, N_USED, 4, seed=2)
    one_expert = sum(SLICES.values())
    tokens, _ = replay(native, model, write_trace(model, trace), "direct-cache", "--cache-bytes", str(one_expert))
    assert all(t["cache_hit_bytes"] == 0 for t in tokens)  # each layer's experts evict the last one


def test_a_right_prediction_prefetches_more_hits_than_a_wrong_one(native: Path, model: Path) -> None:
    trace = write_trace(model, synth_trace(N_LAYER, N_EXPERT, N_USED, 3, seed=4))
    pct = {}
    for p in ("0", "1"):
        drop(native, model)
        _, summary = replay(native, model, trace, "prefetch", "--predict-p", p, "--fadv-random", "--seed", "5")
        pct[p] = summary["cache_hit_pct"]
    assert pct["1"] > pct["0"] + 30


def test_the_model_file_is_never_written(native: Path, model: Path) -> None:
    trace = write_trace(model, synth_trace(N_LAYER, N_EXPERT, N_USED, 2, seed=5))
    before = (hashlib.sha256(model.read_bytes()).hexdigest(), model.stat().st_mtime_ns)
    for strategy in STRATEGIES:
        replay(native, model, trace, strategy, *with_options(strategy))
    assert (hashlib.sha256(model.read_bytes()).hexdigest(), model.stat().st_mtime_ns) == before


def _bad_inputs(model: Path) -> dict[str, tuple[list[str], str]]:
    d = model.parent
    (d / "short.txt").write_text(f"# harness-replay-layout v1 n_layer={N_LAYER} n_expert={N_EXPERT}\n"
                                 f"0 up {model.stat().st_size - 100} 20011\n")
    header = f"# harness-trace v1 n_layer={N_LAYER} n_expert={N_EXPERT} n_used={N_USED} tokens=1 source=hand\n"
    (d / "wide.txt").write_text(header + "".join(f"0 {layer} {N_EXPERT if layer == 1 else 0} 1\n"
                                                 for layer in range(N_LAYER)))
    return {"missing model": (["--model", str(d / "nope.bin")], "nope.bin"),
            "layout past EOF": (["--layout", str(d / "short.txt")], "past the end"),
            "expert >= n_expert": (["--trace", str(d / "wide.txt")], f"expert {N_EXPERT} is not in"),
            "unknown strategy": (["--strategy", "mmapp"], "unknown strategy")}


@pytest.mark.parametrize("case", ["missing model", "layout past EOF", "expert >= n_expert", "unknown strategy"])
def test_bad_input_exits_2_with_one_line(native: Path, model: Path, case: str) -> None:
    trace = write_trace(model, synth_trace(N_LAYER, N_EXPERT, N_USED, 1))
    args, said = _bad_inputs(model)[case]
    argv = {"--model": str(model), "--layout": str(model.parent / "layout.txt"), "--trace": str(trace),
            "--out": str(model.parent / "bad.jsonl"), "--strategy": "pread"}
    argv.update(dict(zip(args[::2], args[1::2], strict=True)))
    done = subprocess.run([str(native / "replay"), *[x for kv in argv.items() for x in kv]], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr


def test_wrong_predictions_end_when_few_experts_are_outside_the_true_set(native: Path, model: Path) -> None:
    trace = write_trace(model, synth_trace(N_LAYER, N_EXPERT, N_EXPERT - 1, 2, seed=6))  # one expert left over
    tokens, summary = replay(native, model, trace, "prefetch", "--predict-p", "0")
    assert len(tokens) == 2 and summary["tokens"] == 2
