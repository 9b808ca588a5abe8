"""The equivalence step: greedy decoding under two sides, compared token id by token id (or byte for byte as text).

Quick tests: the comparison itself (runner/steps/equivalence.py), the config's refusals, the table rows, and a side's
cgroup on this machine's real cgroups (made, recorded for repair, removed). Slow tests run campaigns for real on the
cached synthetic models: llama.cpp mmap inside a 512 MiB budget against the same model fully resident without one
must be identical, and a side that samples differently must come out as a divergence, not a crash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from harness.engines.bigmoeonedge.source import PINNED_COMMIT, SOURCES_ENV, archive_name
from harness.steps.equivalence import EquivalenceConfig, equivalence_row
from runner.emulation import cgroup
from runner.emulation.budget import SideBudget
from runner.emulation.state import run_state_path
from runner.run_context import RunContext
from runner.steps.base import StepFailed
from runner.steps.equivalence import compare, run_equivalence, summarize
from runner.steps.generators import BmoeCliGenerator
from tests.helpers import BUILD_TIMEOUT_S, NoCollectors, cgroups_missing, fake_bmoe_cli, run_campaign

MiB = 1 << 20


def ids(*tokens: int) -> dict[str, object]:
    return {"tokens": list(tokens), "text": ""}


def text(value: str) -> dict[str, object]:
    return {"tokens": None, "text": value}


def test_identical_token_ids_pass() -> None:
    row = compare(ids(5, 6, 7), ids(5, 6, 7))
    assert row == {"compared_as": "ids", "identical": True, "a_n": 3, "b_n": 3, "first_divergence_pos": None,
                   "a_token": None, "b_token": None}


def test_first_divergence_is_the_first_differing_position_with_both_tokens() -> None:
    row = compare(ids(5, 6, 7, 8, 9), ids(5, 6, 70, 8, 90))
    assert (row["identical"], row["first_divergence_pos"], row["a_token"], row["b_token"]) == (False, 2, "7", "70")


def test_a_prefix_diverges_where_the_shorter_output_ends() -> None:
    row = compare(ids(5, 6), ids(5, 6, 7, 8))
    assert (row["identical"], row["first_divergence_pos"], row["a_token"], row["b_token"]) == (False, 2, None, "7")
    assert (row["a_n"], row["b_n"]) == (2, 4)
    assert compare(ids(), ids())["identical"]


def test_text_is_compared_byte_for_byte() -> None:
    # the same glyph, composed vs decomposed: equal on screen, different bytes (offset 3: after "caf")
    row = compare(text("caf\u00e9 au lait"), text("cafe\u0301 au lait"))
    assert (row["compared_as"], row["identical"], row["first_divergence_pos"]) == ("text", False, 3)
    assert row["a_token"].startswith("\u00e9") and row["b_token"].startswith("e\u0301")
    assert compare(text("same bytes"), text("same bytes"))["identical"]


def test_an_engine_without_ids_makes_the_comparison_textual() -> None:
    row = compare({"tokens": [1, 2], "text": "ab"}, text("ab"))
    assert (row["compared_as"], row["identical"], row["a_n"]) == ("text", True, 2)


def test_summary_fails_on_the_first_divergent_prompt() -> None:
    rows = [dict(compare(ids(1, 2), ids(1, 2)), prompt_index=0),
            dict(compare(ids(1, 2, 3), ids(1, 9, 3)), prompt_index=1),
            dict(compare(ids(4), ids(5)), prompt_index=2)]
    summary = summarize(rows)
    assert (summary["verdict"], summary["identical"], summary["diverged_prompts"]) == ("fail", False, 2)
    assert summary["first_divergence"] == {"prompt_index": 1, "first_divergence_pos": 1, "a_token": "2",
                                           "b_token": "9"}
    assert summarize(rows[:1])["verdict"] == "pass"


@pytest.mark.parametrize(("side", "words"), [
    ({"engine": "vllm"}, "no greedy generator for engine 'vllm'"),
    ({"args": ["-m", "x.gguf"]}, "-m are set by the harness for llama.cpp"),
    ({"memory": "64k"}, "expected a memory budget of at least 4.0 MiB"),
    ({"temperature": -1}, "greater than or equal to 0"),
])
def test_a_bad_side_is_refused_with_what_is_wrong(side: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        EquivalenceConfig.model_validate({"a": side, "b": {}, "prompts": ["hi"]})


def test_a_comparison_record_becomes_a_table_row_with_each_sides_settings() -> None:
    record = dict(compare(ids(1, 2), ids(1, 3)), prompt_index=0, prompt="hi", a_tokens=[1, 2], b_tokens=[1, 3],
                  a_text="xy", b_text="xz")
    sides = {"a": {"engine": "llama.cpp", "args": ["-t", 2], "memory_bytes": 512 * MiB, "temperature": 0.0,
                   "seed": 42},
             "b": {"engine": "llama.cpp", "args": ["-lm", "none"], "memory_bytes": None, "temperature": 0.0,
                   "seed": 42}}
    measured = {"a": {"cache": {"residency_before_pct": 0.0, "cold_reached": True}}}
    row = equivalence_row(record, sides, measured)
    assert (row["identical"], row["first_divergence_pos"], row["a_token"], row["b_token"]) == (False, 1, "2", "3")
    assert (row["a_output"], row["b_output"]) == ("[1, 2]", "[1, 3]")
    assert (row["a_args"], row["a_memory_bytes"], row["b_args"], row["b_memory_bytes"]) == (
        "-t 2", 512 * MiB, "-lm none", None)
    assert (row["a_cold_reached"], row["b_cold_reached"]) == (True, None)  # b's start not recorded: unknown


@pytest.mark.skipif(cgroups_missing() is not None, reason=cgroups_missing() or "")
def test_a_side_budget_is_a_cgroup_recorded_for_repair_and_removed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_EMULATE_STATE", str(tmp_path))
    state = Path(run_state_path(os.getpid()))
    # the run's emulation wrote its state file (here: read_ahead_kb only, no cgroups): it must stay for it
    state.write_text(json.dumps({"pid": os.getpid(), "run_id": "t-equivalence", "cgroups": []}))
    budget = SideBudget(None, "t-equivalence", "a", 64 * MiB)
    record = budget.setup()
    try:
        assert record["memory_bytes"] == 64 * MiB and os.path.isdir(record["cgroup"])
        assert budget.dirs == {"memory": record["cgroup"]}
        assert json.loads(state.read_text())["cgroups"] == [record["cgroup"]]  # a killed runner's repair finds it
    finally:
        done = budget.teardown()
    assert done["removed"] and not os.path.isdir(record["cgroup"])
    assert json.loads(state.read_text())["cgroups"] == []
    # a side without a budget in a run without a memory cgroup gets none: it runs as any step does
    assert SideBudget(None, "t-equivalence", "b", None).setup() == {"memory_bytes_requested": None}


def test_a_side_nests_in_the_runs_v2_cgroup_and_the_controller_is_passed_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cg"
    run_dir = root / "harness" / "run1.7"
    run_dir.mkdir(parents=True)
    for where in (root, root / "harness", run_dir):
        (where / "cgroup.subtree_control").write_text("")
    (root / "cgroup.controllers").write_text("io memory\n")
    monkeypatch.setenv("HARNESS_CGROUP_ROOT", str(root))
    monkeypatch.setenv("HARNESS_EMULATE_STATE", str(tmp_path / "state"))

    class RunEmulation:  # a v2 run with an io budget only: one dir, no memory limit
        dirs = {"io": str(run_dir)}

    budget = SideBudget(RunEmulation(), "run1", "b", None)
    record = budget.setup()
    assert record["cgroup"] == str(run_dir / "side-b") and budget.dirs == {"memory": str(run_dir / "side-b")}
    for where in (root, root / "harness", run_dir):  # every ancestor hands memory down to the side
        assert "+memory" in (where / "cgroup.subtree_control").read_text()
    assert cgroup.detect() == {"memory": ("v2", str(root)), "io": ("v2", str(root))}


FAKE_BMOE_CLI = """#!/bin/sh
# prints as bmoe-cli does without --progress: the prompt, the pieces, a blank line, the summary
while [ $# -gt 0 ]; do case "$1" in -p) prompt="$2"; shift;; esac; shift; done
printf '%s' "$prompt"; printf ' piece\n\ngeneration: 2 tokens, 0.1 s/token (10.0 tok/s)\n'
"""


def test_bmoe_cli_output_is_the_text_between_the_prompt_and_its_summary(tmp_path: Path) -> None:
    ctx, model = fake_bmoe_cli(tmp_path, FAKE_BMOE_CLI)
    generator = BmoeCliGenerator(ctx, {"model": str(model), "args": ["-t", 2], "temperature": 0.0})
    generator.start()
    assert generator.generate("two\nlines", 4, 42, 30) == {"tokens": None, "text": " piece"}
    assert ctx.rusage["bmoe-cli-0"]["exit_code"] == 0  # one process per prompt, each reaped


@pytest.mark.skipif(cgroups_missing() is not None, reason=cgroups_missing() or "")
def test_a_side_that_fails_to_start_fails_the_step_and_leaves_no_cgroup(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_EMULATE_STATE", str(tmp_path / "state"))
    (tmp_path / "bin").mkdir()
    server = tmp_path / "bin" / "llama-server"
    server.write_text("#!/bin/sh\necho 'error: invalid argument: --no-mmap' >&2\nexit 1\n")
    server.chmod(0o755)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(4096))
    side = {"engine": "llama.cpp", "model": str(model), "args": ["--no-mmap"], "memory_bytes": 64 * MiB, "seed": 1}
    spec = {"sides": {"a": side, "b": dict(side, memory_bytes=None)}, "prompts": ["hi"], "n_predict": 2,
            "health_timeout_s": 30, "timeout_s": 60}
    ctx = RunContext({"run_id": "t-eq-fail", "engines": {"llama.cpp": {"bin_dir": str(server.parent)}}},
                     str(tmp_path), NoCollectors())
    made: list[str | None] = []
    setup = SideBudget.setup
    monkeypatch.setattr(SideBudget, "setup", lambda self: (setup(self), made.append(self.path))[0])
    with pytest.raises(StepFailed, match="llama-server exited with 1 before it was healthy: error: invalid argument"):
        run_equivalence(ctx, spec)
    assert (tmp_path / "side-a" / "llama-server.stderr").exists()  # each side's logs in its own directory
    assert len(made) == 1 and made[0] and made[0].endswith(".a")  # side a had one; b never ran
    assert not os.path.isdir(made[0])
    assert not list((tmp_path / "state").glob("run-*.json"))  # nothing left for a repair to undo


EXPERIMENT = """\
name: equivalence-test
model: {{synth: {synth}}}
emulate: {emulate}
cache: none
validity: off
steps:
  - equivalence:
      a: {a}
      b: {b}
      prompts: ["Why is a solid state drive faster than a hard disk for random reads?",
                "What is the capital of Australia?"]
      n_predict: {n_predict}
      ignore_eos: {ignore_eos}
"""


def run_equivalence_campaign(tmp_path: Path, **fields: object) -> tuple[Path, pd.DataFrame, dict[str, object]]:
    exp = tmp_path / "equivalence.yaml"
    exp.write_text(EXPERIMENT.format(**{"ignore_eos": "true", **fields}))
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"), timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result_set,) = (tmp_path / "results").iterdir()
    (run_json,) = result_set.glob("raw/*/*/run.json")
    return result_set, pd.read_parquet(result_set / "tables" / "equivalence.parquet"), json.loads(run_json.read_text())


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
@pytest.mark.skipif(cgroups_missing() is not None, reason=cgroups_missing() or "")
def test_mmap_under_a_512m_budget_decodes_what_the_resident_model_decodes(tmp_path: Path) -> None:
    result_set, table, record = run_equivalence_campaign(
        tmp_path, synth="{size: 1.6G, experts: 64, used: 4, hidden: 512}", emulate="{read_ahead_kb: 128}",
        a="{engine: llama.cpp, args: [-t, 2, -c, 256], memory: 512M}",
        b="{engine: llama.cpp, args: [-t, 2, -c, 256, -lm, none]}", n_predict=16)
    assert list(table["compared_as"]) == ["ids", "ids"] and table["identical"].all()
    assert list(table["a_n"]) == [16, 16] and list(table["b_n"]) == [16, 16]
    summary = record["summary"]
    assert (summary["verdict"], summary["first_divergence"]) == ("pass", None)
    budget = summary["sides"]["a"]["budget"]
    # side a really ran inside 512 MiB (the 1.6 GB model streamed), side b in no cgroup of its own
    assert budget["memory_bytes"] == 512 * MiB and budget["stats"]["memory_peak_bytes"] <= 512 * MiB
    assert budget["removed"] and "cgroup" not in summary["sides"]["b"]["budget"]
    # each side's start is recorded (cold unless another process on this shared machine holds the model mapped)
    assert all(side["cache"]["residency_before_pct"] is not None for side in summary["sides"].values())
    report = (result_set / "report.md").read_text()
    assert "## Equivalence" in report and "| pass " in report


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
@pytest.mark.skipif(cgroups_missing() is not None, reason=cgroups_missing() or "")
def test_a_side_that_samples_differently_is_a_divergence_not_a_crash(tmp_path: Path) -> None:
    # the run has a memory budget too: each side's cgroup is a child of the run's
    _result_set, table, record = run_equivalence_campaign(
        tmp_path, synth="{layers: 4, experts: 8, used: 2}", emulate="{memory: 1G}",
        a="{args: [-t, 2, -c, 256], memory: 256M}", b="{args: [-t, 2, -c, 256], temperature: 8, seed: 7}",
        n_predict=16)
    assert not table["identical"].all()
    first = table[~table["identical"]].iloc[0]
    assert first["a_token"] != first["b_token"] and 0 <= first["first_divergence_pos"] < 16
    summary = record["summary"]
    assert summary["verdict"] == "fail" and summary["first_divergence"]["prompt_index"] == first["prompt_index"]
    run_cgroup = record["emulation"]["cgroups"]["memory"]
    assert summary["sides"]["a"]["budget"]["cgroup"] == os.path.join(run_cgroup, "side-a")
    assert summary["sides"]["b"]["budget"]["cgroup"] == os.path.join(run_cgroup, "side-b")
    assert record["emulation"]["cgroups_removed"]


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
@pytest.mark.skipif(cgroups_missing() is not None, reason=cgroups_missing() or "")
def test_bigmoeonedge_streamed_against_llama_resident_is_compared_as_text(tmp_path: Path) -> None:
    folder = os.environ.get(SOURCES_ENV)
    if not folder or not (Path(folder) / archive_name("BigMoeOnEdge", PINNED_COMMIT)).is_file():
        pytest.skip(f"no BigMoeOnEdge-2d4f2b1.tar.gz in ${SOURCES_ENV} ({folder or 'unset'})")
    # bmoe-cli stops at an end-of-generation token: llama.cpp must too, or a stop would read as a divergence
    result_set, table, record = run_equivalence_campaign(
        tmp_path, synth="{size: 1.6G, experts: 64, used: 4, hidden: 512}", emulate="{read_ahead_kb: 128}",
        a="{engine: bigmoeonedge, args: [--moe-stream, --cache-mb, 0, -t, 2], memory: 512M}",
        b="{engine: llama.cpp, args: [-t, 2, -c, 256, -lm, none]}", n_predict=16, ignore_eos="false")
    # whether the engines agree is the finding (the report shows it); the step must have compared them right
    assert list(table["compared_as"]) == ["text", "text"] and (table["b_n"] > 0).all()
    diverged = table[~table["identical"]]
    assert all(row["a_output"].encode()[:row["first_divergence_pos"]] == row["b_output"].encode()[
        :row["first_divergence_pos"]] for _, row in diverged.iterrows())  # identical up to the divergence
    summary = record["summary"]
    assert summary["verdict"] == ("pass" if diverged.empty else "fail")
    assert summary["sides"]["a"]["budget"]["memory_bytes"] == 512 * MiB
    assert "## Equivalence" in (result_set / "report.md").read_text()
