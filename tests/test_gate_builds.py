"""The change gate on two real builds, as the CI job runs it (tests/test_ci_change.py checks the workflow's text).

A lab repository (made here) holds tinystream (engines/tinystream/, a small real streaming engine in C) under
engine/ and a patch series under patches/. The workflow `harness ci init --gate change` writes is followed step by
step: its "engine sources" script makes each side's tree from its own revision with its own series applied, one
campaign builds both trees (``--build-source``) and interleaves their runs, and ``harness gate --across build``
decides: a patch that sleeps 4 ms per token fails it (exit 1, naming the build), a patch that changes a comment
passes (exit 0, "no build regressed"). The engine is built by the harness on this machine: slow."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, cli_in_process, private_base, private_targets_dir, run_campaign, run_cli

SOURCE = REPO / "engines" / "tinystream" / "tinystream.c"
ANCHOR = "        double t0 = now_ms();\n"
SLEEP = "        usleep(4000);  /* the regression under test: 4 ms more per token */\n"
ROUNDS = 6  # per build: one stalled run still leaves p < 0.01 (6 + 6 values: p at best 0.002)


def experiment_text(engine: Path, rounds: int = ROUNDS) -> str:
    """tinystream on a small synthetic model, a baseline and a candidate build of ``engine`` (the job replaces
    both sources), ``rounds`` interleaved rounds."""
    source = {"path": str(engine)}
    return yaml.safe_dump({
        "name": "engine-change", "validity": "off", "cache": "none", "rounds": rounds,
        "model": {"synth": {"layers": 2, "experts": 8, "used": 2, "quant": "q4_0"}},
        "builds": {"baseline": {"engine": "tinystream", "source": source},
                   "candidate": {"engine": "tinystream", "source": source}},
        "matrix": {"build": ["baseline", "candidate"]},
        "steps": [{"run": {"engine": "tinystream", "n_predict": 6}}]}, sort_keys=False)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "lab", "GIT_AUTHOR_EMAIL": "lab@example.invalid",
           "GIT_COMMITTER_NAME": "lab", "GIT_COMMITTER_EMAIL": "lab@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def patch_of(repo: Path, edit: str, replacement: str) -> str:
    """A real patch (git diff, paths relative to engine/) that replaces ``edit`` in engine/tinystream.c."""
    engine = repo / "engine" / "tinystream.c"
    text = engine.read_text()
    assert edit in text
    engine.write_text(text.replace(edit, replacement, 1))
    patch = git(repo, "diff", "--relative=engine", "--", "engine/tinystream.c") + "\n"
    engine.write_text(text)
    return patch


def lab_repository(where: Path) -> list[str]:
    """Three revisions: the engine and its experiment; a patch that sleeps per token; a patch that edits a
    comment. The revisions' ids, oldest first."""
    (where / "engine").mkdir(parents=True)
    (where / "patches").mkdir()
    (where / "ci").mkdir()
    (where / "engine" / "tinystream.c").write_text(SOURCE.read_text())
    (where / "ci" / "engine-change.yaml").write_text(experiment_text(where / "engine"))
    (where / "patches" / "README").write_text("the lab's patch series, applied in name order\n")
    git(where, "init", "-q", "-b", "main")
    git(where, "add", ".")
    git(where, "commit", "-q", "-m", "tinystream and its experiment")
    series = [("0001-sleep-per-token.patch", patch_of(where, ANCHOR, ANCHOR + SLEEP)),
              ("0002-comment.patch", patch_of(where, "/* tinystream: a small real streaming engine",
                                              "/* tinystream (patched): a small real streaming engine"))]
    commits = [git(where, "rev-parse", "HEAD")]
    for name, text in series:
        (where / "patches" / name).write_text(text)
        git(where, "add", ".")
        git(where, "commit", "-q", "-m", name)
        commits.append(git(where, "rev-parse", "HEAD"))
    return commits


def job_step(workflow: Path, name: str) -> str:
    steps = yaml.safe_load(workflow.read_text())["jobs"]["engine-change"]["steps"]
    (found,) = [step for step in steps if step.get("name") == name]
    return str(found["run"])


def engine_sources(lab: Path, workflow: Path, trees: Path, head: str, before: str) -> dict[str, str]:
    """The workflow's "engine sources" step at ``head`` (the pushed revision), the push's ``before`` given."""
    git(lab, "checkout", "-q", "--detach", head)
    output = trees.parent / f"output-{head[:8]}"
    job = yaml.safe_load(workflow.read_text())["jobs"]["engine-change"]["env"]
    env = {**os.environ, **{k: str(v) for k, v in job.items() if "${{" not in str(v)}, "TREES": str(trees),
           "GITHUB_OUTPUT": str(output), "BASELINE_REV": "", "PUSHED_BEFORE": before}
    done = subprocess.run(["bash", "-e", "-c", job_step(workflow, "engine sources")], cwd=lab, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def gate_the_push(work: Path, lab: Path, workflow: Path, head: str, before: str, *confirm: str
                  ) -> tuple[int, dict, dict[str, str]]:
    """Sources, one campaign of both builds, the gate (``confirm``: its --confirm options, as the job gives
    them): its exit code, JSON report and the two trees built."""
    sides = engine_sources(lab, workflow, work / "trees", head, before)
    results = work / f"results-{head[:8]}"
    done = run_campaign(str(lab / "ci" / "engine-change.yaml"), "--results", str(results),
                        "--build-source", f"candidate={sides['candidate']}",
                        "--build-source", f"baseline={sides['baseline']}",
                        "--scratch", str(private_base() / "gate-builds-scratch"))
    assert done.returncode == 0, done.stdout + done.stderr
    [one] = list(results.iterdir())
    manifest = json.loads((one / "manifest.json").read_text())
    trees = {name: sides[name][len("path:"):] for name in ("baseline", "candidate")}
    assert manifest["build_sources"] == {name: {"path": tree} for name, tree in trees.items()}
    built = {name: build["source"] for name, build in manifest["targets"][0]["builds"].items()}
    assert {name: source["path"] for name, source in built.items()} == trees, built
    assert built["baseline"]["tree_sha256"] != built["candidate"]["tree_sha256"]  # two trees, two builds
    args = ["gate", "--results", str(results), one.name, "--across", "build", "--baseline-value", "baseline",
            "--metric", "decode_tps", "--max-regression", "5%", "--format", "json", *confirm]
    gate = run_cli(*args) if confirm else cli_in_process(*args)  # a confirmation is a campaign: its own process
    return gate.returncode, json.loads(gate.stdout) if gate.stdout.strip() else {"stderr": gate.stderr}, trees


@pytest.mark.slow
def test_a_patch_that_sleeps_per_token_fails_the_change_gate_and_a_comment_passes(tmp_path: Path) -> None:
    work = tmp_path
    lab = work / "lab"
    first, slow, comment = lab_repository(lab)
    done = cli_in_process("ci", "init", "--gate", "change", "--experiment", "ci/engine-change.yaml",
                          "--engine-dir", "engine", "--patches", "patches", cwd=lab)
    assert done.returncode == 0, done.stderr
    workflow = lab / ".github" / "workflows" / "engine-change.yml"
    code, report, trees = gate_the_push(work, lab, workflow, slow, first, "--confirm", "2", "--targets-dir",
                                        str(private_targets_dir()))
    assert code == 1, report
    [cell] = report["cells"]
    assert (cell["variant"], cell["baseline"], cell["verdict"]) == \
        ("run build=candidate none", "run build=baseline none", "regression")
    assert cell["ratio"] < 0.95 and cell["high"] < 0.95 and cell["p"] < 0.01, cell
    assert (cell["n_baseline"], cell["n_candidate"]) == (ROUNDS + 2, ROUNDS + 2)  # the suspect confirmed: 2 more
    assert report["summary"] == ["build candidate regressed decode_tps in 1 of 1 cells"]
    # the confirmation built and ran the trees the set measured (the job's two revisions), not the file's source
    confirmation = json.loads((Path(report["confirmation"]) / "manifest.json").read_text())
    assert confirmation["build_sources"] == {name: {"path": tree} for name, tree in trees.items()}
    rebuilt = confirmation["targets"][0]["builds"]
    assert {name: build["source"]["path"] for name, build in rebuilt.items()} == trees
    assert all(build["cached"] for build in rebuilt.values())  # the same two builds, from the cache
    code, report, _ = gate_the_push(work, lab, workflow, comment, slow)
    assert code == 0, report
    assert [c["verdict"] for c in report["cells"]] == ["pass"] and report["summary"] == ["no build regressed"]
