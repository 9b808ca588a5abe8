"""``harness estimate MODEL --target T``: the ladder read from a real result set's fio table (the cut quickstart set
in tests/data/harness), the measured decode of the same model beside the estimate when the set's file record
matches, JSON output, and bad input as one line, exit 2."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.campaign.files import describe_model_file
from harness.models.synth import synth_moe
from tests.helpers import REPO, cli_in_process, one_line_exit_2, private_targets_dir, run_cli, synced_synth_moe

QUICKSTART = REPO / "tests" / "data" / "harness" / "quickstart-4950e0"
STRATEGIES = ["mmap", "mmap-willneed", "pread", "io_uring", "direct-cache", "prefetch"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("estimate") / "tiny.gguf"
    synth_moe(path, layers=2, experts=8, used=2, hidden=64, ff=256, vocab=512, seed=0)
    return path


@pytest.fixture
def matching_set(model: Path, tmp_path: Path) -> Path:
    """A copy of the quickstart set whose manifest says its runs read ``model`` (as if it had been measured)."""
    copy = tmp_path / QUICKSTART.name
    shutil.copytree(QUICKSTART, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["local"]["model"] = {"path": str(model), "size_bytes": model.stat().st_size, "created": False,
                                           **describe_model_file(model)}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def estimate_json(*args: str) -> dict:
    done = cli_in_process("estimate", *args, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_ladder_comes_from_the_sets_fio_table(model: Path) -> None:
    out = estimate_json(str(model), "--target", "local", "--set", str(QUICKSTART))
    fio = pd.read_parquet(QUICKSTART / "tables" / "fio.parquet")
    rungs = {p["label"]: p for p in out["ladder"]["points"]}
    assert set(rungs) == set(fio["job_name"])
    qd1 = fio[fio["job_name"] == "randread-64k-qd1"]["read_bw_bytes_per_s"].median() / 1e6
    assert rungs["randread-64k-qd1"]["mb_s"] == pytest.approx(qd1)
    assert (rungs["randread-128k-qd8"]["bs_bytes"], rungs["randread-128k-qd8"]["iodepth"]) == (131072, 8)
    assert [s["strategy"] for s in out["strategies"]] == STRATEGIES
    mmap = out["strategies"][0]
    assert mmap["measured"] == []  # the set measured another model
    pread = out["strategies"][2]
    per_token = out["model_bytes"]["expert_bytes_per_token"]
    assert pread["device_bytes_per_token"]["low"] == per_token  # no hits given: every byte from the device
    assert any("every expert byte comes from the device" in a for a in pread["assumptions"])
    # the tiny model's 32 KiB slices under a 128 KiB readahead window: a fault reads the window
    assert mmap["device_bytes_per_token"]["low"] == pytest.approx(per_token * 4)
    assert any("device bytes x 4.00" in a for a in mmap["assumptions"])


def test_measured_decode_of_the_same_model_sits_beside_the_estimate(model: Path, matching_set: Path) -> None:
    out = estimate_json(str(model), "--target", "local", "--set", str(matching_set), "--readahead", "8M")
    mmap = out["strategies"][0]
    cold = [m for m in mmap["measured"] if m["cache"] == "cold"]
    assert {m["variant"] for m in cold} == {"read_ahead_kb=8192 threads=1 cold", "read_ahead_kb=8192 threads=2 cold"}
    assert all(m["matched_by"] == "the same file (quick hash)" for m in cold)
    requests = pd.read_parquet(matching_set / "tables" / "requests.parquet")
    runs = pd.read_parquet(matching_set / "tables" / "runs.parquet")
    usable = runs[(runs["status"] == "ok") & ~runs["perturbed"].fillna(False).astype(bool)]
    cell = usable[(usable["read_ahead_kb"] == 8192) & (usable["threads"] == 2) & (usable["cache"] == "cold")]
    expected = requests[requests["run_id"].isin(cell["run_id"])]["decode_tps"].median()
    two = next(m for m in cold if m["variant"].endswith("threads=2 cold"))
    assert two["measured_tok_s"] == pytest.approx(expected)
    low, high = mmap["tok_s"]["low"], mmap["tok_s"]["high"]
    assert two["error"] == pytest.approx(low / expected - 1 if expected < low else
                                         high / expected - 1 if expected > high else 0.0)
    assert all(m["read_ahead_kb"] is None or m["read_ahead_kb"] == 8192 for m in mmap["measured"])
    assert all(m["error"] is None for m in mmap["measured"] if m["cache"] == "warm")


def test_a_replay_run_is_compared_with_the_strategy_it_replayed(model: Path, matching_set: Path) -> None:
    tables = matching_set / "tables"
    runs, requests = pd.read_parquet(tables / "runs.parquet"), pd.read_parquet(tables / "requests.parquet")
    replayed = (runs["read_ahead_kb"] == 8192) & (runs["threads"] == 2)  # as if these cells were replay pread runs
    runs.loc[replayed, "step"] = "replay"
    runs.to_parquet(tables / "runs.parquet")
    requests["replay_strategy"] = requests["run_id"].map(lambda r: "pread" if r in set(runs[replayed]["run_id"])
                                                         else None)
    requests.to_parquet(tables / "requests.parquet")
    out = estimate_json(str(model), "--target", "local", "--set", str(matching_set), "--readahead", "8M")
    measured = {s["strategy"]: {m["variant"] for m in s["measured"]} for s in out["strategies"]}
    assert measured["pread"] == {"read_ahead_kb=8192 threads=2 cold", "read_ahead_kb=8192 threads=2 warm"}
    assert measured["mmap"] == {"read_ahead_kb=8192 threads=1 cold", "read_ahead_kb=8192 threads=1 warm"}
    assert measured["io_uring"] == set()


def test_the_table_lists_every_assumption_under_each_strategy(model: Path, matching_set: Path) -> None:
    done = cli_in_process("estimate", str(model), "--target", "local", "--set", str(matching_set),
                          "--routing", "zipf:1.2", "--budget", "2M", "--readahead", "8M")
    assert done.returncode == 0, done.stderr
    for name in STRATEGIES:
        assert f"\n{name}" in done.stdout
    assert done.stdout.count("  - Served from memory:") == len(STRATEGIES)
    assert "synthetic zipf:1.2 trace" in done.stdout
    assert "read_ahead_kb=8192 threads=2 cold" in done.stdout and "warm measured cells left out" in done.stdout


def test_a_given_ladder_and_hit_share(model: Path) -> None:
    out = estimate_json(str(model), "--target", "local", "--ladder", "64k:1=100,64k:4=400", "--hits", "0.5",
                        "--threads", "16")
    pread = next(s for s in out["strategies"] if s["strategy"] == "pread")
    assert out["hits"]["share"] == {"low": 0.5, "high": 0.5}
    assert pread["clamped"]  # 16 reads of a 32 KiB slice in flight: past the top rung's 256 KiB
    assert pread["throughput_mb_s"] == {"low": 400, "high": 400}
    assert any(a.startswith("Clamped:") for a in pread["assumptions"])


def test_a_recorded_trace_and_budget_give_the_hit_share(model: Path, tmp_path: Path) -> None:
    from harness.traces.lru import lru_hits
    from harness.traces.model import write_trace
    from harness.traces.synth import synth_trace

    trace = synth_trace(2, 8, 2, 40, s=1.5, seed=3)
    path = tmp_path / "routes.trace"
    write_trace(trace, path)
    out = estimate_json(str(model), "--target", "local", "--ladder", "64k:1=100", "--trace", str(path),
                        "--budget", "384K")
    one_expert = 393216 // (2 * 2)  # the tiny model: 2 layers, 2 of 8 experts used, 384 KiB of experts a token
    sizes = {0: one_expert, 1: one_expert}
    cold = lru_hits(trace, 384 * 1024, sizes).byte_hit_rate
    steady = lru_hits(trace, 384 * 1024, sizes, warmup_tokens=20).byte_hit_rate  # after half the trace
    assert out["hits"]["share"] == pytest.approx({"low": min(cold, steady), "high": max(cold, steady)})
    assert 0 < out["hits"]["share"]["high"] < 1 and "routes.trace" in out["hits"]["source"]
    everything = estimate_json(str(model), "--target", "local", "--ladder", "64k:1=100", "--hits", "1")
    assert everything["strategies"][2]["tok_s"]["high"] is None  # nothing to read: no finite I/O ceiling
    wrong = synth_trace(3, 8, 2, 4)
    write_trace(wrong, path)
    line = one_line_exit_2(cli_in_process("estimate", str(model), "--target", "local", "--ladder", "64k:1=100",
                                          "--trace", str(path), "--budget", "384K"))
    assert "routes.trace" in line


@pytest.mark.parametrize(("args", "says"), [
    (["--set", "/nonexistent/set"], "no result set"),
    (["--target", "no-such-board"], "no target 'no-such-board'"),
    (["--ladder", "64k=200"], "--ladder: rung 1"),
    (["--ladder", "64k:1=200", "--routing", "zipf"], "--budget"),
    (["--ladder", "64k:1=200", "--hits", "1.5"], "--hits"),
    (["--ladder", "64k:1=200", "--routing", "pareto", "--budget", "1M"], "--routing"),
])
def test_bad_input_is_one_line_exit_2(model: Path, args: list[str], says: str) -> None:
    target = [] if "--target" in args else ["--target", "local"]
    line = one_line_exit_2(cli_in_process("estimate", str(model), *target, *args))
    assert says in line


def test_a_set_without_the_targets_ladder_is_one_line(model: Path, tmp_path: Path) -> None:
    line = one_line_exit_2(cli_in_process("estimate", str(model), "--target", "local", "--set", str(QUICKSTART),
                                          "--targets-dir", str(_targets_with(tmp_path, "orin"))))
    assert "no target 'local'" in line
    line = one_line_exit_2(cli_in_process("estimate", str(model), "--target", "orin", "--set", str(QUICKSTART),
                                          "--targets-dir", str(_targets_with(tmp_path, "orin"))))
    assert "no fio read rows of target 'orin'" in line and "local" in line


def _targets_with(tmp_path: Path, name: str) -> Path:
    where = tmp_path / "targets"
    where.mkdir(exist_ok=True)
    (where / f"{name}.yaml").write_text("platform: linux\ntransport: local\n")
    return where


@pytest.mark.slow
def test_without_a_set_the_ladder_is_measured_on_the_model_file_first(tmp_path: Path) -> None:
    targets = str(private_targets_dir())
    with synced_synth_moe("estimate-ladder", size_bytes=48 << 20, experts=8, used=2) as info:
        before = hashlib.sha256(Path(info.path).read_bytes()).hexdigest()
        done = run_cli("estimate", str(info.path), "--target", "local", "--results", str(tmp_path / "results"),
                       "--targets-dir", targets, "--ladder-runtime", "1", "--format", "json")
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout)  # the campaign's progress went to stderr
        [one] = (tmp_path / "results").iterdir()
        # the set it left is the --set of the next estimate: the same ladder, and the model is its file
        again = estimate_json(str(info.path), "--target", "local", "--set", str(one), "--targets-dir", targets)
        assert hashlib.sha256(Path(info.path).read_bytes()).hexdigest() == before  # fio never writes to a model file
    assert one.name in out["ladder"]["source"] and "ladder measured" in done.stderr
    fio = pd.read_parquet(one / "tables" / "fio.parquet")
    assert sorted(p["label"] for p in out["ladder"]["points"]) == sorted(fio["job_name"])
    assert json.loads((one / "manifest.json").read_text())["files"]["local"]["model"]["path"] == str(info.path)
    assert again["ladder"] == out["ladder"]


def test_another_copy_of_the_same_layout_matches_and_another_model_does_not(model: Path, matching_set: Path,
                                                                          tmp_path: Path) -> None:
    reseeded = tmp_path / "reseeded.gguf"  # other weights, the same header: it streams the same bytes
    synth_moe(reseeded, layers=2, experts=8, used=2, hidden=64, ff=256, vocab=512, seed=1)
    out = estimate_json(str(reseeded), "--target", "local", "--set", str(matching_set), "--readahead", "8M")
    assert {m["matched_by"] for m in out["strategies"][0]["measured"]} == {
        "the same layout and size (GGUF header), another copy"}
    other = tmp_path / "other.gguf"
    synth_moe(other, layers=3, experts=8, used=2, hidden=64, ff=256, vocab=512, seed=0)
    out = estimate_json(str(other), "--target", "local", "--set", str(matching_set), "--readahead", "8M")
    assert all(s["measured"] == [] for s in out["strategies"])
