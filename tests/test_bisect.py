"""``harness bisect`` on a real engine: a local git repository of 8 revisions of tinystream (engines/tinystream/,
made here in tmp_path), one of which adds a sleep per token. Quick: the revisions listed, bad input in one line.
Slow: the bisect campaigns build each midpoint and measure it against good and bad in one session; the culprit is
named in one line with the gate's ratio, interval and p after at most 3 midpoint builds, every step's set is
kept; good == bad stops with its line."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from harness.campaign.bisect import revisions
from tests.helpers import REPO, cli_in_process, private_base, private_targets_dir

SOURCE = REPO / "engines" / "tinystream" / "tinystream.c"
SLOW_AT = 5  # the revision (1..7) that adds the sleep
SLEEP = "        usleep(4000);  /* the regression under test: 4 ms more per token */\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def engine_repository(where: Path, slow_at: int | None = SLOW_AT) -> list[str]:
    """8 revisions of tinystream (r0 .. r7, oldest first); r``slow_at`` and every later one sleep per token."""
    where.mkdir(parents=True)
    _git(where, "init", "-q", "-b", "main")
    _git(where, "config", "user.email", "test@example.invalid")
    _git(where, "config", "user.name", "test")
    text = SOURCE.read_text()
    anchor = "        double t0 = now_ms();\n"
    assert anchor in text
    commits = []
    for index in range(8):
        body = text.replace("#define MAX_DIMS 4\n", f"#define MAX_DIMS 4\n#define REVISION {index}\n")
        if slow_at is not None and index >= slow_at:
            body = body.replace(anchor, anchor + SLEEP)
        (where / "tinystream.c").write_text(body)
        _git(where, "add", "tinystream.c")
        _git(where, "commit", "-q", "-m", f"r{index}" + (": sleep per token" if index == slow_at else ""))
        commits.append(_git(where, "rev-parse", "HEAD"))
    return commits


def experiment(tmp_path: Path, repo: Path, commit: str, rounds: int = 6) -> Path:
    """tinystream (the shipped engines/tinystream.yaml) on a small synthetic model, its build from ``repo``;
    ``rounds`` interleaved rounds per build."""
    path = tmp_path / "bisect.yaml"
    path.write_text(json.dumps({
        "name": "bisect-tinystream", "validity": "off", "cache": "none", "rounds": rounds,
        "model": {"synth": {"layers": 2, "experts": 8, "used": 2, "quant": "q4_0"}},
        "builds": {"engine": {"engine": "tinystream", "source": {"git": str(repo), "commit": commit}}},
        "steps": [{"run": {"engine": "tinystream", "n_predict": 6}}]}))
    return path


def test_revisions_are_listed_oldest_first_and_bad_input_is_one_line(tmp_path: Path) -> None:
    commits = engine_repository(tmp_path / "engine")
    assert revisions(tmp_path / "engine", commits[0], commits[7]) == commits
    assert revisions(tmp_path / "engine", commits[2][:10], "main~1") == commits[2:7]
    exp = experiment(tmp_path, tmp_path / "engine", commits[0])
    for args, words in (
            (["--good", commits[7], "--bad", commits[0]], "is not an ancestor of --bad"),
            (["--good", "nosuchrev", "--bad", commits[7]], "git rev-parse --verify --end-of-options nosuchrev"),
            (["--good", commits[0], "--bad", commits[7], "--build", "other"], "has no such build (builds: engine)"),
            (["--good", commits[0], "--bad", commits[7], "--metric", "nosuch"], "--metric nosuch: unknown metric")):
        done = cli_in_process("bisect", str(exp), *args, "--results", str(tmp_path / "results"))
        assert done.returncode == 2, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()  # refused before any campaign


def test_each_step_is_one_campaign_of_good_bad_and_mid_interleaved_at_their_commits(tmp_path: Path) -> None:
    from harness.campaign.bisect import build_to_bisect, step_experiment
    from harness.campaign.plan import build_plan
    from harness.campaign.resolve import load_resolved

    commits = engine_repository(tmp_path / "engine")
    loaded = load_resolved(experiment(tmp_path, tmp_path / "engine", commits[0], rounds=2))
    name, spec = build_to_bisect(loaded, None)
    assert name == "engine" and spec.engine == "tinystream"
    step = step_experiment(loaded, spec, str(tmp_path / "engine"),
                           {"good": commits[0], "bad": commits[7], "mid": commits[3]})
    assert step.build_sources == {side: {"git": str(tmp_path / "engine"), "commit": commits[index]}
                                  for side, index in (("good", 0), ("bad", 7), ("mid", 3))}
    runs = build_plan(step).runs
    assert [(run.round, run.params["build"]) for run in runs] == [
        (1, "good"), (1, "bad"), (1, "mid"), (2, "good"), (2, "bad"), (2, "mid")]
    assert [run.cell.build for run in runs[:3]] == ["good", "bad", "mid"]
    # two adjacent revisions: no midpoint, good and bad only
    ends = step_experiment(loaded, spec, str(tmp_path / "engine"), {"good": commits[6], "bad": commits[7]})
    assert [run.params["build"] for run in build_plan(ends).runs] == ["good", "bad", "good", "bad"]


def _source_trees_for_declared_builds() -> bool:
    """Whether builds give a declared engine's build its source tree ({source_dir}: part A of issue 23)."""
    return "source_dir" in (REPO / "runner" / "steps" / "declared.py").read_text()


needs_source_trees = pytest.mark.skipif(not _source_trees_for_declared_builds(),
                                        reason="builds do not give a declared engine its source tree yet")


def _bisect(tmp_path: Path, exp: Path, good: str, bad: str) -> subprocess.CompletedProcess[str]:
    from tests.helpers import run_cli

    return run_cli("bisect", str(exp), "--good", good, "--bad", bad, "--results", str(tmp_path / "results"),
                   "--targets-dir", str(private_targets_dir()), timeout=1800)


@pytest.mark.slow
@needs_source_trees
def test_bisect_names_the_revision_that_slowed_the_engine(tmp_path: Path) -> None:
    repo = private_base() / f"engine-{tmp_path.name}"
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    commits = engine_repository(repo)
    exp = experiment(tmp_path, repo, commits[0])
    done = _bisect(tmp_path, exp, commits[0], commits[7])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    (answer,) = [line for line in lines if line.startswith("first bad revision: ")]
    short = commits[SLOW_AT][:7]
    assert re.fullmatch(rf"first bad revision: {short}\w* \(r{SLOW_AT}: sleep per token\) "
                        rf"\(after \w+ \(r{SLOW_AT - 1}\)\): decode_tps "
                        r"vs good x0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] \(95 % CI\), p = [\d.e-]+; "
                        r"[123] midpoint build\(s\) for 7 candidates", answer), answer
    (sets_line,) = [line for line in lines if line.startswith("sets: ")]
    sets = [Path(p) for p in sets_line.removeprefix("sets: ").split(", ")]
    assert 1 <= len(sets) <= 3 and all((path / "manifest.json").is_file() for path in sets)
    manifest = json.loads((sets[0] / "manifest.json").read_text())
    assert manifest["matrix"]["build"] == ["good", "bad", "mid"]
    subprocess.run(["rm", "-rf", str(repo)], check=True)


@pytest.mark.slow
@needs_source_trees
def test_good_equal_to_bad_stops_with_one_line(tmp_path: Path) -> None:
    repo = private_base() / f"engine-{tmp_path.name}"
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    commits = engine_repository(repo, slow_at=None)
    exp = experiment(tmp_path, repo, commits[0])
    done = _bisect(tmp_path, exp, commits[0], commits[0])
    assert done.returncode == 1, done.stdout + done.stderr
    (answer,) = [line for line in done.stdout.splitlines() if "do not differ" in line]
    assert answer.startswith(f"good {commits[0][:7]}") and answer.endswith("nothing to bisect")
    subprocess.run(["rm", "-rf", str(repo)], check=True)
