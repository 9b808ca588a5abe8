"""`harness ci init --gate change`: the workflow that gates the engine change a push makes (the pushed revision's
build against the baseline build, in one session, per cell, suspects re-run). GitHub's schema, the commands it
runs against the CLI, and its "engine sources" step run for real on a git repository of an engine with a patch
series (each side's tree from its own revision, its own series applied)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from tests.helpers import REPO, cli_in_process, without_columns
from tests.test_ci_workflow import load, schema_check

EXPERIMENT = """\
name: enginechange
builds:   # the workflow replaces both sources (--build-source): the pushed revision's tree and the baseline's
  baseline: {engine: llama.cpp, source: {path: ../engine}}
  candidate: {engine: llama.cpp, source: {path: ../engine}}
matrix: {build: [baseline, candidate], threads: [1, 2]}
rounds: 5
steps:
  - llama-bench: {args: [-t, "{threads}"]}
"""
ENGINE_C = "int main(void) { return 0; }\n"
# a patch series of one patch, as `git format-patch` writes it (the candidate's change)
PATCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: lab <lab@example.org>
Subject: [PATCH] engine: sleep per token

---
 main.c | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/main.c b/main.c
--- a/main.c
+++ b/main.c
@@ -1 +1 @@
-int main(void) { return 0; }
+int main(void) { return 1; }
--
2.39.5
"""


def layout(root: Path) -> Path:
    """A lab repository: the experiment, the engine's tree in engine/, its patch series in patches/."""
    (root / "ci").mkdir(parents=True)
    (root / "ci" / "change.yaml").write_text(EXPERIMENT)
    (root / "engine").mkdir()
    (root / "engine" / "main.c").write_text(ENGINE_C)
    (root / "patches").mkdir()
    return root


def ci_init(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    engine = [] if "--engine-dir" in args else ["--engine-dir", "engine"]
    return cli_in_process("ci", "init", "--gate", "change", "--experiment", "ci/change.yaml", *engine,
                          *args, cwd=root)


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = layout(tmp_path_factory.mktemp("lab"))
    done = ci_init(root, "--board", "orin-01", "--engine-dir", "engine", "--patches", "patches")
    assert done.returncode == 0, done.stderr
    assert "build candidate gated against build baseline" in done.stdout
    return root / ".github" / "workflows" / "engine-change.yml"


def _job(path: Path) -> dict:
    return load(path)["jobs"]["engine-change"]


def _step(path: Path, name: str) -> dict:
    (found,) = [step for step in _job(path)["steps"] if step.get("name") == name]
    return found


def test_the_change_workflow_passes_the_github_schema(workflow: Path) -> None:
    done = schema_check(workflow)
    assert done.returncode == 0, done.stdout + done.stderr


def test_it_builds_both_sides_in_one_session_and_gates_across_build(workflow: Path) -> None:
    wf = load(workflow)
    assert set(wf["on"]) == {"push", "workflow_dispatch"} and wf["on"]["push"]["branches"] == ["main"]
    job = _job(workflow)
    env = job["env"]
    assert (env["EXPERIMENT"], env["ENGINE_DIR"], env["PATCHES"]) == ("ci/change.yaml", "engine", "patches")
    assert (env["BASELINE_BUILD"], env["CANDIDATE_BUILD"]) == ("baseline", "candidate")
    assert env["BASELINE_REV"] == "${{ inputs.baseline_rev || vars.BASELINE_REV || '' }}"
    assert job["concurrency"] == {"group": "board-${{ vars.BOARD || 'orin-01' }}", "cancel-in-progress": False}
    checkout = job["steps"][0]
    assert checkout["uses"] == "actions/checkout@v4" and checkout["with"]["fetch-depth"] == 0
    run = _step(workflow, "harness run")
    assert run["run"].count("harness run") == 1  # one campaign: both builds interleaved in one session
    assert '--build-source "$CANDIDATE_BUILD=$CANDIDATE_SOURCE"' in run["run"]
    assert '--build-source "$BASELINE_BUILD=$BASELINE_SOURCE"' in run["run"]
    assert run["env"] == {"CANDIDATE_SOURCE": "${{ steps.sources.outputs.candidate }}",
                          "BASELINE_SOURCE": "${{ steps.sources.outputs.baseline }}"}
    gate = _step(workflow, "harness gate")["run"]
    assert '--across build --baseline-value "$BASELINE_BUILD"' in gate and "--confirm 3" in gate
    assert "--junit gate.xml" in gate and "--metric decode_tps" in gate
    assert _step(workflow, "remove the engine trees")["if"] == "always()"


def test_the_commands_it_runs_take_its_options(workflow: Path) -> None:
    """Every option the workflow gives `harness run` and `harness gate` is one the command has: renaming one must
    fail here, not on a board."""
    for command, step in (("gate", "harness gate"), ("run", "harness run")):
        text = _step(workflow, step)["run"]
        used = {word.split("=")[0] for word in text.split() if word.startswith("--")}
        help_text = subprocess.run([sys.executable, "-m", "harness", command, "--help"], cwd=REPO, text=True,
                                   capture_output=True, env=without_columns(os.environ), check=True).stdout
        assert used and all(option in help_text for option in used), (command, used - set(help_text.split()))


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "lab", "GIT_AUTHOR_EMAIL": "lab@example.org",
           "GIT_COMMITTER_NAME": "lab", "GIT_COMMITTER_EMAIL": "lab@example.org"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def run_step(workflow: Path, name: str, repo: Path, trees: Path, **env: str) -> dict[str, str]:
    """A step's script as the runner runs it (bash, the job's env with GitHub's expressions filled in): its
    GITHUB_OUTPUT as a dict."""
    output = trees.parent / "github_output"
    output.write_text("")
    job_env = {k: str(v) for k, v in _job(workflow)["env"].items() if "${{" not in str(v)}
    full = {**os.environ, **job_env, "TREES": str(trees), "GITHUB_OUTPUT": str(output), "BASELINE_REV": "",
            "PUSHED_BEFORE": "", **env}
    done = subprocess.run(["bash", "-e", "-c", _step(workflow, name)["run"]], cwd=repo, env=full,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


@pytest.fixture
def lab(tmp_path: Path) -> tuple[Path, str, str]:
    """A git repository with two revisions: the engine alone, then its patch series of one patch."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = layout(tmp_path / "repo")
    git(repo, "init", "-q", "-b", "main")
    (repo / "patches" / ".keep").write_text("")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "engine")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "patches" / "0001-sleep-per-token.patch").write_text(PATCH)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "patch series: sleep per token")
    return repo, first, git(repo, "rev-parse", "HEAD")


def test_engine_sources_takes_each_side_from_its_revision(workflow: Path, lab: tuple[Path, str, str],
                                                          tmp_path: Path) -> None:
    """The push's `before` is the first revision: the candidate tree has the series applied, the baseline tree
    (the first revision's series: none) is the engine as it was; neither holds .git; the workspace is untouched."""
    repo, first, second = lab
    trees = tmp_path / "temp" / "engine-trees"
    trees.parent.mkdir()
    out = run_step(workflow, "engine sources", repo, trees, PUSHED_BEFORE=first)
    assert out == {"candidate": f"path:{trees}/candidate", "candidate_rev": second,
                   "baseline": f"path:{trees}/baseline", "baseline_rev": first}
    assert (trees / "candidate" / "main.c").read_text() == "int main(void) { return 1; }\n"
    assert (trees / "baseline" / "main.c").read_text() == ENGINE_C
    assert not (trees / "candidate" / ".git").exists() and not (trees / "baseline" / ".git").exists()
    assert (repo / "engine" / "main.c").read_text() == ENGINE_C and git(repo, "status", "--porcelain") == ""
    run_step(workflow, "remove the engine trees", repo, trees)
    assert not trees.exists() and len(git(repo, "worktree", "list").splitlines()) == 1


def test_a_pinned_baseline_and_a_first_push_fall_back_as_said(workflow: Path, lab: tuple[Path, str, str],
                                                              tmp_path: Path) -> None:
    """BASELINE_REV pins the good revision (here the candidate's own: an A/A run); a push without a `before`
    (all zeros: a new branch) compares with the parent commit. A second run replaces the first one's trees."""
    repo, first, second = lab
    trees = tmp_path / "temp" / "engine-trees"
    trees.parent.mkdir()
    pinned = run_step(workflow, "engine sources", repo, trees, BASELINE_REV=second, PUSHED_BEFORE=first)
    assert (pinned["baseline_rev"], pinned["candidate_rev"]) == (second, second)
    assert (trees / "baseline" / "main.c").read_text() == "int main(void) { return 1; }\n"
    new_branch = run_step(workflow, "engine sources", repo, trees, PUSHED_BEFORE="0" * 40)
    assert new_branch["baseline_rev"] == first and (trees / "baseline" / "main.c").read_text() == ENGINE_C


def test_an_engine_tree_that_is_the_repository_itself(tmp_path: Path, lab: tuple[Path, str, str]) -> None:
    """--engine-dir . and no series: each side's tree is its revision's whole repository, without .git."""
    repo, first, second = lab
    done = ci_init(repo, "--engine-dir", ".", "--out", str(tmp_path / "fork.yml"))
    assert done.returncode == 0, done.stderr
    trees = tmp_path / "temp" / "engine-trees"
    trees.parent.mkdir()
    out = run_step(tmp_path / "fork.yml", "engine sources", repo, trees, PUSHED_BEFORE=first)
    assert out["baseline_rev"] == first and not (trees / "baseline" / "patches" / "0001-sleep-per-token.patch").exists()
    assert (trees / "candidate" / "patches" / "0001-sleep-per-token.patch").exists()
    assert (trees / "candidate" / "engine" / "main.c").read_text() == ENGINE_C  # a fork's series is not applied
    assert not (trees / "candidate" / ".git").exists()


@pytest.mark.parametrize(("args", "experiment", "said"), [
    (["--gate", "nightly"], EXPERIMENT, "--gate: expected one of variants, change"),
    ([], "name: x\nmatrix: {threads: [1, 2]}\nsteps: [llama-bench: {}]\n", "needs a matrix axis `build`"),
    (["--candidate-build", "head"], EXPERIMENT, "--candidate-build head: not a build of"),
    ([], EXPERIMENT.replace("[baseline, candidate]", "[baseline]"), "needs a matrix axis `build`"),
    (["--candidate-build", "baseline"], EXPERIMENT, "--candidate-build baseline: not a build of"),
    (["--engine-dir", "/opt/llama.cpp"], EXPERIMENT, "--engine-dir /opt/llama.cpp: give a path inside"),
    (["--engine-dir", "vendor/llama.cpp"], EXPERIMENT, "--engine-dir vendor/llama.cpp: no such directory"),
    (["--patches", "series"], EXPERIMENT, "--patches series: no such directory"),
    (["--baseline-variant", "threads=1"], EXPERIMENT, "the change gate compares builds"),
])
def test_ci_init_change_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], experiment: str,
                                                      said: str) -> None:
    root = layout(tmp_path)
    (root / "ci" / "change.yaml").write_text(experiment)
    done = ci_init(root, *args)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (root / ".github").exists()


def test_the_example_in_docs_ci_md_is_true(tmp_path: Path) -> None:
    """docs/ci.md's example repository: its experiment is the shipped one, which plans (both builds in every
    round, interleaved), and its `harness ci init` command writes the change workflow for that layout."""
    import re
    import shlex

    text = (REPO / "docs" / "ci.md").read_text()
    shipped = REPO / "experiments" / "examples" / "engine-change.yaml"
    experiment = re.search(r"```yaml\n(# experiments/examples/engine-change\.yaml.*?)```", text, re.S)
    command = re.search(r"^(harness ci init --gate change .*?[^\\])$", text, re.S | re.M)
    assert experiment and command, "docs/ci.md lost its example experiment or its ci init command"
    assert experiment.group(1) == shipped.read_text(), "docs/ci.md's experiment differs from the shipped file"
    runs = build_plan(load_resolved(shipped)).runs
    assert [(r.params["build"], r.round) for r in runs[:5]] == [
        ("baseline", 1), ("baseline", 1), ("candidate", 1), ("candidate", 1), ("baseline", 2)]
    assert len(runs) == 20 and {r.round for r in runs} == {1, 2, 3, 4, 5}
    root = tmp_path / "lab-harness"
    for folder in ("engine", "patches/llama.cpp"):
        (root / folder).mkdir(parents=True)
    shutil.copytree(REPO / "experiments", root / "experiments")
    args = shlex.split(command.group(1).replace("\\\n", " "))
    done = cli_in_process(*args[1:], cwd=root)
    assert done.returncode == 0, done.stderr
    job = _job(root / ".github" / "workflows" / "engine-change.yml")
    assert (job["env"]["ENGINE_DIR"], job["env"]["PATCHES"]) == ("engine", "patches/llama.cpp")


def test_the_change_gate_needs_the_engine_dir(tmp_path: Path) -> None:
    """Without --engine-dir the job would build the harness's own checkout as the engine: refused, one line."""
    root = layout(tmp_path)
    done = cli_in_process("ci", "init", "--gate", "change", "--experiment", "ci/change.yaml", cwd=root)
    assert done.returncode == 2 and "--gate change needs --engine-dir DIR" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (root / ".github").exists()


def test_the_series_is_applied_even_when_the_trees_sit_inside_a_repository(workflow: Path,
                                                                           lab: tuple[Path, str, str]) -> None:
    """A runner whose temporary directory lies inside a git checkout: `git apply` there would read the patch's
    paths from that repository's root and skip them without a word; the ceiling keeps it patching the tree."""
    repo, first, _ = lab
    trees = repo / "runner-temp" / "engine-trees"
    trees.parent.mkdir()
    run_step(workflow, "engine sources", repo, trees, PUSHED_BEFORE=first)
    assert (trees / "candidate" / "main.c").read_text() == "int main(void) { return 1; }\n"
    run_step(workflow, "remove the engine trees", repo, trees)
