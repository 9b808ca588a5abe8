"""``harness model synth|inspect`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import cli_in_process


def test_synth_then_inspect_json_reports_expert_layout(tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    done = cli_in_process("model", "synth", "--out", str(out), "--layers", "2", "--experts", "4", "--used", "2",
                   "--hidden", "128", "--ff", "64", "--quant", "q8_0")
    assert done.returncode == 0, done.stderr
    info = json.loads(cli_in_process("model", "inspect", str(out), "--format", "json").stdout)
    assert info["architecture"] == "qwen3moe" and info["block_count"] == 2
    assert info["expert_count"] == 4 and info["expert_used_count"] == 2
    slices = info["expert_slices"]
    assert len(slices) == 2 * 3 * 4  # layers x (gate, up, down) x experts
    assert info["expert_bytes_per_token"] * 2 == info["expert_bytes"]  # used/experts = 1/2
    assert info["expert_bytes"] + info["dense_bytes"] == info["tensor_bytes"]
    assert all(s["offset"] + s["length"] <= info["file_bytes"] for s in slices)
    assert "Q8_0" in info["quant_types"]


def test_inspect_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    for path in (junk, tmp_path / "missing.gguf"):
        done = cli_in_process("model", "inspect", str(path))
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and str(path.name) in done.stderr
    done = cli_in_process("model", "synth", "--out", str(tmp_path / "x.gguf"), "--quant", "q3")
    assert done.returncode == 2 and "q3" in done.stderr


def test_a_model_that_is_not_gguf_is_refused_before_any_run(tmp_path: Path) -> None:
    from tests.helpers import run_campaign

    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"PK\x03\x04 not a model" * 100)
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: notgguf\nmodel: {junk}\nsteps:\n  - llama-bench: {{args: [-p, 8, -n, 8]}}\n")
    done = run_campaign(str(exp), "--results", str(tmp_path / "r"))
    assert done.returncode == 2, done.stderr
    assert f"{exp}:2: model: {junk} is not a GGUF file" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
