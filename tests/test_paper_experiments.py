"""experiments/paper/: the seed study on the Orin Nano Super and its emulated twin plan, measure what the issue and
docs/methodology.md name, and pass llama.cpp only flags the vendored build has."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.boards.inventory import load_targets
from harness.boards.platforms import PLATFORMS
from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.collectors import COLLECTORS
from tests.helpers import PAPER, REPO, cli_in_process, trimmed_streaming_experiment

ORIN = PAPER / "orin-nano-streaming.yaml"
EMULATED = PAPER / "emulated-orin.yaml"
STRATEGIES = PAPER / "read-strategies.yaml"
ORIN_STRATEGIES = PAPER / "orin-read-strategies.yaml"
SERIES = sorted((REPO / "patches" / "llama.cpp").glob("[0-9][0-9][0-9][0-9]-*.patch"))
EXAMPLE_TARGETS = REPO / "targets" / "examples"
LADDER = ["randread-64k-qd1", "randread-64k-qd2", "randread-64k-qd4", "randread-128k-qd8", "read-1m-seq"]
# the seed's engine options, as this build spells them (experiments/paper/*.yaml say why)
SERVER_FLAGS = ["-lm", "mmap", "--no-host", "--no-repack", "--cpu-moe"]
BENCH_FLAGS = ["-lm", "mmap", "--no-host", "1", "--repack", "0", "-ncmoe", "99"]


def _steps(path: Path, kind: str) -> list[dict[str, Any]]:
    return [item for item in load_resolved(path).experiment.steps if kind in item]


def _contains(args: list[Any], flags: list[str]) -> bool:
    text = [str(a) for a in args]
    return any(text[i:i + len(flags)] == flags for i in range(len(text)))


@pytest.mark.parametrize(("path", "targets_dir", "steps"),
                         [(ORIN, EXAMPLE_TARGETS, ("llama-bench", "llama-server", "fio")),
                          (EMULATED, REPO / "targets", ("llama-bench", "llama-server", "fio")),
                          (STRATEGIES, REPO / "targets", ("llama-bench", "llama-server", "equivalence")),
                          (ORIN_STRATEGIES, EXAMPLE_TARGETS, ("llama-bench", "llama-server", "equivalence"))],
                         ids=["orin", "emulated", "strategies", "orin-strategies"])
def test_paper_experiment_plans(path: Path, targets_dir: Path, steps: tuple[str, ...]) -> None:
    done = cli_in_process("plan", str(path), "--targets-dir", str(targets_dir))
    assert done.returncode == 0, done.stderr
    for step in steps:
        assert step in done.stdout


@pytest.mark.parametrize(("path", "threads"), [(STRATEGIES, [2, 4]), (ORIN_STRATEGIES, [6, 12])],
                         ids=["here", "orin"])
def test_read_strategies_pair_every_strategy_with_the_stock_build(path: Path, threads: list[int]) -> None:
    """The seed's read-strategy experiment: the stock build and the whole series, one strategy axis given to every
    step as HARNESS_EXPERT_STRATEGY, the base build's cells run in the same rounds (the gate's --across build pairs),
    and an equivalence of each strategy against the base build's tokens."""
    loaded = load_resolved(path)
    experiment = loaded.experiment
    assert list(experiment.builds) == ["base", "strategies"]
    assert experiment.builds["base"].patches == []
    assert [Path(p).name for p in experiment.builds["strategies"].patches] == [p.name for p in SERIES]
    assert experiment.matrix["build"] == ["base", "strategies"] and experiment.matrix["threads"] == threads
    assert {"off", "willneed", "pread-131072", "pread-131072-random", "pread-524288", "async-4", "async-8",
            "async-16"} == set(experiment.matrix["strategy"])
    assert experiment.rounds >= 2
    for kind in ("llama-bench", "llama-server"):
        (step,) = _steps(path, kind)
        assert step[kind]["env"] == {"HARNESS_EXPERT_STRATEGY": "{strategy}"}
    (equivalence,) = _steps(path, "equivalence")
    assert equivalence["over"] == ["strategy"] and equivalence["cache"] == "none"
    sides = equivalence["equivalence"]
    assert sides["a"]["build"] == "base" and "env" not in sides["a"]
    assert sides["b"]["build"] == "strategies" and sides["b"]["env"] == {"HARNESS_EXPERT_STRATEGY": "{strategy}"}
    plan = build_plan(loaded)
    server = [run for run in plan.runs if run.step == "llama-server"]
    # every strategy at every thread count on both builds, each round; a base cell next to its strategies cell
    cells = {(run.params["strategy"], run.params["threads"], run.params["build"]) for run in server}
    assert len(cells) == len(experiment.matrix["strategy"]) * len(threads) * 2
    first = [run for run in server if run.round == 1]
    assert all(a.params["build"] == "base" and b.params["build"] == "strategies"
               and {k: v for k, v in a.params.items() if k != "build"} == {k: v for k, v in b.params.items()
                                                                            if k != "build"}
               for a, b in zip(first[::2], first[1::2], strict=True))
    assert {run.params["strategy"] for run in plan.runs if run.step == "equivalence"} == \
        set(experiment.matrix["strategy"])


def test_orin_study_has_the_seed_measurements() -> None:
    loaded = load_resolved(ORIN)
    experiment = loaded.experiment
    target = load_targets(EXAMPLE_TARGETS)[experiment.targets[0]]
    assert target.platform == "jetson"
    assert experiment.expect["power_mode"] == "MAXN_SUPER"
    assert set(experiment.expect) <= set(PLATFORMS[target.platform].expectations)
    assert {"blockstat", "threads", "tegrastats"} <= set(experiment.collectors()) <= set(COLLECTORS)
    assert experiment.collectors()["threads"]["period_ms"] == 5
    assert experiment.matrix["threads"] == [4, 6, 8, 12]
    assert len(experiment.matrix["read_ahead_kb"]) >= 2 and experiment.emulate == {"read_ahead_kb": "{read_ahead_kb}"}
    assert experiment.rounds >= 2
    # the model is a GGUF on the board, given by path: nothing is synthesized or copied
    assert isinstance(experiment.model, str) and experiment.model.startswith("/") and experiment.model.endswith(".gguf")
    (fio,) = _steps(ORIN, "fio")
    assert fio["fio"]["file"] == "model" and fio["fio"]["jobs"] == LADDER
    assert all(_contains(step["llama-server"]["args"], SERVER_FLAGS) for step in _steps(ORIN, "llama-server"))
    assert all(_contains(step["llama-bench"]["args"], BENCH_FLAGS) for step in _steps(ORIN, "llama-bench"))
    plan = build_plan(loaded)
    swept = {run.params["threads"] for run in plan.runs if run.step == "llama-bench"}
    assert swept == {4, 6, 8, 12}
    rounds = [run.round for run in plan.runs]
    assert rounds == sorted(rounds) and set(rounds) == {1, 2}  # interleaved: all of round 1, then round 2
    assert {run.cache for run in plan.runs if run.step == "llama-server"} == {"cold", "none"}


def test_emulated_study_has_the_same_shape() -> None:
    orin, emulated = load_resolved(ORIN).experiment, load_resolved(EMULATED).experiment
    assert set(emulated.matrix) == set(orin.matrix)
    assert [next(iter(set(s) - {"over", "cache"})) for s in emulated.steps] == ["llama-bench", "llama-server", "fio"]
    assert _steps(EMULATED, "fio")[0]["fio"]["jobs"] == LADDER
    assert _contains(_steps(EMULATED, "llama-server")[0]["llama-server"]["args"], SERVER_FLAGS)
    assert _contains(_steps(EMULATED, "llama-bench")[0]["llama-bench"]["args"], BENCH_FLAGS)
    assert emulated.emulate["memory"] and emulated.emulate["read_ahead_kb"] == "{read_ahead_kb}"
    assert {"blockstat", "threads"} <= set(emulated.collectors())


def test_trimmed_copy_keeps_the_shape(tmp_path: Path) -> None:
    """What the streaming_set fixture runs: fewer runs, the same steps, collectors, matrix keys and baseline."""
    trimmed = tmp_path / "trimmed.yaml"
    trimmed.write_text(trimmed_streaming_experiment(EMULATED.read_text()))
    small, full = load_resolved(trimmed), load_resolved(EMULATED)
    assert small.experiment.rounds == 1 and small.experiment.collectors() == full.experiment.collectors()
    assert small.experiment.emulate == full.experiment.emulate and small.experiment.baseline == full.experiment.baseline
    assert [set(s) for s in small.experiment.steps] == [set(s) for s in full.experiment.steps]
    small_plan, full_plan = build_plan(small), build_plan(full)
    assert len(small_plan.runs) < len(full_plan.runs)
    assert {(r.step, r.cache) for r in small_plan.runs} == {(r.step, r.cache) for r in full_plan.runs}
    server = _steps(trimmed, "llama-server")[0]["llama-server"]
    assert server["n_predict"] == 8 and len(server["prompts"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_paper_flags_exist_in_the_build() -> None:
    """Every option the paper experiments pass to llama-bench and llama-server is one the built binary lists."""
    from harness.engines.llamacpp import CPU_NATIVE_FLAGS, DEFAULT_CACHE_DIR, build_llamacpp

    cache = Path(os.environ.get("HARNESS_BUILD_CACHE", str(DEFAULT_CACHE_DIR))).expanduser()
    build = build_llamacpp({"sdist": "llama-cpp-python==0.3.36"}, list(CPU_NATIVE_FLAGS), cache_dir=cache, log=print)
    for kind in ("llama-bench", "llama-server"):
        done = subprocess.run([str(build.binary(kind)), "--help"], capture_output=True, text=True, timeout=60,
                              check=False)
        listed = set((done.stdout + done.stderr).replace(",", " ").split())
        for path in (ORIN, EMULATED, STRATEGIES, ORIN_STRATEGIES):
            for step in _steps(path, kind):
                flags = {str(a) for a in step[kind]["args"] if str(a).startswith("-") and not str(a)[1:].isdigit()}
                assert flags <= listed, f"{path.name}: {kind} does not know {sorted(flags - listed)}"
