"""Named builds in an experiment (``builds:`` + the ``build`` matrix axis): each cell's step runs its cell's build,
``over:`` without ``build`` runs the baseline build, labels and the runs table carry ``build`` like any axis, and
every mistake is one line at its place (exit 2)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.results.cell import CellKey
from tests.helpers import REPO, cli_in_process, run_campaign

TWO_BUILDS = """\
name: two-builds
model: /models/m.gguf
builds:
  base: {engine: llama.cpp}
  strategies: {engine: llama.cpp, patches: [p.patch]}
matrix:
  build: [base, strategies]
  threads: [1, 2]
rounds: 2
steps:
  - llama-bench: {args: [-t, "{threads}"]}
  - fio: {file: model, jobs: [{name: seq, rw: read, bs: 1M}]}
    over: [threads]
"""


def plan_of(tmp_path: Path, text: str):  # noqa: ANN201
    path = tmp_path / "e.yaml"
    path.write_text(text)
    return build_plan(load_resolved(path))


def one_line_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "e.yaml"
    path.write_text(text)
    done = cli_in_process("plan", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0].replace(str(path), "FILE")


def test_each_cell_runs_its_build_interleaved_in_every_round(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, TWO_BUILDS)
    bench = [r for r in plan.runs if r.step == "llama-bench"]
    assert [(r.params["build"], r.params["threads"]) for r in bench[:4]] == [
        ("base", 1), ("base", 2), ("strategies", 1), ("strategies", 2)]
    assert all(r.cell.build == r.params["build"] for r in bench)
    rounds = [[r.params["build"] for r in bench if r.round == n] for n in (1, 2)]
    assert rounds[0] == rounds[1] == ["base", "base", "strategies", "strategies"]  # A B in every round
    assert "-strategies-" in bench[2].run_id


def test_a_step_without_build_in_over_runs_the_baseline_build(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, TWO_BUILDS.replace("    over: [threads]\n", "").replace(
        "  - llama-bench: {args: [-t, \"{threads}\"]}", "  - llama-bench: {args: [-t, \"{threads}\"]}\n"
                                                       "    over: [threads]"))
    bench = [r for r in plan.runs if r.step == "llama-bench"]
    assert {r.cell.build for r in bench} == {"base"} and {r.params["build"] for r in bench} == {"base"}
    # baseline: picks another baseline build
    plan = plan_of(tmp_path, TWO_BUILDS.replace("rounds: 2", "rounds: 1\nbaseline: {build: strategies}").replace(
        "  - llama-bench: {args: [-t, \"{threads}\"]}", "  - llama-bench: {args: [-t, \"{threads}\"]}\n"
                                                       "    over: [threads]"))
    assert {r.cell.build for r in plan.runs if r.step == "llama-bench"} == {"strategies"}


def test_an_engine_less_step_has_no_build_but_keeps_the_axis(tmp_path: Path) -> None:
    fio = [r for r in plan_of(tmp_path, TWO_BUILDS).runs if r.step == "fio"]
    assert {r.cell.build for r in fio} == {None}
    assert {r.params["build"] for r in fio} == {"base"}  # over: [threads]: at the baseline's value, as any axis
    fio = [r for r in plan_of(tmp_path, TWO_BUILDS.replace("over: [threads]", "over: [build]")).runs
           if r.step == "fio"]
    assert {r.cell.build for r in fio} == {None} and {r.params["build"] for r in fio} == {"base", "strategies"}


def test_one_build_needs_no_axis_and_an_experiment_without_builds_has_none(tmp_path: Path) -> None:
    one = TWO_BUILDS.replace("  strategies: {engine: llama.cpp, patches: [p.patch]}\n", "").replace(
        "  build: [base, strategies]\n", "")
    plan = plan_of(tmp_path, one)
    assert {r.cell.build for r in plan.runs if r.step == "llama-bench"} == {"base"}
    assert all("build" not in r.params for r in plan.runs)
    none = one.replace("builds:\n  base: {engine: llama.cpp}\n", "")
    assert {r.cell.build for r in plan_of(tmp_path, none).runs} == {None}


def test_build_is_an_axis_of_the_cell_key_and_its_label() -> None:
    key = CellKey.of({"build": "strategies", "threads": 1, "cache": "cold"}, ["build", "threads"])
    assert key.build == "strategies"
    assert key.label() == "build=strategies threads=1 cold"
    assert CellKey.of({"threads": 1}, ["threads"]).build == ""
    assert CellKey.parse("build=base threads=1").build == "base"


@pytest.mark.parametrize(("change", "expected"), [
    (("  build: [base, strategies]", "  build: [base, head]"),
     "error: FILE:7: matrix.build[1]: build 'head' is not in builds: (have: base, strategies)"),
    (("  build: [base, strategies]\n", ""),
     "error: FILE:3: builds: 2 builds but no 'build' matrix axis to choose between them (add it to matrix:, with "
     "values among base, strategies)"),
    (("strategies: {engine: llama.cpp,", "strategies: {engine: llama-cpp,"),
     "error: FILE:5: builds.strategies.engine: build strategies: unknown engine 'llama-cpp' (known: bigmoeonedge, "
     "llama.cpp; a declared engine is one of engines/*.yaml or this file's engines:)"),
    (("  strategies: {engine: llama.cpp, patches: [p.patch]}", "  strategies: {engine: bigmoeonedge}"),
     "error: FILE:11: steps[0].llama-bench: step llama-bench runs llama.cpp, but its cell's build 'strategies' is a "
     "bigmoeonedge build: give the step over: without build, or a build of its engine"),
    (("  strategies:", "  'strat/../x':"),
     "error: FILE:5: builds.strat/../x: build name 'strat/../x' is not a plain name (letters, digits, '_', '-', "
     "'.'): it is a matrix value, a label word and a cache directory"),
    (("  strategies: {engine: llama.cpp, patches: [p.patch]}", "  strategies: {engine: inferssd}"),
     "error: FILE:5: builds.strategies.engine: build strategies: declared engine inferssd has no build: block "
     "(its binary is prebuilt), so there is nothing to build"),
])
def test_a_mistake_in_builds_is_one_line_at_its_place(tmp_path: Path, change: tuple[str, str],
                                                      expected: str) -> None:
    old, new = change
    assert old in TWO_BUILDS
    assert one_line_error(tmp_path, TWO_BUILDS.replace(old, new)) == expected


def test_an_equivalence_side_names_a_build_of_its_engine(tmp_path: Path) -> None:
    text = TWO_BUILDS.replace("  - fio:", "  - equivalence: {a: {build: base}, b: {build: SIDE}, prompts: [hi]}\n"
                                         "    over: []\n  - fio:")
    plan = plan_of(tmp_path, text.replace("SIDE", "strategies"))
    equivalence = [r for r in plan.runs if r.step == "equivalence"]
    assert len(equivalence) == 2 and equivalence[0].cell.config.b.build == "strategies"
    from harness.steps import STEPS

    assert STEPS["equivalence"].builds_named(equivalence[0].cell.config) == {"base", "strategies"}
    assert one_line_error(tmp_path, text.replace("SIDE", "head")) == (
        "error: FILE:12: steps[1].equivalence.b.build: side b: build 'head' is not in builds: "
        "(have: base, strategies)")


def test_build_source_values_are_parsed_to_a_source(tmp_path: Path) -> None:
    from harness.config.buildsource import parse_build_source

    sha = "0123456789abcdef0123456789abcdef01234567"
    assert parse_build_source(f"head=git:https://example.org/llama.cpp@{sha}") == (
        "head", {"git": "https://example.org/llama.cpp", "commit": sha})
    # an scp-style URL holds '@' itself: the commit follows the last one; a local repository becomes absolute
    assert parse_build_source("head=git:git@example.org:x/y.git@ABCDEF1") == (
        "head", {"git": "git@example.org:x/y.git", "commit": "abcdef1"})
    (tmp_path / "repo").mkdir()
    assert parse_build_source(f"head=path:{tmp_path}/repo/../repo") == ("head", {"path": str(tmp_path / "repo")})


def test_build_source_replaces_only_the_named_builds_source(tmp_path: Path) -> None:
    from harness.config.buildsource import with_build_sources

    path = tmp_path / "e.yaml"
    path.write_text(TWO_BUILDS)
    loaded = with_build_sources(load_resolved(path), [f"strategies=path:{tmp_path}"])
    strategies = loaded.experiment.builds["strategies"]
    assert strategies.source == {"path": str(tmp_path)} and strategies.patches == ["p.patch"]
    assert loaded.experiment.builds["base"].source is None
    assert loaded.build_sources == {"strategies": {"path": str(tmp_path)}}


@pytest.mark.parametrize(("value", "expected"), [
    ("strategies", "expected NAME=git:URL@SHA or NAME=path:DIR"),
    ("strategies=svn:x", "the source must start with git: or path:"),
    ("strategies=git:https://example.org/x@main", "a git source needs a commit as URL@SHA"),
    ("strategies=path:/no/such/dir", "/no/such/dir is not a directory"),
    ("head=path:.", "has no build 'head' (builds: base, strategies)"),
])
def test_a_bad_build_source_is_one_line_exit_2(tmp_path: Path, value: str, expected: str) -> None:
    from tests.helpers import run_cli

    path = tmp_path / "e.yaml"
    path.write_text(TWO_BUILDS)
    done = run_cli("run", str(path), "--build-source", value, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --build-source {value!r}: "), done.stderr
    assert expected in lines[0]


# ------------------------------------------------------------------------------------------ campaigns (slow)

TINY = REPO / "tests" / "data" / "engines" / "tiny"  # a few lines of C, built with cc (SOURCE.md)
TINY_ENGINE = {
    "build": {"commands": [["cc", "-O2", "-o", "{build_dir}/tiny", "{source_dir}/engine.c"]]},
    "binary": "{build_dir}/tiny",
    "run": ["{binary}", "{model}", "{n_predict}"],
    "extract": [
        {"table": "requests", "source": "stderr",
         "regex": r"eval time = +(?P<ms>[\d.]+) ms / +(?P<n>\d+) runs .* (?P<tps>[\d.]+) tokens per second",
         "columns": {"predicted_ms": "ms", "predicted_n": "n", "decode_tps": "tps"}},
        {"table": "requests", "source": "stdout", "regex": r"tiny (?P<variant>\w+): (?P<bytes>\d+) bytes",
         "columns": {"variant": "variant", "read_bytes": "bytes"}}],
}


def tiny_experiment(builds: dict[str, object], rounds: int = 1) -> str:
    return json.dumps({
        "name": "tiny-builds", "cache": "none", "validity": "off", "rounds": rounds,
        "files": {"model": {"create": "1M"}}, "engines": {"tiny": TINY_ENGINE}, "builds": builds,
        "matrix": {"build": list(builds), "tokens": [4, 8]},
        "steps": [{"run": {"engine": "tiny", "model": "model", "n_predict": "{tokens}"}}]})


def campaign(tmp_path: Path, text: str, *args: str) -> Any:  # noqa: ANN401 - a ResultSet
    from harness.results.loader import load_result_set

    exp = tmp_path / "e.yaml"
    exp.write_text(text)
    results = tmp_path / f"results-{len(list(tmp_path.glob('results-*')))}"
    done = run_campaign(str(exp), "--results", str(results), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return load_result_set(next(results.iterdir()))


def builds_of(rs: Any) -> dict[str, Any]:  # noqa: ANN401
    manifest = json.loads((rs.path / "manifest.json").read_text())
    return manifest["targets"][0]["builds"]


def variants_by_build(rs: Any) -> dict[str, set[str]]:  # noqa: ANN401
    runs = rs.table("runs")[["run_id", "build"]]
    joined = rs.table("requests").merge(runs, on="run_id")
    return {build: set(group["variant"]) for build, group in joined.groupby("build")}


def own_copy(tmp_path: Path) -> Path:
    """The tiny engine's tree at a path of this test's own: its builds are keyed by it, so they are new here."""
    tree = tmp_path / "tiny"
    tree.mkdir()
    shutil.copy(TINY / "engine.c", tree / "engine.c")
    return tree


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.slow
def test_two_builds_interleaved_recorded_cached_and_a_changed_patch_is_a_new_build(tmp_path: Path) -> None:
    tree = own_copy(tmp_path)
    builds = {"base": {"engine": "tiny", "source": {"path": str(tree)}},
              "patched": {"engine": "tiny", "source": {"path": str(tree)}, "patches": [str(TINY / "variant.patch")]}}
    rs = campaign(tmp_path, tiny_experiment(builds, rounds=2))
    runs = rs.table("runs").sort_values("index")
    assert list(runs["build"]) == ["base", "base", "patched", "patched"] * 2  # interleaved, round after round
    assert list(runs["variant"])[:3] == ["run build=base tokens=4 none", "run build=base tokens=8 none",
                                         "run build=patched tokens=4 none"]
    assert variants_by_build(rs) == {"base": {"base"}, "patched": {"patched"}}  # each cell ran its own binary
    first = builds_of(rs)
    assert set(first) == {"base", "patched"}
    base, patched = first["base"], first["patched"]
    assert base["engine"] == "tiny" and base["source"]["kind"] == "path" and base["source"]["path"] == str(tree)
    assert base["patches"] == [] and not base["cached"] and not patched["cached"]
    assert patched["patches"] == [{"path": str(TINY / "variant.patch"),
                                   "sha256": hashlib.sha256((TINY / "variant.patch").read_bytes()).hexdigest()}]
    assert base["key"] != patched["key"]
    assert base["binaries"]["tiny"]["sha256"] != patched["binaries"]["tiny"]["sha256"]
    for build in (base, patched):
        binary = Path(build["binaries"]["tiny"]["path"])
        assert hashlib.sha256(binary.read_bytes()).hexdigest() == build["binaries"]["tiny"]["sha256"]
    query = cli_in_process("results", "query", "select build, count(*) as n from runs group by build order by build",
                           "--results", str(rs.path.parent), "--format", "csv")
    assert query.returncode == 0 and query.stdout.split() == ["build,n", "base,4", "patched,4"], query.stdout

    # the same inputs again: both builds come from the cache, unchanged
    again = builds_of(campaign(tmp_path, tiny_experiment(builds)))
    assert again["base"]["cached"] and again["patched"]["cached"]
    assert {k: v["key"] for k, v in again.items()} == {k: v["key"] for k, v in first.items()}
    assert again["patched"]["binaries"] == patched["binaries"]

    # another patch (a real `git diff` of the tree): a new build of its own key; the base build still cached
    repo = tmp_path / "repo"
    shutil.copytree(tree, repo)
    git(repo, "init", "-q")
    git(repo, "add", "engine.c")
    git(repo, "commit", "-qm", "base")
    text = (repo / "engine.c").read_text()
    (repo / "engine.c").write_text(text.replace('#define VARIANT "base"', '#define VARIANT "other"'))
    (tmp_path / "other.patch").write_text(git(repo, "diff") + "\n")
    builds["patched"]["patches"] = [str(tmp_path / "other.patch")]
    rs = campaign(tmp_path, tiny_experiment(builds))
    changed = builds_of(rs)
    assert changed["base"]["cached"] and changed["base"]["key"] == base["key"]
    assert not changed["patched"]["cached"] and changed["patched"]["key"] not in (base["key"], patched["key"])
    assert variants_by_build(rs) == {"base": {"base"}, "patched": {"other"}}


@pytest.mark.slow
def test_build_source_builds_another_commit_and_the_manifest_says_which(tmp_path: Path) -> None:
    repo = own_copy(tmp_path)
    git(repo, "init", "-q")
    git(repo, "add", "engine.c")
    git(repo, "commit", "-qm", "base")
    good = git(repo, "rev-parse", "HEAD")
    subprocess.run(["git", "-C", str(repo), "apply", str(TINY / "variant.patch")], check=True)
    git(repo, "commit", "-qam", "patched")
    bad = git(repo, "rev-parse", "HEAD")
    builds = {"good": {"engine": "tiny", "source": {"git": str(repo), "commit": good}},
              "head": {"engine": "tiny", "source": {"git": str(repo), "commit": good}}}
    rs = campaign(tmp_path, tiny_experiment(builds), "--build-source", f"head=git:{repo}@{bad[:10]}")
    recorded = builds_of(rs)
    assert recorded["good"]["source"] == {"kind": "git", "url": str(repo), "commit": good}
    assert recorded["head"]["source"] == {"kind": "git", "url": str(repo), "commit": bad}  # the full commit built
    assert recorded["head"]["commit"] == bad
    assert variants_by_build(rs) == {"good": {"base"}, "head": {"patched"}}
