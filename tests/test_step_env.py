"""A step's ``env:``: validated at its line, templated per cell, carried in spec.json, given to the engine process
added to the runner's own environment, recorded in the manifest's run entries and the runs table's ``env_`` columns.
The slow test runs a real engine, a declared one that prints what it sees (llama-server honouring a variable it
reads: tests/test_llama_steps.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from harness.campaign.orchestrator import planned
from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.config.target import Target
from harness.results.ingest import run_row
from harness.steps import STEPS
from harness.steps.env import name_problem
from tests.helpers import cli_in_process, fake_bmoe_cli, run_campaign


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return model


def _plan_error(tmp_path: Path, step: str) -> tuple[Path, list[str], int]:
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: x\nmodel: {_model(tmp_path)}\nmatrix: {{threads: [1, 2]}}\nsteps:\n{step}")
    done = cli_in_process("plan", str(exp))
    return exp, done.stderr.strip().splitlines(), done.returncode


@pytest.mark.parametrize(("env", "line", "field", "why"), [
    ("        LD_PRELOAD: /tmp/x.so\n", 9, "env.LD_PRELOAD", "LD_PRELOAD changes which code runs behind the build"),
    ("        HARNESS_RUN_MARK: x\n", 9, "env.HARNESS_RUN_MARK", "belongs to the harness and its runner"),
    ("        PATH: /opt/bin\n", 9, "env.PATH", "PATH changes which code runs"),
    ("        HF_TOKEN: hf_abc\n", 9, "env.HF_TOKEN", "HF_TOKEN looks like a secret (*TOKEN*)"),
    ("        my_api_key: abc\n", 9, "env.my_api_key", "looks like a secret (*KEY*)"),
    ("        1BAD: x\n", 9, "env.1BAD", "expected letters, digits and '_', not starting with a digit"),
    ("        FLAG: true\n", 9, "env.FLAG", "expected a string (quote it"),
    ("        LIST: [1, 2]\n", 9, "env.LIST", "expected a string"),
])
def test_a_refused_variable_is_one_line_at_its_own_line_and_field(tmp_path: Path, env: str, line: int, field: str,
                                                                  why: str) -> None:
    exp, lines, code = _plan_error(tmp_path, "  - llama-bench:\n      args: [-t, '{threads}']\n      env:\n"
                                             f"        FINE: '1'\n{env}")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {exp}:{line}: steps[0].llama-bench.{field}: "), lines[0]
    assert why in lines[0]


def test_llama_server_refuses_the_variables_it_reads_as_the_harness_flags(tmp_path: Path) -> None:
    exp, lines, code = _plan_error(tmp_path, "  - llama-server:\n      prompts: [hi]\n"
                                             "      env: {LLAMA_ARG_PORT: '8080', LLAMA_ARG_THREADS: '2'}\n")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {exp}:7: steps[0].llama-server.env: LLAMA_ARG_PORT would set "
                               "llama-server's flags the harness sets itself"), lines[0]


def test_an_equivalence_side_is_checked_for_its_engine(tmp_path: Path) -> None:
    exp, lines, code = _plan_error(tmp_path, "  - equivalence:\n      prompts: [hi]\n"
                                             "      a: {engine: llama.cpp}\n"
                                             "      b: {engine: llama.cpp, env: {LLAMA_ARG_MODEL: /other.gguf}}\n")
    assert code == 2 and len(lines) == 1 and f"{exp}:8: steps[0].equivalence.b" in lines[0], lines
    assert "LLAMA_ARG_MODEL would set llama.cpp's flags" in lines[0]


def test_names_the_engine_switches_may_use_and_the_ones_they_may_not() -> None:
    assert name_problem("HARNESS_EXPERT_PREAD") is None  # part of the build: the strategy patches' switches
    assert name_problem("OMP_NUM_THREADS") is None and name_problem("_x1") is None
    for refused in ("HARNESS_SYSROOT", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "AWS_SECRET_ACCESS_KEY",
                    "PGPASSWORD", "GIT_CREDENTIALS", "A-B", ""):
        assert name_problem(refused), refused


EXP = """\
name: env
model: {model}
matrix: {{threads: [1, 2]}}
cache: none
steps:
  - llama-bench: {{args: [-t, "{{threads}}"], env: {{HARNESS_EXPERT_PREAD: 131072, OMP_WAIT: "t{{threads}}"}}}}
  - llama-server: {{prompts: [hi], env: {{LLAMA_ARG_THREADS_BATCH: "{{threads}}"}}}}
  - equivalence:
      prompts: [hi]
      a: {{engine: llama.cpp, env: {{HARNESS_EXPERT_PREAD: "{{threads}}"}}}}
      b: {{engine: llama.cpp}}
  - llama-bench: {{args: [-t, "{{threads}}"]}}
    label: plain
"""


def test_env_is_templated_per_cell_and_carried_in_the_spec_and_the_manifest(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(EXP.format(model=_model(tmp_path)))
    plan = build_plan(load_resolved(exp))
    target = Target(name="local")
    seen = {}
    for run in plan.runs:
        step = STEPS[run.step]
        spec = step.runner_spec(run.cell.config, {"model": "/m"}, run.cache)
        seen[(run.cell.label, run.params["threads"])] = (spec.get("env"), planned(target, run).get("env"),
                                                         {s: v.get("env") for s, v in spec.get("sides", {}).items()})
    assert seen[("llama-bench1", 1)][:2] == ({"HARNESS_EXPERT_PREAD": "131072", "OMP_WAIT": "t1"},) * 2
    assert seen[("llama-bench1", 2)][:2] == ({"HARNESS_EXPERT_PREAD": "131072", "OMP_WAIT": "t2"},) * 2
    assert seen[("llama-server", 2)][:2] == ({"LLAMA_ARG_THREADS_BATCH": "2"},) * 2
    # equivalence: each side its own, in the spec; the run entry has none of its own
    assert seen[("equivalence", 2)] == (None, None, {"a": {"HARNESS_EXPERT_PREAD": "2"}, "b": None})
    # a step without env: has no env key anywhere: its spec and its manifest entry are as before
    assert seen[("plain", 1)] == (None, None, {})


def test_the_runs_table_has_a_column_per_variable_null_where_unset() -> None:
    base = {"run_id": "r", "index": 1, "target": "t", "step": "llama-bench", "cache": "none", "round": 1,
            "repeat": 1, "params": {"threads": 1}}
    with_env = run_row({**base, "env": {"HARNESS_EXPERT_PREAD": "131072"}}, None)
    assert with_env["env_HARNESS_EXPERT_PREAD"] == "131072"
    assert not any(key.startswith("env_") for key in run_row(base, None))


DECLARED = {
    "binary": sys.executable,
    # prints what it sees as one JSON line: the step's variables, and that the runner's own marks are still there
    # (added to the environment, not replacing it)
    "run": ["{binary}", "-c", "import json, os; e = os.environ; print('ENV ' + json.dumps(dict("
            "depth=e.get('HARNESS_EXPERT_DEPTH'), fixed=e.get('FIXED'), mark=('HARNESS_RUN_MARK' in e), "
            "spawn=('HARNESS_RUN_SPAWN' in e), path=e.get('PATH') == os.environ.get('PATH') != None)))"],
    "extract": [{"table": "requests", "json_prefix": "ENV ",
                 "columns": {"seen_depth": "depth", "seen_fixed": "fixed", "seen_mark": "mark",
                             "seen_spawn": "spawn"}}],
}


@pytest.mark.slow
def test_a_real_engine_sees_its_cells_env_beside_the_runners_own(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(json.dumps({
        "name": "env-real", "cache": "none", "validity": "off", "matrix": {"depth": [4, 16]},
        "engines": {"printer": DECLARED},
        "steps": [{"run": {"engine": "printer", "model": None,
                           "env": {"HARNESS_EXPERT_DEPTH": "{depth}", "FIXED": "two words $HOME"}}}]}))
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    from harness.results.loader import load_result_set

    rs = load_result_set(next((tmp_path / "results").iterdir()))
    runs = rs.table("runs").set_index("run_id")
    requests = rs.table("requests").set_index("run_id")
    assert sorted(requests["seen_depth"]) == [4, 16]  # the extractor reads the printed "4" as a number
    for run_id, request in requests.iterrows():
        # what the engine printed is its cell's value, and the runs table says the same (as text: the env's)
        depth = runs.loc[run_id, "env_HARNESS_EXPERT_DEPTH"]
        assert str(request["seen_depth"]) == str(runs.loc[run_id, "depth"]) == depth
        assert request["seen_fixed"] == "two words $HOME" == runs.loc[run_id, "env_FIXED"]
        assert bool(request["seen_mark"]) and bool(request["seen_spawn"])
    manifest = json.loads((rs.path / "manifest.json").read_text())
    assert sorted(entry["env"]["HARNESS_EXPERT_DEPTH"] for entry in manifest["runs"]) == ["16", "4"]
    for run_dir in (rs.path / "raw").glob("*/*"):
        spec = json.loads((run_dir / "run.json").read_text())["spec"]
        assert spec["step"]["env"] == {"HARNESS_EXPERT_DEPTH": str(spec["params"]["depth"]),
                                       "FIXED": "two words $HOME"}
    # what a user asks of the set: runs by the variable, as by a matrix axis
    query = cli_in_process("results", "query", "SELECT env_HARNESS_EXPERT_DEPTH AS d, count(*) AS n FROM runs "
                           "GROUP BY d ORDER BY d", "--results", str(tmp_path / "results"), "--format", "csv")
    assert query.returncode == 0, query.stderr
    assert query.stdout.split() == ["d,n", "16,1", "4,1"]


def test_the_equivalence_table_shows_each_sides_env_only_in_a_set_that_has_one() -> None:
    from harness.steps.equivalence import equivalence_row

    rec = {"prompt_index": 0, "prompt": "hi", "compared_as": "ids", "identical": True, "first_divergence_pos": None,
           "a_token": None, "b_token": None, "a_n": 2, "b_n": 2, "a_tokens": [1, 2], "b_tokens": [1, 2]}
    sides = {"a": {"engine": "llama.cpp", "env": {"HARNESS_EXPERT_PREAD": "131072"}}, "b": {"engine": "llama.cpp"}}
    row = equivalence_row(rec, sides)
    assert row["a_env"] == '{"HARNESS_EXPERT_PREAD": "131072"}' and row["b_env"] is None
    plain = equivalence_row(rec, {"a": {"engine": "llama.cpp"}, "b": {"engine": "llama.cpp"}})
    assert "a_env" not in plain and "b_env" not in plain


def test_the_runner_refuses_a_hand_written_spec_whose_env_is_not_names_to_strings() -> None:
    from runner.steps.base import StepFailed, step_env

    assert step_env({}) == {} and step_env({"env": {"X": "1"}}) == {"X": "1"}
    for bad in ({"X": 1}, ["X=1"], {"X": None}):
        with pytest.raises(StepFailed, match="the spec's env must map names to strings"):
            step_env({"env": bad})


FAKE_BMOE_CLI = """#!/bin/sh
# bmoe-cli's output without --progress (prompt, pieces, blank line, summary); the piece is what the env says
while [ $# -gt 0 ]; do case "$1" in -p) prompt="$2"; shift;; esac; shift; done
piece="${HARNESS_EXPERT_ASYNC:-unset}"
printf '%s' "$prompt"; printf ' %s\\n\\ngeneration: 2 tokens, 0.1 s/token (10.0 tok/s)\\n' "$piece"
"""


def test_an_equivalence_side_of_bmoe_cli_runs_with_its_own_env(tmp_path: Path) -> None:
    from runner.steps.generators import BmoeCliGenerator

    ctx, model = fake_bmoe_cli(tmp_path, FAKE_BMOE_CLI)
    side = {"model": str(model), "args": [], "temperature": 0.0}
    with_env = BmoeCliGenerator(ctx, {**side, "env": {"HARNESS_EXPERT_ASYNC": "8"}})
    with_env.start()
    assert with_env.generate("p", 2, 42, 30)["text"] == " 8"
    without = BmoeCliGenerator(ctx, side)
    without.start()
    assert without.generate("p", 2, 42, 30)["text"] == " unset"


EQUIVALENCE = """\
name: env-equivalence
model: {synth: {layers: 4, experts: 8, used: 2}}
cache: none
validity: off
steps:
  - equivalence:
      a: {args: [-t, 1, -np, 1], env: {LLAMA_ARG_CTX_SIZE: "768"}}
      b: {args: [-t, 1, -np, 1, -c, 768]}
      prompts: ["What is the capital of Australia?"]
      n_predict: 8
"""


@pytest.mark.slow
def test_an_equivalence_side_of_llama_server_runs_with_its_own_env(tmp_path: Path) -> None:
    """Side a asks for its context by the variable llama.cpp reads as -c, side b by -c: the same server settings,
    so the same tokens; a's log shows the variable reached its server, and the table says which side had it."""
    exp = tmp_path / "e.yaml"
    exp.write_text(EQUIVALENCE)
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from harness.results.loader import load_result_set

    rs = load_result_set(next((tmp_path / "results").iterdir()))
    row = rs.table("equivalence").iloc[0]
    assert bool(row["identical"]) and row["a_env"] == '{"LLAMA_ARG_CTX_SIZE": "768"}' and row["b_env"] is None
    logs = {path.parent.name: path.read_text(errors="replace")
            for path in rs.path.glob("raw/*/*/*/llama-server.stderr")}
    assert len(logs) == 2, sorted(logs)
    assert all(re.findall(r"n_ctx_slot = (\d+)", log) == ["768"] for log in logs.values())
