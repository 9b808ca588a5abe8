"""A routing trace recorded from llama.cpp's own decode: the prompts of a JSONL file (``{"prompt": ...}`` per
line, as ``experiments/prompts/*.jsonl``) decoded greedily by ``trace-record`` (built by
``harness.engines.llamacpp.recorder``), whose per-token, per-layer expert ids become one Trace, the prompts'
decode tokens one after another (the KV cache cleared between prompts).

Runs where the command runs (the controller; a board would need the recorder built there, which
``harness trace record`` does not do).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from harness.errors import HarnessError
from harness.models.inspect import inspect_gguf
from harness.traces.model import Trace, TraceError

RECORD_TIMEOUT_S = 3600


def read_prompts(path: Path) -> list[str]:
    """The prompts of a JSONL file; TraceError naming the file and line of anything else."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the prompts ({exc.strerror})") from None
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise TraceError(f"{path}:{number}: not a JSON object") from None
        prompt = record.get("prompt") if isinstance(record, dict) else None
        if not isinstance(prompt, str) or not prompt or "\0" in prompt:
            raise TraceError(f"{path}:{number}: expected {{\"prompt\": \"non-empty text\"}}")
        prompts.append(prompt)
    if not prompts:
        raise TraceError(f"{path}: no prompts")
    return prompts


def parse_recorded(text: str, n_layer: int, n_expert: int, n_used: int, source: str, where: str) -> Trace:
    """The recorder's ``PROMPT TOKEN LAYER e1..eK`` lines as a Trace (every layer of every token, checked)."""
    tokens: dict[tuple[int, int], np.ndarray] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        values = [int(v) for v in line.split()]
        if len(values) != 3 + n_used:
            raise TraceError(f"{where}:{number}: expected prompt, token, layer and {n_used} experts")
        prompt, token, layer, ids = values[0], values[1], values[2], values[3:]
        if not 0 <= layer < n_layer or len(set(ids)) != n_used or not all(0 <= e < n_expert for e in ids):
            raise TraceError(f"{where}:{number}: layer {layer} routed {ids}, not {n_used} distinct experts of "
                             f"{n_expert} in one of {n_layer} layers")
        tokens.setdefault((prompt, token), np.full((n_layer, n_used), -1, dtype=np.int32))[layer] = ids
    if not tokens:
        raise TraceError(f"{where}: llama.cpp decoded no token (the model ended every answer at once?)")
    for (prompt, token), routed in tokens.items():
        if (routed < 0).any():
            layer = int(np.argwhere(routed < 0)[0][0])
            raise TraceError(f"{where}: prompt {prompt + 1} token {token}: layer {layer} has no router (a dense "
                             "layer); a harness trace routes every layer")
    experts = np.stack([tokens[k] for k in sorted(tokens)])
    return Trace(n_layer, n_expert, n_used, experts, source)


def record_trace(recorder: Path, model: Path, prompts: list[str], n_predict: int, threads: int,
                 n_ctx: int = 2048) -> Trace:
    """Decode ``prompts`` with ``recorder`` on ``model`` here; the decode tokens' routing as one Trace."""
    info = inspect_gguf(Path(model))
    n_layer, n_expert, n_used = info.block_count, info.expert_count, info.expert_used_count
    if not (n_layer and n_expert and n_used):
        raise TraceError(f"{model}: not a MoE model (no block_count, expert_count or expert_used_count)")
    with tempfile.TemporaryDirectory(prefix="harness-trace-") as scratch:
        prompt_file, out = Path(scratch) / "prompts", Path(scratch) / "routing.txt"
        prompt_file.write_bytes(b"\0".join(p.encode() for p in prompts))
        try:
            done = subprocess.run([str(recorder), str(model), str(prompt_file), str(out), str(n_predict),
                                   str(threads), str(n_ctx)], capture_output=True, text=True, errors="replace",
                                  timeout=RECORD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise TraceError(f"trace record: llama.cpp did not finish within {RECORD_TIMEOUT_S} s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            why = f"trace record: {last.removeprefix('trace-record: ')}"
            raise TraceError(why) if done.returncode == 2 else HarnessError(why)
        text = out.read_text()
    return parse_recorded(text, n_layer, n_expert, n_used, f"llama.cpp:{Path(model).name}", str(recorder))
