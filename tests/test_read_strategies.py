"""The seed's read strategies as llama.cpp patches (patches/llama.cpp/, issue 23): each patch applies in order to the
tree the llama-cpp-python sdist vendors; ONE build with the whole series (the harness's build cache, shared by this
module's tests) decodes the unpatched build's greedy tokens with each strategy's variable set; and each strategy
changes what a cold decode does to the block device the way it should.

The decodes are driven directly (llama-server's /completion with ``return_tokens`` as the equivalence step's
generator does, and llama-bench), each strategy switched by its environment variable for that process only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pytest

from bench.read_strategies import Server, attributable_request
from harness.engines.llamacpp import CPU_NATIVE_FLAGS, DEFAULT_CACHE_DIR, BuildInfo, build_llamacpp
from harness.engines.llamacpp.source import SourceSpec, prepare_source
from harness.models.synth import SynthInfo, synth_moe
from runner.probes.blockdev import block_device_of
from tests.helpers import REPO, build_native_tools, synced_synth_moe

SDIST = "llama-cpp-python==0.3.36"
SERIES_DIR = REPO / "patches" / "llama.cpp"
SERIES = sorted(SERIES_DIR.glob("[0-9][0-9][0-9][0-9]-*.patch"))
PROMPTS = [json.loads(line)["prompt"] for line in (REPO / "tests" / "data" / "llama" / "prompts.jsonl").open()][:3]
N_PREDICT = 24
THREADS = "2"  # two compute threads: the pread blocks are shared out among them, as on the board's cores

# each strategy as the seed ran it: the variables that switch it on (the patched build with none set is the base)
STRATEGIES: dict[str, dict[str, str]] = {
    "willneed": {"HARNESS_EXPERT_WILLNEED": "1"},
    "pread-128k": {"HARNESS_EXPERT_PREAD": "131072"},
    "pread-128k-random": {"HARNESS_EXPERT_PREAD": "131072", "HARNESS_EXPERT_FADV_RANDOM": "1"},
    "pread-512k-random": {"HARNESS_EXPERT_PREAD": "524288", "HARNESS_EXPERT_FADV_RANDOM": "1"},
    "async-4": {"HARNESS_EXPERT_ASYNC": "4"},
    "async-16": {"HARNESS_EXPERT_ASYNC": "16"},
}
SWITCHES = {"0001-expert-willneed.patch": ["HARNESS_EXPERT_WILLNEED"],
            "0002-expert-pread.patch": ["HARNESS_EXPERT_PREAD", "HARNESS_EXPERT_FADV_RANDOM"],
            "0003-expert-async.patch": ["HARNESS_EXPERT_ASYNC"],
            "0004-expert-strategy.patch": ["HARNESS_EXPERT_STRATEGY"]}
# 0004's selector: one variable naming a strategy above, as an experiment's `strategy` axis gives it
SELECTED: dict[str, dict[str, str]] = {
    "willneed": {"HARNESS_EXPERT_STRATEGY": "willneed"},
    "pread-128k-random": {"HARNESS_EXPERT_STRATEGY": "pread-131072-random"},
    "async-4": {"HARNESS_EXPERT_STRATEGY": "async-4"},
}

# a llama.cpp build: ~10 min on two quiet cores when no cache has it; pytest-timeout counts fixture setup
pytestmark = pytest.mark.timeout(3600)


def _cache() -> Path:
    return Path(os.environ.get("HARNESS_BUILD_CACHE", str(DEFAULT_CACHE_DIR))).expanduser()


def _clean_env() -> dict[str, str]:
    """This process's environment without any strategy switched on (a developer's shell may export one)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_EXPERT_")}


def test_each_patch_says_what_it_does_and_what_turns_it_on() -> None:
    assert [p.name for p in SERIES] == list(SWITCHES)
    readme = (SERIES_DIR / "README.md").read_text()
    for patch in SERIES:
        text = patch.read_text()
        header = " ".join(text[:text.index("diff --git ")].split())
        touched = re.findall(r"^diff --git a/(\S+) ", text, re.M)
        assert touched == ["ggml/src/ggml-cpu/ggml-cpu.c"], (patch.name, touched)
        for variable in SWITCHES[patch.name]:
            assert variable in header and variable in readme, (patch.name, variable)
        assert "off runs exactly the stock code" in header, patch.name
    assert "not measurable on this machine" in readme  # the GPU expert cache: no CUDA here


@pytest.mark.slow
def test_the_series_applies_in_order_to_the_vendored_tree(tmp_path: Path) -> None:
    """``git apply --check`` of each patch on the tree as the patches before it leave it, as the build applies them
    (only the files the series touches are copied: ``git apply`` needs no more)."""
    tree = prepare_source(SourceSpec(sdist=SDIST), _cache() / "sources").tree
    touched = {name for patch in SERIES for name in re.findall(r"^diff --git a/(\S+) ", patch.read_text(), re.M)}
    for name in touched:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / name, tmp_path / name)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path.parent))
    for patch in SERIES:
        for verb in (["--check"], []):
            done = subprocess.run(["git", "apply", *verb, str(patch)], cwd=tmp_path, env=env, capture_output=True,
                                  text=True)
            assert done.returncode == 0, f"{patch.name}: {done.stderr}"
    # and a patch out of order does not (0003 uses 0002's file lookup, 0004 sets 0001-0003's variables before they
    # are read): the order is the series'
    fresh = tmp_path / "fresh"
    for name in touched:
        (fresh / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / name, fresh / name)
    for later in SERIES[2:]:
        alone = subprocess.run(["git", "apply", "--check", str(later)], cwd=fresh, env=env, capture_output=True)
        assert alone.returncode != 0, later.name


@pytest.fixture(scope="session")
def base_build() -> BuildInfo:
    """The unpatched build every other llama.cpp test uses (the shared cache has it)."""
    return build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), cache_dir=_cache(), log=print)


@pytest.fixture(scope="session")
def strategies_build() -> BuildInfo:
    """ONE build with the whole series, cached by the harness like any build with patches."""
    return build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), patches=SERIES, cache_dir=_cache(), log=print)


@pytest.fixture(scope="module")
def tiny_moe() -> Iterator[SynthInfo]:
    base = Path("/var/tmp/harness-tests") / f"strategies-{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    info = synth_moe(base / "tiny.gguf", layers=4, experts=8, used=2)
    yield info
    os.unlink(info.path)
    base.rmdir()


@dataclass
class Decoded:
    tokens: list[list[int]]   # per prompt, the generated ids
    read_syscall_bytes: int   # /proc/PID/io rchar at the end: what read(2)/pread(2) returned to the server


def greedy(build: BuildInfo, model: str, env: dict[str, str]) -> Decoded:
    """The prompts decoded greedily by ``build``'s llama-server with ``env`` added to its environment."""
    with Server(str(build.binary("llama-server")), model, env, int(THREADS), None, None, "greedy") as server:
        tokens = [server.complete(prompt, N_PREDICT)["tokens"] for prompt in PROMPTS]
        return Decoded(tokens, server.io()["rchar"])


@pytest.mark.slow
def test_greedy_tokens_are_the_unpatched_builds_under_every_strategy(
        base_build: BuildInfo, strategies_build: BuildInfo, tiny_moe: SynthInfo) -> None:
    assert not strategies_build.binary("llama-server").samefile(base_build.binary("llama-server"))
    reference = greedy(base_build, tiny_moe.path, {})
    assert all(len(one) == N_PREDICT for one in reference.tokens)
    off = greedy(strategies_build, tiny_moe.path, {})
    assert off.tokens == reference.tokens
    for name, env in STRATEGIES.items():
        got = greedy(strategies_build, tiny_moe.path, env)
        assert got.tokens == reference.tokens, name
        if "HARNESS_EXPERT_PREAD" in env or "HARNESS_EXPERT_ASYNC" in env:
            # the strategy did run: the server itself read the routed slices (a fault of the mapping is no read)
            extra = got.read_syscall_bytes - off.read_syscall_bytes
            assert extra > tiny_moe.expert_bytes_per_token * N_PREDICT * len(PROMPTS) // 2, (name, extra)
    # 0004: a strategy named by HARNESS_EXPERT_STRATEGY is the strategy its variables give: the same tokens, and
    # the same slices read by the server itself (pread reads exactly the routed slices: equal within a few pages)
    for name, env in SELECTED.items():
        selected, given = greedy(strategies_build, tiny_moe.path, env), greedy(strategies_build, tiny_moe.path,
                                                                                STRATEGIES[name])
        assert selected.tokens == reference.tokens, name
        if name.startswith("pread"):
            assert abs(selected.read_syscall_bytes - given.read_syscall_bytes) < 0.02 * given.read_syscall_bytes, \
                (name, selected.read_syscall_bytes, given.read_syscall_bytes)
            assert selected.read_syscall_bytes - off.read_syscall_bytes > tiny_moe.expert_bytes_per_token, name


@pytest.mark.slow
@pytest.mark.parametrize("value", ["pread-128k", "async-0", "async-65", "willneed-1", "on"])
def test_an_unknown_strategy_stops_the_engine_in_one_line(strategies_build: BuildInfo, tiny_moe: SynthInfo,
                                                           value: str) -> None:
    """A misspelt strategy in an experiment is bad input, never a silent off: exit 2 and one line saying what."""
    done = subprocess.run([str(strategies_build.binary("llama-bench")), "-m", tiny_moe.path, "-p", "0", "-n", "1",
                           "-r", "1", "-t", THREADS], env={**_clean_env(), "HARNESS_EXPERT_STRATEGY": value},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    said = [line for line in done.stderr.splitlines() if "HARNESS_EXPERT_STRATEGY" in line]
    assert said == [f"HARNESS_EXPERT_STRATEGY={value}: not a strategy (off, willneed, pread-<bytes>, "
                    "pread-<bytes>-random, async-<1-64>)"], done.stderr[-2000:]


@pytest.fixture(scope="module")
def streaming_moe() -> Iterator[SynthInfo]:
    """Experts of 1 MiB per tensor (hidden 512, ff 1024, f16), so a slice is several 128 KiB blocks and more than
    one 512 KiB block; on the real disk and synced, so that a drop makes the next read hit the device."""
    with synced_synth_moe("strategies-stream", layers=4, experts=16, used=2, hidden=512, ff=1024) as info:
        yield info


@pytest.mark.slow
def test_each_strategy_changes_the_cold_block_statistics_as_it_should(
        strategies_build: BuildInfo, streaming_moe: SynthInfo) -> None:
    """One cold request per setting (the server's mapping paged out and the file dropped, as the llama-server step's
    cold requests) with the device's read_ahead_kb at the board's 128 (the runner's emulation, under the machine
    lock, restored after): the server's own read bytes are exact; the average request and the in-flight count are
    the device's, taken from a request whose device delta is the server's own (bench.read_strategies)."""
    knob = Path("/sys/block") / str(block_device_of(streaming_moe.path)) / "queue" / "read_ahead_kb"
    if not os.access(knob, os.W_OK):
        pytest.skip(f"cannot set {knob} here (root needed): the strategies' requests depend on it")
    native = str(build_native_tools())
    server = str(strategies_build.binary("llama-server"))

    def cold(name: str, requests: int = 1) -> list[dict[str, float]]:
        return cold_with(name, STRATEGIES.get(name, {}), requests)

    def cold_with(name: str, env: dict[str, str], requests: int) -> list[dict[str, float]]:
        out = []
        with Server(server, streaming_moe.path, env, int(THREADS), None, 128, f"t{os.getpid()}-{name}") as running:
            for _ in range(requests):
                one = attributable_request(running, PROMPTS[0], 8, native, attempts=8)
                if not one["attributable"]:  # not the strategy's failure: the device's counters were not the server's
                    pytest.skip(f"{name}: other processes' reads were over a quarter of the device's in 8 requests")
                out.append(one)
        return out

    def typical(requests: list[dict[str, float]]) -> dict[str, float]:
        """Medians of three requests: another process's burst moves one request's device counters, not three."""
        return {key: median(one[key] for one in requests) for key in requests[0]}

    # others' requests only add to the device's in-flight count: the stock path's own is the least of three
    stock = cold("off", 3)
    off = dict(typical(stock), inflight=min(one["inflight"] for one in stock))
    got = {name: typical(cold(name, 3)) for name in STRATEGIES}
    selected = typical(cold_with("pread-128k-random", SELECTED["pread-128k-random"], 3))
    kib = 1024
    # every strategy reads the routed slices, not the read-around of their faults: less from storage
    for name, one in got.items():
        assert one["process_read_bytes"] < off["process_read_bytes"], (name, one, off)
    # pread without readahead: the device is asked for the blocks as they are, 128 KiB or 512 KiB at a time
    assert 96 * kib <= got["pread-128k-random"]["avg_read_io_bytes"] <= 160 * kib, got["pread-128k-random"]
    # (the dense tensors still fault 128 KiB at a time: 512 KiB blocks average ~290 KiB here, not 512)
    assert got["pread-512k-random"]["avg_read_io_bytes"] > 1.5 * got["pread-128k-random"]["avg_read_io_bytes"], got
    # WILLNEED asks for whole slices at once, the loader keeps its N reads going: more requests in flight
    assert got["willneed"]["inflight"] > 1.5 * off["inflight"], (got["willneed"], off)
    assert got["async-16"]["inflight"] > 1.5 * off["inflight"], (got["async-16"], off)
    # 0004's selector gives the block statistics of the variables it stands for: the same slices read by the server
    # (exact: pread reads only the routed slices), requests of the same size
    given = got["pread-128k-random"]
    assert abs(selected["process_read_bytes"] - given["process_read_bytes"]) <= 0.02 * given["process_read_bytes"], \
        (selected, given)
    assert 96 * kib <= selected["avg_read_io_bytes"] <= 160 * kib, selected
