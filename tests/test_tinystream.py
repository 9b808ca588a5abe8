"""tinystream (engines/tinystream/): the small real streaming engine. Its declaration reads its real output into
rows; built, it reads exactly the routed experts' slices (the routing re-drawn here from the same seed, the bytes
summed here from the file), never writes the model, refuses a non-GGUF in one line; (slow) in a campaign under a
small memory budget, cold, its decode rows ingest and the reads reach the device."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.config.declared_engine import load_declaration
from harness.models.inspect import ModelInfo, inspect_gguf
from harness.parsers.declared import extract
from tests.helpers import REPO, needs_cgroups, private_base, run_campaign

SOURCE = REPO / "engines" / "tinystream"
SAMPLES = REPO / "tests" / "data" / "engines" / "tinystream"
MASK = (1 << 64) - 1


def _rules() -> list[dict]:
    declaration = load_declaration(REPO / "engines" / "tinystream.yaml").declaration
    return [rule.model_dump(exclude_none=True) for rule in declaration.extract]


def test_declaration_reads_its_pread_capture_value_by_value() -> None:
    tables = extract(_rules(), {"stdout": (SAMPLES / "run-pread.stdout").read_bytes()})
    assert tables["tokens"] == [
        {"request": 0, "token": 1, "gap_ms": 0.954}, {"request": 0, "token": 2, "gap_ms": 1.016},
        {"request": 0, "token": 3, "gap_ms": 0.914}, {"request": 0, "token": 4, "gap_ms": 0.821}]
    assert tables["requests"] == [{
        "request": 0, "layers": 4, "experts_k": 2, "engine_expert_bytes_per_token": 1769472,
        "predicted_n": 4, "predicted_ms": 3.773, "decode_tps": 1060.24,
        "engine_rchar_bytes": 7077888, "engine_read_bytes": 0, "engine_major_faults": 0, "engine_minor_faults": 20}]


def test_declaration_reads_its_mmap_capture() -> None:
    row = extract(_rules(), {"stdout": (SAMPLES / "run-mmap.stdout").read_bytes()})["requests"][0]
    # mapped: no read() at all, the bytes come in through page faults
    assert (row["decode_tps"], row["engine_rchar_bytes"], row["engine_minor_faults"]) == (1509.24, 0, 53)


def splitmix64_routes(seed: int, tokens: int, layers: int, experts: int, used: int) -> list[list[list[int]]]:
    """The experts tinystream's router picks, per token and layer: splitmix64 (Steele, Lea, Flood 2014) drawing a
    partial Fisher-Yates shuffle, as engines/tinystream/tinystream.c does."""
    state, routes = seed, []
    for _ in range(tokens):
        per_layer = []
        for _ in range(layers):
            order = list(range(experts))
            for k in range(used):
                state = (state + 0x9E3779B97F4A7C15) & MASK
                z = state
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
                z ^= z >> 31
                j = k + z % (experts - k)
                order[k], order[j] = order[j], order[k]
            per_layer.append(order[:used])
        routes.append(per_layer)
    return routes


def expected_checksum(info: ModelInfo, model: Path, routes: list[list[list[int]]]) -> int:
    """The sum of the bytes of every routed slice, read here with Python from the file (the engine's compute)."""
    slices = {(s.layer, s.expert, s.tensor): s for s in info.expert_slices()}
    total = 0
    with model.open("rb") as handle:
        for per_layer in routes:
            for layer, chosen in enumerate(per_layer):
                for expert in chosen:
                    for (lay, exp, _), s in slices.items():
                        if (lay, exp) == (layer, expert):
                            handle.seek(s.offset)
                            total += sum(handle.read(s.length))
    return total & MASK


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers import slow_only

    slow_only("a build of tinystream")
    out = tmp_path_factory.mktemp("tinystream") / "tinystream"
    # the declaration's own build command, with the repository's source tree as {source_dir}
    build = load_declaration(REPO / "engines" / "tinystream.yaml").declaration.build
    assert build is not None
    (command,) = build.commands
    argv = [a.replace("{build_dir}/tinystream", str(out)).replace("{source_dir}", str(SOURCE)) for a in command]
    subprocess.run(argv, check=True)
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.models.synth import synth_moe

    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    synth_moe(path, layers=3, experts=8, used=2, quant="q8_0", seed=5)
    return path


def _run(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("io", ["pread", "mmap"])
def test_it_reads_exactly_the_routed_slices_and_never_writes_the_model(built: Path, model: Path, io: str) -> None:
    info = inspect_gguf(model)
    before = (hashlib.sha256(model.read_bytes()).hexdigest(), os.stat(model).st_mtime_ns)
    done = _run(built, "-m", str(model), "-n", "5", "-s", "11", "--io", io, "--block", "65536")
    assert done.returncode == 0, done.stderr
    row = extract(_rules(), {"stdout": done.stdout.encode()})["requests"][0]
    assert row["engine_expert_bytes_per_token"] == info.expert_bytes_per_token
    # pread: the decode's read() bytes are exactly 5 tokens' routed slices; mmap: none (faults instead)
    assert row["engine_rchar_bytes"] == (5 * info.expert_bytes_per_token if io == "pread" else 0)
    routes = splitmix64_routes(11, 5, info.block_count or 0, info.expert_count or 0, info.expert_used_count or 0)
    checksum = int(done.stdout.rsplit("checksum: ", 1)[1], 16)
    assert checksum == expected_checksum(info, model, routes)
    assert (hashlib.sha256(model.read_bytes()).hexdigest(), os.stat(model).st_mtime_ns) == before


@pytest.mark.slow
def test_a_file_that_is_not_a_gguf_is_one_line_and_exit_2(built: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8)  # a header cut after the tensor count
    done = _run(built, "-m", str(bad))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"tinystream: error: {bad}: truncated header while reading key count at "
                                        "byte 16"]
    done = _run(built, "-m", str(REPO / "README.md"))
    assert done.returncode == 2 and done.stderr.strip().endswith("not a GGUF file (no GGUF magic at byte 0)")


def tinystream_declaration(source_dir: Path) -> dict:
    """engines/tinystream.yaml as an inline declaration whose build reads ``source_dir`` (until builds give a
    declared engine its source tree, the repository's path is written in)."""
    import yaml

    data = yaml.safe_load((REPO / "engines" / "tinystream.yaml").read_text())
    data["build"]["commands"] = [[a.replace("{source_dir}", str(source_dir)) for a in c]
                                 for c in data["build"]["commands"]]
    return data


@pytest.mark.slow
@needs_cgroups()
def test_cold_under_a_small_budget_its_decode_rows_ingest_and_reads_reach_the_device(tmp_path: Path) -> None:
    from harness.results.loader import load_result_set

    exp = tmp_path / "tiny.yaml"
    exp.write_text(json.dumps({
        "name": "tinystream", "validity": "off", "rounds": 2, "cache": "cold",
        "model": {"synth": {"layers": 4, "experts": 16, "used": 2, "hidden": 256, "quant": "q8_0"}},
        "emulate": {"memory": "48M"}, "engines": {"tinystream": tinystream_declaration(SOURCE)},
        "collect": {"blockstat": {"period_ms": 10}},
        "steps": [{"run": {"engine": "tinystream", "n_predict": 8}}]}))
    results = private_base() / f"results-{tmp_path.name}"
    done = run_campaign(str(exp), "--results", str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    rs = load_result_set(next(results.iterdir()))
    requests = rs.table("requests")
    assert len(requests) == 2 and set(requests["engine"]) == {"tinystream"}
    per_token = int(requests["engine_expert_bytes_per_token"].iloc[0])
    assert list(requests["predicted_n"]) == [8, 8] and (requests["decode_tps"] > 0).all()
    assert (requests["engine_rchar_bytes"] == 8 * per_token).all()
    # cold: the routed slices came from the device (readahead may bring more, never less than one token's worth)
    assert (requests["engine_read_bytes"] >= per_token).all()
    assert len(rs.table("tokens")) == 16
    from harness.results.metrics import METRICS
    from harness.results.samples import samples

    observed = samples(rs, METRICS["decode_tps"])  # what gate and bisect read: one cell, its two rounds
    assert len(observed) == 2 and observed["cell"].nunique() == 1
