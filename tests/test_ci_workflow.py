"""The regression workflow (.github/workflows/regression.yml): GitHub's schema, the keys the harness relies on,
and `harness ci init`, which writes it (the committed file is its output with the defaults)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, cli_in_process, without_columns

WORKFLOW = REPO / ".github" / "workflows" / "regression.yml"
CHECK_JSONSCHEMA = REPO / ".venv" / "bin" / "check-jsonschema"


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema against the GitHub workflow schema it vendors (offline)."""
    return subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def ci_init(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "regression.yml"
    done = cli_in_process("ci", "init", "--out", str(out), *args)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def board_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ci_init(tmp_path_factory.mktemp("ci"), "--board", "orin-01", "--labels", "self-hosted,linux,arm64,orin-01")


def test_committed_workflow_is_what_ci_init_writes(tmp_path: Path) -> None:
    assert ci_init(tmp_path).read_text() == WORKFLOW.read_text(), \
        "the committed workflow differs from `harness ci init`: run it and commit the result"


@pytest.mark.parametrize("which", ["committed", "board"])
def test_workflow_passes_the_github_schema(which: str, board_workflow: Path) -> None:
    done = schema_check(WORKFLOW if which == "committed" else board_workflow)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("good, bad", [("    runs-on:", "    run-on:"), ("    steps:", "    step:"),
                                       ("  workflow_dispatch:", "  workflow-dispatch:")])
def test_schema_check_catches_a_broken_workflow(tmp_path: Path, good: str, bad: str) -> None:
    text = WORKFLOW.read_text()
    assert good in text
    broken = tmp_path / "broken.yml"
    broken.write_text(text.replace(good, bad, 1))
    done = schema_check(broken)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "Schema validation errors" in said and bad.strip(" :") in said, said


def _steps(workflow: dict) -> list[dict]:
    return workflow["jobs"]["regression"]["steps"]


def _step(workflow: dict, text: str) -> dict:
    (found,) = [step for step in _steps(workflow) if text in step.get("run", "") + step.get("uses", "")]
    return found


def test_no_pull_request_trigger_and_one_job_per_board() -> None:
    workflow = load(WORKFLOW)
    assert set(workflow["on"]) == {"push", "schedule", "workflow_dispatch"}
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert "fork" in WORKFLOW.read_text(), "the comment saying why pull requests never run here is gone"
    job = workflow["jobs"]["regression"]
    assert job["runs-on"].startswith("${{ fromJSON(vars.HARNESS_RUNNER_LABELS")
    assert job["concurrency"] == {"group": "board-${{ vars.BOARD || '' }}", "cancel-in-progress": False}
    assert job["env"]["BOARD"] == "${{ vars.BOARD || '' }}"
    assert job["if"] == "${{ (vars.BOARD || '') != '' }}"
    assert workflow["permissions"] == {"contents": "read"}


def test_steps_run_the_experiment_gate_it_and_keep_both_reports() -> None:
    workflow = load(WORKFLOW)
    env = workflow["jobs"]["regression"]["env"]
    assert [s.get("uses", s.get("run")) for s in _steps(workflow)[:2]] == ["actions/checkout@v4", "make setup"]
    assert (REPO / env["EXPERIMENT"]).is_file()
    run = _step(workflow, "harness run")
    assert '--target "$BOARD" --results "$RESULTS"' in run["run"] and "GITHUB_OUTPUT" in run["run"]
    gate = _step(workflow, "harness gate")
    assert gate["if"] == "${{ always() && steps.run.outputs.set != '' }}"
    assert gate["env"]["SET"] == "${{ steps.run.outputs.set }}"
    assert "--metric decode_tps" in gate["run"] and "--junit gate.xml" in gate["run"]
    uploads = [s for s in _steps(workflow) if s.get("uses", "").startswith("actions/upload-artifact@")
               and s["with"]["path"] != "dashboard"]  # the history's site: test_the_nightly_job_publishes_...
    assert sorted(s["with"]["path"] for s in uploads) == sorted([env["RESULTS"], "gate.xml"])
    assert all(s["if"] == "always()" for s in uploads)
    assert "GITHUB_STEP_SUMMARY" in _step(workflow, "GITHUB_STEP_SUMMARY")["run"]


def test_the_commands_the_workflow_runs_take_its_options() -> None:
    """The workflow names options of `harness run` and `harness gate`: renaming one must fail here, not on a board."""
    workflow = load(WORKFLOW)
    for command, step in (("run", "harness run"), ("gate", "harness gate")):
        text = _step(workflow, step)["run"]
        used = {word for word in text.split() if word.startswith("--")}
        help_text = subprocess.run([sys.executable, "-m", "harness", command, "--help"], cwd=REPO, text=True,
                                   capture_output=True, env=without_columns(os.environ), check=True).stdout
        assert used and all(option in help_text for option in used), (command, used)


def test_ci_init_for_a_board_defaults_to_it(board_workflow: Path) -> None:
    job = load(board_workflow)["jobs"]["regression"]
    labels = '["self-hosted","linux","arm64","orin-01"]'
    assert job["runs-on"] == f"${{{{ fromJSON(vars.HARNESS_RUNNER_LABELS || '{labels}') }}}}"
    assert job["concurrency"]["group"] == "board-${{ vars.BOARD || 'orin-01' }}"
    assert job["env"]["BOARD"] == "${{ vars.BOARD || 'orin-01' }}"
    assert job["env"]["BASELINE_VARIANT"] == "${{ vars.BASELINE_VARIANT || 'read_ahead_kb=8192 threads=1' }}"


def test_ci_init_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "regression.yml"
    out.write_text("name: mine\n")
    for args, said in ((["--out", str(out)], "exists and differs; --force replaces it"),
                       (["--out", str(tmp_path / "x.yml"), "--experiment", "experiments/mine.yaml"], "no such file"),
                       (["--out", str(tmp_path / "x.yml"), "--experiment", "experiments/storage-baseline.yaml"],
                        "no matrix")):
        done = cli_in_process("ci", "init", *args)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            done.stderr
    assert out.read_text() == "name: mine\n"
    assert cli_in_process("ci", "init", "--out", str(out), "--force").returncode == 0
    assert out.read_text() == WORKFLOW.read_text()


def test_the_nightly_job_lists_the_change_points_its_set_confirms(board_workflow: Path) -> None:
    """With HARNESS_HISTORY set, the job copies its set into the board's history and asks for the new steps there."""
    steps = {step.get("name"): step for step in load(board_workflow)["jobs"]["regression"]["steps"]}
    step = steps["change points"]
    assert "env.HARNESS_HISTORY != ''" in step["if"]
    assert 'results changes decode_tps --target "$BOARD" --results "$HARNESS_HISTORY" --new' in step["run"]


def test_the_nightly_job_publishes_the_history_as_a_site_and_uploads_it(board_workflow: Path) -> None:
    """With HARNESS_HISTORY set, the board's history becomes the dashboard artifact (opened from disk, no server)."""
    steps = {step.get("name"): step for step in load(board_workflow)["jobs"]["regression"]["steps"]}
    names = list(steps)
    assert names.index("change points") < names.index("dashboard") < names.index("upload the dashboard")
    assert steps["dashboard"]["run"] == '.venv/bin/harness results publish dashboard --results "$HARNESS_HISTORY"'
    upload = steps["upload the dashboard"]
    assert upload["with"]["path"] == "dashboard" and "env.HARNESS_HISTORY != ''" in upload["if"]
    help_text = subprocess.run([sys.executable, "-m", "harness", "results", "publish", "--help"], cwd=REPO, text=True,
                               capture_output=True, env=without_columns(os.environ), check=True).stdout
    assert "--results" in help_text
