"""``harness gate`` and ``harness compare`` as a CI job runs them: exit codes (0 pass, 1 regression, 2 bad input,
3 infrastructure failure), the JUnit file, the step summary, and --confirm re-running suspected cells on the board.

The fast tests write small result sets themselves (manifest, runs and requests tables; decode tok/s drawn with
board-like noise and a fixed seed) with a known, injected change; the slow one runs fio on this machine."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from harness.results import SCHEMA_VERSION
from harness.results.variants import variant_label
from tests.helpers import cli_in_process, private_base, private_targets_dir, run_campaign, run_cli

EXPERIMENT = """\
name: gatetest
files: {data: {create: 16M}}
matrix: {arm: [a, b]}
cache: cold
rounds: 3
steps:
  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 1}
"""
ROUNDS, PER_RUN = 5, 4  # 20 requests per cell


def tok_s(rng: np.random.Generator, n: int, level: float = 30.0) -> np.ndarray:
    """decode tok/s as a board shows it: 4 % lognormal noise, and a stalled request now and then."""
    values = level * rng.lognormal(0.0, 0.04, n)
    stalls = rng.random(n) < 0.05
    values[stalls] *= 0.6
    return values


def write_set(results: Path, set_id: str, cells: dict[str, dict[str, np.ndarray]], *, step: str = "llama-server",
              status: str = "complete", broken: dict[str, str] | None = None, target: str = "local") -> Path:
    """A result set of the experiment above: per ``arm``, ROUNDS interleaved runs of PER_RUN rows each, with the
    given columns' values (requests for llama-server, fio rows otherwise). ``broken``: run id -> its error
    (the run's status is then failed)."""
    path = results / (set_id + ("" if status == "complete" else ".incomplete"))
    (path / "tables").mkdir(parents=True)
    (path / "experiment.yaml").write_text(EXPERIMENT)
    runs, rows = [], []
    for rnd in range(1, ROUNDS + 1):
        for arm, columns in cells.items():
            run_id = f"{len(runs) + 1:04d}-{step}-{arm}-cold-r{rnd}"
            error = (broken or {}).get(run_id)
            runs.append({"run_id": run_id, "index": len(runs) + 1, "target": target, "step": step,
                         "step_label": step, "cache": "cold", "round": rnd, "repeat": 1, "params": {"arm": arm},
                         "status": "failed" if error else "ok", "error": error})
            per_run = PER_RUN if step == "llama-server" else 1
            for i in range(per_run):
                k = (rnd - 1) * per_run + i
                row = {"run_id": run_id, "target": target, **{c: v[k] for c, v in columns.items()}}
                rows.append(row if step == "llama-server" else {**row, "job_name": "randread-64k-qd1"})
    table = pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"}, "arm": r["params"]["arm"],
                           "variant": variant_label({**r["params"], "cache": r["cache"]}, ["arm"])} for r in runs])
    table.to_parquet(path / "tables" / "runs.parquet")
    pd.DataFrame(rows).to_parquet(path / "tables" / ("requests.parquet" if step == "llama-server" else "fio.parquet"))
    manifest = {"schema_version": SCHEMA_VERSION, "set_id": set_id, "status": status,
                "experiment": {"name": "gatetest", "path": str(path / "experiment.yaml"),
                               "sha256": hashlib.sha256(EXPERIMENT.encode()).hexdigest()},
                "targets": [{"name": target}], "files": {}, "runs": runs, "matrix": {"arm": list(cells)},
                "baseline": {"arm": "a"}, "scratch": None}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def decode_cells(seed: int, change: float, bytes_change: float = 1.0) -> dict[str, dict[str, np.ndarray]]:
    """arm a (baseline) and arm b, b's decode tok/s scaled by ``change`` and its device bytes per token by
    ``bytes_change``: the injected changes the gate must find (or, at 1.0, must not)."""
    rng = np.random.default_rng(seed)
    n = ROUNDS * PER_RUN
    bytes_a, bytes_b = 11e6 * rng.normal(1, 0.001, n), 11e6 * bytes_change * rng.normal(1, 0.001, n)
    return {"a": {"decode_tps": tok_s(rng, n), "decode_dev_read_bytes_per_token": bytes_a},
            "b": {"decode_tps": change * tok_s(rng, n), "decode_dev_read_bytes_per_token": bytes_b}}


def gate(results: Path, *args: str, env: dict[str, str] | None = None):  # noqa: ANN201 - CompletedProcess
    # a confirmation runs a campaign: a process of its own; the rest run in this process (quick)
    run = run_cli if "--confirm" in args else cli_in_process
    return run("gate", "--results", str(results), *args, env=env)


def test_an_injected_10_percent_decode_regression_fails_the_gate(tmp_path: Path) -> None:
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=0.90))
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps",
                "--max-regression", "5%", "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    [cell] = report["cells"]
    assert (cell["variant"], cell["baseline"], cell["verdict"]) == ("arm=b cold", "arm=a cold", "regression")
    assert cell["ratio"] == pytest.approx(0.9, abs=0.04) and cell["high"] < 0.95 and cell["p"] < 0.01
    assert (cell["n_baseline"], cell["n_candidate"]) == (20, 20) and report["exit_code"] == 1
    table = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps")
    assert table.returncode == 1 and "regression" in table.stdout and "gate FAILED: 1 regression" in table.stdout


def test_the_same_samples_without_the_change_pass(tmp_path: Path) -> None:
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=1.0))
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["verdict"] for c in json.loads(done.stdout)["cells"]] == ["pass"]


def test_junit_file_and_step_summary(tmp_path: Path) -> None:
    """One test case per cell and metric; the regression is a failure whose message has ratio, CI and p; a cell
    with too few values is skipped, not passed; the markdown summary is appended to $GITHUB_STEP_SUMMARY."""
    results = tmp_path / "results"
    results.mkdir()
    write_set(results, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=0.90, bytes_change=1.0))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    junit = tmp_path / "out" / "gate.xml"
    done = gate(results, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps",
                "--metric", "bytes_per_token", "--junit", str(junit), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 1, done.stderr
    suites = list(JUnitXml.fromfile(str(junit)))
    cases = {case.name: case for suite in suites for case in suite}
    assert set(cases) == {"decode_tps: arm=b cold vs arm=a cold", "bytes_per_token: arm=b cold vs arm=a cold"}
    [failure] = cases["decode_tps: arm=b cold vs arm=a cold"].result
    assert isinstance(failure, Failure)
    assert "ratio 0.9" in failure.message and "95% CI" in failure.message and "p = " in failure.message
    assert cases["bytes_per_token: arm=b cold vs arm=a cold"].is_passed
    assert suites[0].tests == 2 and suites[0].failures == 1
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "harness gate" in text and "| regression |" in text


def test_too_few_values_are_a_skipped_case(tmp_path: Path) -> None:
    path = write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=2, change=0.5))
    requests = pd.read_parquet(path / "tables" / "requests.parquet")
    first_of_two_rounds = requests["run_id"].str.endswith(("-r1", "-r2")) & requests.groupby("run_id").cumcount().eq(0)
    requests[first_of_two_rounds].to_parquet(path / "tables" / "requests.parquet")  # 2 values per cell left
    junit = tmp_path / "gate.xml"
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps", "--junit", str(junit))
    assert done.returncode == 0 and "insufficient" in done.stdout
    [case] = [case for suite in JUnitXml.fromfile(str(junit)) for case in suite]
    assert isinstance(case.result[0], Skipped) and "cannot reach p < 0.01" in case.result[0].message


def test_count_metrics_take_the_tighter_default_threshold(tmp_path: Path) -> None:
    """3 % more device bytes per token (decode speed unchanged): a regression at the 1 % count default, a pass
    when the metric is given its own 5 %."""
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=3, change=1.0, bytes_change=1.03))
    tight = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "bytes_per_token",
                 "--metric", "decode_tps", "--format", "json")
    assert tight.returncode == 1, tight.stderr
    verdicts = {c["metric"]: (c["verdict"], c["threshold"]) for c in json.loads(tight.stdout)["cells"]}
    assert verdicts == {"bytes_per_token": ("regression", 0.01), "decode_tps": ("pass", 0.05)}
    loose = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "bytes_per_token:5%")
    assert loose.returncode == 0, loose.stdout


def test_a_cross_session_baseline_is_said_to_be_weaker(tmp_path: Path) -> None:
    old = decode_cells(seed=4, change=1.0)
    new = decode_cells(seed=5, change=1.0)
    new["b"]["decode_tps"] = new["b"]["decode_tps"] * 0.85  # injected: arm b 15 % slower than last week
    write_set(tmp_path, "20261124-000000-gatetest-111111", old)
    write_set(tmp_path, "20261201-000000-gatetest-222222", new)
    done = gate(tmp_path, "20261201-000000-gatetest-222222", "--baseline", "20261124-000000-gatetest-111111",
                "--metric", "decode_tps", "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "cross-session" and any("weaker evidence" in n for n in report["notes"])
    assert {c["variant"]: c["verdict"] for c in report["cells"]} == {"arm=a cold": "pass", "arm=b cold": "regression"}
    assert all(c["baseline"] == "20261124-000000-gatetest-111111" for c in report["cells"])
    table = gate(tmp_path, "20261201-000000-gatetest-222222", "--baseline", "20261124-000000-gatetest-111111",
                 "--metric", "decode_tps")
    assert "cross-session baseline: weaker evidence" in table.stdout.replace("\n", " ")


@pytest.mark.parametrize(("args", "said"), [
    (["--baseline-variant", "arm=a", "--metric", "decode_tpz"], "--metric decode_tpz: unknown metric"),
    (["--baseline-variant", "arm=a", "--metric", "fio_read_mbps"], "metric fio_read_mbps:"),
    (["--baseline-variant", "arm=z", "--metric", "decode_tps"], "variant 'arm=z': not in"),
    (["--baseline-variant", "arm=a", "--metric", "decode_tps:lots"], "is not a percentage"),
    (["--metric", "decode_tps"], "give --baseline-variant NAME"),
    (["--baseline-variant", "arm=a", "--baseline", "x", "--metric", "decode_tps"], "give --baseline-variant NAME"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=0.5))
    done = gate(tmp_path, "gatetest", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_no_overlapping_cell_exits_2(tmp_path: Path) -> None:
    write_set(tmp_path, "20261124-000000-gatetest-111111", decode_cells(seed=1, change=1.0), target="orin-01")
    write_set(tmp_path, "20261201-000000-gatetest-222222", decode_cells(seed=2, change=1.0), target="orin-02")
    done = gate(tmp_path, "20261201-000000-gatetest-222222", "--baseline", "20261124-000000-gatetest-111111",
                "--metric", "decode_tps")
    assert done.returncode == 2 and "no cell of" in done.stderr and "overlaps" in done.stderr, done.stderr
    only_one = {"a": decode_cells(seed=1, change=1.0)["a"]}
    write_set(tmp_path / "one", "20261201-000000-gatetest-333333", only_one)
    done = gate(tmp_path / "one", "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps")
    assert done.returncode == 2 and "no cell of" in done.stderr, done.stderr


def test_an_incomplete_set_is_an_infrastructure_failure(tmp_path: Path) -> None:
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=0.5), status="incomplete")
    junit = tmp_path / "gate.xml"
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps", "--junit", str(junit))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "incomplete" in done.stderr and "harness run --resume" in done.stderr
    [case] = [case for suite in JUnitXml.fromfile(str(junit)) for case in suite]
    assert isinstance(case.result[0], Error) and "infrastructure" in case.result[0].message


def test_a_failed_run_of_a_gated_cell_is_an_infrastructure_failure_not_a_regression(tmp_path: Path) -> None:
    """Arm b is much slower (a regression) but one of its runs failed: the gate cannot trust the cell; exit 3
    with the run and its error, never 1 and never 0."""
    error = "llama-server exited with code 139 (SIGSEGV) before /health"
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=0.5),
              broken={"0004-llama-server-b-cold-r2": error})
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "0004-llama-server-b-cold-r2" in done.stderr and "SIGSEGV" in done.stderr
    # a metric the failed step never produced is absent, but with runs failing that is infrastructure too
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "fio_read_mbps")
    assert done.returncode == 3 and "runs are not ok" in done.stderr, done.stderr


@pytest.mark.slow  # --confirm starts a confirmation campaign (it fails connecting to the board)
def test_an_unreachable_board_during_confirm_is_an_infrastructure_failure(tmp_path: Path) -> None:
    """A suspected fio regression (injected: arm b's bandwidth halved), --confirm 2, and the board the set ran on
    does not answer (ssh to a closed port): exit 3, naming the board."""
    rng = np.random.default_rng(6)
    cells = {"a": {"read_bw_bytes_per_s": 4e8 * rng.lognormal(0, 0.03, ROUNDS)},
             "b": {"read_bw_bytes_per_s": 2e8 * rng.lognormal(0, 0.03, ROUNDS)}}
    results = tmp_path / "results"
    write_set(results, "20261201-000000-gatetest-aaaaaa", cells, step="fio", target="board")
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "board.yaml").write_text("platform: linux\ntransport: {ssh: {host: 127.0.0.1, port: 9, "
                                        "connect_timeout_s: 2, reconnect_s: 0}}\nworkdir: /var/tmp/none\n")
    done = gate(results, "gatetest", "--baseline-variant", "arm=a", "--metric", "fio_read_mbps", "--confirm", "2",
                "--targets-dir", str(targets), "--lease-wait", "0")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "confirmation of 20261201-000000-gatetest-aaaaaa on board" in done.stderr


def test_confirm_runs_nothing_when_nothing_is_suspected(tmp_path: Path) -> None:
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=1.0))
    done = gate(tmp_path, "gatetest", "--baseline-variant", "arm=a", "--metric", "decode_tps", "--confirm", "3",
                "--targets-dir", str(tmp_path / "no-targets-here"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["20261201-000000-gatetest-aaaaaa"]


def test_compare_two_sets_and_two_variants(tmp_path: Path) -> None:
    write_set(tmp_path, "20261124-000000-gatetest-111111", decode_cells(seed=4, change=1.0))
    write_set(tmp_path, "20261201-000000-gatetest-222222", decode_cells(seed=5, change=0.8))
    done = cli_in_process("compare", "--results", str(tmp_path), "20261124-000000-gatetest-111111",
                   "20261201-000000-gatetest-222222", "--format", "json")
    assert done.returncode == 0, done.stderr
    cells = {(c["metric"], c["variant"]): c for c in json.loads(done.stdout)["cells"]}
    assert set(cells) == {(m, v) for m in ("decode_tps", "bytes_per_token") for v in ("arm=a cold", "arm=b cold")}
    slower = cells[("decode_tps", "arm=b cold")]
    assert slower["ratio"] == pytest.approx(0.8, abs=0.05) and slower["low"] < slower["ratio"] < slower["high"]
    assert slower["p"] < 0.01 and (slower["n_baseline"], slower["n_candidate"]) == (20, 20)
    variants = cli_in_process("compare", "--results", str(tmp_path), "20261201-000000-gatetest-222222",
                       "--baseline-variant", "arm=a", "--metric", "decode_tps", "--format", "md")
    assert variants.returncode == 0, variants.stderr
    [row] = [line for line in variants.stdout.splitlines() if line.startswith("| local")]
    assert "arm=b cold | arm=a cold | 20/20" in row
    table = cli_in_process("compare", "--results", str(tmp_path), "20261124-000000-gatetest-111111",
                    "20261201-000000-gatetest-222222", "--metric", "decode_tps")
    assert table.returncode == 0 and "decode_tps (tok/s, higher is better)" in table.stdout


CONFIRM_EXPERIMENT = """\
name: gateconfirm
files: {data: {create: 32M}}
matrix: {bs: [64k, 4k]}
cache: cold
rounds: 2
validity: off   # the gate is under test, not the machine's quiet: a perturbed run would leave the cell short
steps:
  - fio: {file: data, jobs: [{name: rr, bs: "{bs}"}], runtime_s: 1}
"""


@pytest.mark.slow
def test_confirm_reruns_the_suspected_cells_on_the_board(tmp_path: Path) -> None:
    """fio on this machine, direct random reads of 64 KiB (the baseline) and of 4 KiB: the 4 KiB cell moves several
    times fewer MB/s, a real and large drop (no injected change: the confirmation's rounds are real measurements,
    an injected one would not carry over). Two rounds cannot reach p < 0.01, so the cell is suspected, not flagged;
    --confirm 3 re-runs exactly the two cells 3 more interleaved rounds on the same target as a new set beside the
    original, which says it confirms it, and the gate decides on all 5 + 5 runs: a regression, exit 1."""
    exp = tmp_path / "gateconfirm.yaml"
    exp.write_text(CONFIRM_EXPERIMENT)
    results = tmp_path / "results"
    done = run_campaign(str(exp), "--results", str(results), "--scratch", str(private_base() / "gate-scratch"))
    assert done.returncode == 0, done.stderr
    [original] = list(results.iterdir())
    args = ["gateconfirm", "--baseline-variant", "bs=64k", "--metric", "fio_read_mbps", "--format", "json"]
    before = gate(results, *args)
    assert before.returncode == 0, before.stderr
    [first] = json.loads(before.stdout)["cells"]
    assert first["verdict"] == "insufficient" and first["suspected"] and first["ratio"] < 0.5, first
    done = gate(results, *args, "--confirm", "3", "--targets-dir", str(private_targets_dir()))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    confirmation = Path(report["confirmation"])
    assert confirmation.parent == results and confirmation != original
    manifest = json.loads((confirmation / "manifest.json").read_text())
    assert manifest["confirms"] == {"set_id": original.name, "rounds": 3} and manifest["status"] == "complete"
    runs = manifest["runs"]
    assert [(r["params"], r["round"]) for r in runs] == [({"bs": bs}, rnd) for rnd in (1, 2, 3)
                                                          for bs in ("64k", "4k")]  # interleaved
    assert all(r["status"] == "ok" and r["target"] == "local" for r in runs)
    [cell] = report["cells"]
    assert (cell["n_baseline"], cell["n_candidate"]) == (5, 5) and cell["verdict"] == "regression", cell


LONG_ARM = "a-variant-name-longer-than-a-terminal-would-leave-room-for"


def test_tables_keep_their_natural_width_where_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    """A CI log: stdout a pipe, no COLUMNS. Rich took 80 columns there and cut the cells ("arm=a-vari…") and
    wrapped the verdicts one word per line; every row must come out whole, on one line."""
    cells = decode_cells(seed=1, change=0.90)
    write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", {"a": cells["a"], LONG_ARM: cells["b"]})
    done = run_cli("gate", "--results", str(tmp_path), "gatetest", "--baseline-variant", "arm=a",
                   "--metric", "decode_tps", "--max-regression", "5%")
    assert done.returncode == 1, done.stderr
    [row] = [line for line in done.stdout.splitlines() if f"arm={LONG_ARM} cold" in line]
    assert "20/20" in row and "regression" in row and "ratio and interval past 0.95" in row, done.stdout
    assert "…" not in done.stdout and len(row) > 80
