"""``harness gate --across AXIS`` and ``harness compare --across AXIS``: each cell against the cell equal in
everything but one matrix axis, at the axis's baseline value (``build``: the candidate build against the baseline
build of the same session, per cell). The report says which value of the axis regressed.

The sets are written here (manifest, runs and requests tables) with a known, injected change per cell, as in
tests/test_gate.py: decode tok/s with board-like noise and a fixed seed. Nothing here needs a build: ``build`` is
an ordinary matrix axis, so a set whose runs carry ``build`` values is all the gate reads."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from junitparser import Failure, JUnitXml

from harness.results import SCHEMA_VERSION
from harness.results.cell import CellKey
from harness.results.variants import variant_label
from tests.helpers import cli_in_process, private_base, private_targets_dir, run_campaign, run_cli
from tests.test_gate import CONFIRM_EXPERIMENT

ROUNDS, PER_RUN = 5, 4  # 20 requests per cell
MATRIX = {"build": ["base", "willneed", "pread"], "threads": [1, 2]}
SET_ID = "20261202-000000-builds-aaaaaa"
Change = Callable[[dict[str, object]], float]  # a cell's matrix values -> its decode tok/s factor


def write_set(results: Path, change: Change, *, matrix: dict[str, list[object]] | None = None,
              seed: int = 1) -> Path:
    """A complete set of one llama-server step over ``matrix`` (cells interleaved per round), decode tok/s of a
    cell at 30 x (1 + 0.5 per extra thread) x ``change(cell)``, 4 % lognormal noise and a stalled request now and
    then; device bytes per token unchanged."""
    matrix = matrix or MATRIX
    rng = np.random.default_rng(seed)
    path = results / SET_ID
    (path / "tables").mkdir(parents=True)
    experiment = f"name: builds\nmatrix: {json.dumps(matrix)}\nsteps: [llama-server: {{}}]\n"
    (path / "experiment.yaml").write_text(experiment)
    keys = list(matrix)
    runs, rows = [], []
    for rnd in range(1, ROUNDS + 1):
        for values in itertools.product(*matrix.values()):
            params = dict(zip(keys, values, strict=True))
            run_id = f"{len(runs) + 1:04d}-llama-server-{'-'.join(map(str, values))}-cold-r{rnd}"
            runs.append({"run_id": run_id, "index": len(runs) + 1, "target": "local", "step": "llama-server",
                         "step_label": "llama-server", "cache": "cold", "round": rnd, "repeat": 1, "params": params,
                         "status": "ok", "error": None})
            level = 30.0 * (1 + 0.5 * (int(str(params.get("threads", 1))) - 1)) * change(params)
            tps = level * rng.lognormal(0.0, 0.04, PER_RUN)
            tps[rng.random(PER_RUN) < 0.05] *= 0.6
            rows += [{"run_id": run_id, "target": "local", "decode_tps": v,
                      "decode_dev_read_bytes_per_token": 11e6 * rng.normal(1, 0.001)} for v in tps]
    table = pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"}, **r["params"],
                           "variant": variant_label({**r["params"], "cache": r["cache"]}, keys)} for r in runs])
    table.to_parquet(path / "tables" / "runs.parquet")
    pd.DataFrame(rows).to_parquet(path / "tables" / "requests.parquet")
    manifest = {"schema_version": SCHEMA_VERSION, "set_id": SET_ID, "status": "complete",
                "experiment": {"name": "builds", "path": str(path / "experiment.yaml"),
                               "sha256": hashlib.sha256(experiment.encode()).hexdigest()},
                "targets": [{"name": "local"}], "files": {}, "runs": runs, "matrix": matrix, "baseline": None,
                "scratch": None}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def pread_slower(cell: dict[str, object]) -> float:
    """The injected regression: build pread decodes 10 % slower at every thread count; willneed unchanged."""
    return 0.90 if cell["build"] == "pread" else 1.0


def gate(results: Path, *args: str, env: dict[str, str] | None = None):  # noqa: ANN201 - CompletedProcess
    return cli_in_process("gate", "--results", str(results), SET_ID, "--metric", "decode_tps", *args, env=env)


def test_across_build_pairs_each_cell_with_the_baseline_build_at_the_same_threads(tmp_path: Path) -> None:
    """Threads change decode speed 1.5x, so only a pair that holds threads fixed sees the build's own change:
    each candidate cell meets build=base of its own thread count, pread's two cells regress, willneed's pass,
    and the report names the build that regressed."""
    write_set(tmp_path, pread_slower)
    done = gate(tmp_path, "--across", "build", "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    cells = {c["variant"]: c for c in report["cells"]}
    assert {v: (c["baseline"], c["verdict"]) for v, c in cells.items()} == {
        f"build={b} threads={t} cold": (f"build=base threads={t} cold", "pass" if b == "willneed" else "regression")
        for b in ("willneed", "pread") for t in (1, 2)}
    for t in (1, 2):
        slow = cells[f"build=pread threads={t} cold"]
        assert slow["ratio"] == pytest.approx(0.9, abs=0.04) and slow["low"] < slow["ratio"] < slow["high"] < 0.95
        assert (slow["n_baseline"], slow["n_candidate"], slow["axis"], slow["axis_value"]) == (20, 20, "build", "pread")
    assert report["baseline"] == "build=base" and report["across"] == {"axis": "build", "baseline_value": "base"}
    assert report["summary"] == ["build pread regressed decode_tps in 2 of 2 cells"]
    assert report["regressed"] == [
        {"axis": "build", "value": v, "metric": "decode_tps", "regressions": n, "cells": 2}
        for v, n in (("willneed", 0), ("pread", 2))]
    table = gate(tmp_path, "--across", "build")
    assert table.returncode == 1 and "build pread regressed decode_tps in 2 of 2 cells" in table.stdout
    assert "gate FAILED: 2 regression, 2 pass" in table.stdout


def test_a_build_that_changes_nothing_passes_and_says_no_build_regressed(tmp_path: Path) -> None:
    write_set(tmp_path, lambda cell: 1.0)
    done = gate(tmp_path, "--across", "build", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [c["verdict"] for c in report["cells"]] == ["pass"] * 4 and report["summary"] == ["no build regressed"]
    assert "no build regressed" in gate(tmp_path, "--across", "build").stdout


def test_the_baseline_value_names_the_build_the_others_are_measured_against(tmp_path: Path) -> None:
    """--baseline-value pread: base and willneed (10 % faster than pread) are improvements against it."""
    write_set(tmp_path, pread_slower)
    done = gate(tmp_path, "--across", "build", "--baseline-value", "pread", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert {(c["variant"], c["baseline"], c["verdict"]) for c in report["cells"]} == {
        (f"build={b} threads={t} cold", f"build=pread threads={t} cold", "improvement")
        for b in ("base", "willneed") for t in (1, 2)}
    assert report["summary"] == ["no build regressed"] and report["baseline"] == "build=pread"


def test_across_any_axis_holds_the_others_fixed(tmp_path: Path) -> None:
    """--across threads: each cell against threads=1 of its own build (2 threads: 1.5x, an improvement), never
    against another build's."""
    write_set(tmp_path, pread_slower)
    done = gate(tmp_path, "--across", "threads", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    cells = json.loads(done.stdout)["cells"]
    assert [(c["variant"], c["baseline"], c["verdict"]) for c in cells] == [
        (f"build={b} threads=2 cold", f"build={b} threads=1 cold", "improvement") for b in MATRIX["build"]]
    assert all(c["ratio"] == pytest.approx(1.5, abs=0.08) for c in cells)


def test_the_job_summary_and_junit_say_which_build_regressed(tmp_path: Path) -> None:
    write_set(tmp_path / "results", pread_slower)
    summary, junit = tmp_path / "summary.md", tmp_path / "gate.xml"
    done = gate(tmp_path / "results", "--across", "build", "--junit", str(junit),
                env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 1, done.stderr
    text = summary.read_text()
    assert "### harness gate: 20261202-000000-builds-aaaaaa vs build=base" in text
    assert "**build pread regressed decode_tps in 2 of 2 cells**" in text
    rows = [line for line in text.splitlines() if line.startswith("| local")]
    assert len(rows) == 4 and all(" | build=base threads=" in row for row in rows)
    assert sum("| regression |" in row and "build=pread" in row for row in rows) == 2
    cases = {case.name: case for suite in JUnitXml.fromfile(str(junit)) for case in suite}
    failed = sorted(name for name, case in cases.items() if any(isinstance(r, Failure) for r in case.result))
    assert failed == [f"decode_tps: build=pread threads={t} cold vs build=base threads={t} cold" for t in (1, 2)]


def test_compare_across_pairs_as_the_gate_does(tmp_path: Path) -> None:
    write_set(tmp_path, pread_slower)
    done = cli_in_process("compare", "--results", str(tmp_path), SET_ID, "--across", "build", "--metric",
                          "decode_tps", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["baseline"] == "build=base" and report["mode"] == "same-session"
    assert {(c["variant"], c["baseline"]) for c in report["cells"]} == {
        (f"build={b} threads={t} cold", f"build=base threads={t} cold") for b in ("willneed", "pread") for t in (1, 2)}
    slow = [c for c in report["cells"] if c["axis_value"] == "pread"]
    assert len(slow) == 2 and all(c["ratio"] == pytest.approx(0.9, abs=0.04) for c in slow)


@pytest.mark.parametrize(("command", "args", "said"), [
    ("gate", ["--across", "bild"], "--across bild: not a matrix axis of"),
    ("gate", ["--across", "build", "--baseline-value", "strategies"],
     "--baseline-value strategies: not a value of build in"),
    ("gate", ["--baseline-value", "base", "--baseline-variant", "build=base"], "only with --across AXIS"),
    ("gate", ["--across", "build", "--baseline-variant", "build=base"], "give --baseline-variant NAME or --across"),
    ("compare", ["--across", "bild"], "--across bild: not a matrix axis of"),
    ("compare", ["--across", "build", "--baseline-variant", "build=base"], "give a second set B, or"),
    ("compare", ["--baseline-value", "base", "--baseline-variant", "build=base"], "only with --across AXIS"),
])
def test_bad_across_input_exits_2_with_one_line(tmp_path: Path, command: str, args: list[str], said: str) -> None:
    write_set(tmp_path, pread_slower)
    done = cli_in_process(command, "--results", str(tmp_path), SET_ID, "--metric", "decode_tps", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_axis_of_one_value_is_refused(tmp_path: Path) -> None:
    write_set(tmp_path, lambda cell: 1.0, matrix={"build": ["base"], "threads": [1, 2]})
    done = gate(tmp_path, "--across", "build")
    assert done.returncode == 2 and "has one value of it (base), nothing to compare" in done.stderr, done.stderr


def test_the_across_rule_changes_only_the_axis() -> None:
    """The rule alone: target, engine label, cache condition and the other axes stay; a cell that does not vary
    over the axis (a step whose over: leaves it out) has no baseline on it."""
    from harness.results.pairing import across

    rule = across("build", "base")

    def cell(build: str | None, threads: str = "1", target: str = "b1", engine: str = "", cache: str = "cold"
             ) -> CellKey:
        matrix = ((("build", build),) if build else ()) + (("threads", threads),)
        return CellKey(target, engine, matrix, cache)

    cells = [cell("base"), cell("base", "2"), cell("base", cache="warm"), cell("base", engine="bmoe"),
             cell("base", target="b2"), cell("pread"), cell(None)]
    assert rule(cell("pread"), cells) == cell("base")
    assert rule(cell("pread", "2"), cells) == cell("base", "2")
    assert rule(cell("pread", cache="warm"), cells) == cell("base", cache="warm")
    assert rule(cell("pread", engine="bmoe"), cells) == cell("base", engine="bmoe")
    assert rule(cell("pread", target="b2"), cells) == cell("base", target="b2")
    assert rule(cell("pread", "4"), cells) is None  # no base at 4 threads measured
    assert rule(cell(None), cells) is None
    assert rule(cell("base"), cells) == cell("base")  # its own baseline: pair_cells leaves it out


@pytest.mark.slow
def test_confirm_reruns_the_suspects_of_an_across_gate(tmp_path: Path) -> None:
    """fio on this machine, direct random reads of 64 KiB (the axis's first value, the baseline) and of 4 KiB
    (several times fewer MB/s: a real drop). Two rounds cannot reach p < 0.01, so --across bs only suspects the
    4k cell; --confirm 3 re-runs it and its baseline cell 3 more interleaved rounds as a new set, and the gate
    decides on all 5 + 5 runs: a regression, named by the axis value."""
    exp = tmp_path / "gateconfirm.yaml"  # the gate's own confirmation experiment
    exp.write_text(CONFIRM_EXPERIMENT)
    results = tmp_path / "results"
    done = run_campaign(str(exp), "--results", str(results), "--scratch", str(private_base() / "across-scratch"))
    assert done.returncode == 0, done.stderr
    [original] = list(results.iterdir())
    args = ["gate", "--results", str(results), "gateconfirm", "--across", "bs", "--metric", "fio_read_mbps",
            "--format", "json"]
    before = cli_in_process(*args)
    assert before.returncode == 0, before.stderr
    [first] = json.loads(before.stdout)["cells"]
    assert (first["variant"], first["baseline"]) == ("bs=4k cold", "bs=64k cold")
    assert first["verdict"] == "insufficient" and first["suspected"], first
    done = run_cli(*args, "--confirm", "3", "--targets-dir", str(private_targets_dir()))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    confirmation = Path(report["confirmation"])
    assert confirmation.parent == results and confirmation != original
    runs = json.loads((confirmation / "manifest.json").read_text())["runs"]
    assert [(r["params"], r["round"]) for r in runs] == [({"bs": bs}, rnd) for rnd in (1, 2, 3) for bs in ("64k", "4k")]
    [cell] = report["cells"]
    assert (cell["n_baseline"], cell["n_candidate"], cell["verdict"]) == (5, 5, "regression"), cell
    assert report["summary"] == ["bs 4k regressed fio_read_mbps in 1 of 1 cells"]


def test_a_set_whose_every_run_is_perturbed_is_gated_only_with_include_perturbed(tmp_path: Path) -> None:
    """On a shared machine every run of a set may be marked perturbed (another process had the CPU): the gate then
    has nothing to decide on and says so, naming the option; --include-perturbed decides on them and says it did."""
    path = write_set(tmp_path, pread_slower)
    runs = pd.read_parquet(path / "tables" / "runs.parquet")
    runs["perturbed"] = True
    runs["perturbed_reason"] = "foreign_cpu_pct 41.0 > 10"
    runs.to_parquet(path / "tables" / "runs.parquet")
    refused = gate(tmp_path, "--across", "build")
    assert refused.returncode == 2
    assert "has no value of it in a run with status ok that was not perturbed (--include-perturbed counts " \
           "perturbed runs)" in refused.stderr
    done = gate(tmp_path, "--across", "build", "--include-perturbed", "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"] == ["build pread regressed decode_tps in 2 of 2 cells"]
    assert any(f"{len(runs)} perturbed runs are counted (--include-perturbed)" in note for note in report["notes"])


def test_the_experiments_baseline_value_of_the_axis_is_the_default_as_in_f4(tmp_path: Path) -> None:
    """An experiment whose ``baseline:`` names a build compares with that build, in the gate as in F4
    (harness.figures.streaming.build_baseline), unless --baseline-value names another."""
    path = write_set(tmp_path, pread_slower)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["baseline"] = {"build": "willneed", "threads": 1}
    (path / "manifest.json").write_text(json.dumps(manifest))
    report = json.loads(gate(tmp_path, "--across", "build", "--format", "json").stdout)
    assert report["across"] == {"axis": "build", "baseline_value": "willneed"}
    assert {c["baseline"] for c in report["cells"]} == {f"build=willneed threads={t} cold" for t in (1, 2)}
    chosen = json.loads(gate(tmp_path, "--across", "build", "--baseline-value", "base", "--format", "json").stdout)
    assert chosen["across"]["baseline_value"] == "base"
