"""BigMoeOnEdge as an engine: its source (archive or git, checked by commit), the bmoe step's flags, its rows, and
one real campaign under a 512 MiB budget built through the harness.

The slow test needs the archive of the pinned commit in $HARNESS_ENGINE_SOURCES (this machine has no network to
GitHub) and skips with one line without it; the quick ones build nothing.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.config.experiment import EngineSpec
from harness.engines.bigmoeonedge.source import (
    PINNED_COMMIT,
    SOURCES_ENV,
    archive_commit,
    archive_name,
    find_archive,
    parse_source,
    unavailable_reason,
)
from harness.engines.bigmoeonedge.tree import engine_source
from harness.engines.errors import BuildError
from harness.results.variants import variant_label
from harness.steps.bmoe import BmoeConfig, bmoe_args, read_bytes_check
from tests.helpers import BUILD_TIMEOUT_S, REPO, needs_cgroups, run_campaign

UNREACHABLE = "file:///nonexistent/harness-test/BigMoeOnEdge"  # fails at once, with or without network


def _archive(folder: Path, commit: str) -> Path:
    """A tar.gz whose global pax header carries ``commit`` as `git archive` writes it."""
    path = folder / archive_name(UNREACHABLE, PINNED_COMMIT)
    data = b"cmake_minimum_required(VERSION 3.21)\n"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}) as tar:
        info = tarfile.TarInfo("BigMoeOnEdge-2d4f2b1/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_config_renders_the_engines_flags() -> None:
    config = BmoeConfig(moe_stream=True, cache_mb="auto", cache_ceil_mb=512, io_threads=4, odirect=False,
                        dense_weights="warm", force_cache=True, overlap=True, prefetch=1, threads=2, seed=7, temp=0.0,
                        prompt="hello", args=["--io-two-wave"])
    assert bmoe_args(config) == ["--moe-stream", "-t", "2", "--cache-mb", "auto", "--cache-ceil-mb", "512",
                                 "--io-threads", "4", "--dense-weights", "warm", "--prefetch", "1", "--seed", "7",
                                 "--temp", "0.0", "--no-odirect", "--force-cache", "--overlap", "--io-two-wave"]
    plain = BmoeConfig(moe_stream=False, prompt="hi")
    assert bmoe_args(plain) == ["--temp", "0.0"]  # greedy unless told: variants stay comparable


def test_config_refuses_what_the_harness_owns_and_needs_one_prompt_source() -> None:
    with pytest.raises(ValidationError, match="--csv are set by the harness"):
        BmoeConfig(prompt="x", args=["--csv", "mine.csv"])
    with pytest.raises(ValidationError, match="exactly one of prompt"):
        BmoeConfig()
    with pytest.raises(ValidationError, match="dense_weights"):
        BmoeConfig(prompt="x", dense_weights="ahwb")
    spec = BmoeConfig(prompts=str(REPO / "experiments" / "prompts" / "quickstart.jsonl"), n_predict=8)
    assert len(spec.prompt_list()) == 3


def test_missing_archive_and_no_network_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SOURCES_ENV, str(tmp_path))
    source = parse_source({"git": UNREACHABLE, "commit": PINNED_COMMIT})
    reason = unavailable_reason(source)
    assert reason is not None and "\n" not in reason
    assert reason.startswith(f"no BigMoeOnEdge-2d4f2b1.tar.gz in ${SOURCES_ENV} ({tmp_path}) and {UNREACHABLE}")
    with pytest.raises(BuildError, match="^engine bigmoeonedge: no archive in \\$HARNESS_ENGINE_SOURCES and git"):
        engine_source(source, tmp_path / "cache")


def test_archive_is_found_by_commit_and_a_wrong_commit_refused(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SOURCES_ENV, str(tmp_path))
    archive = _archive(tmp_path, PINNED_COMMIT)
    source = parse_source({"git": UNREACHABLE, "commit": PINNED_COMMIT})
    assert find_archive(UNREACHABLE, PINNED_COMMIT) == archive and unavailable_reason(source) is None
    assert archive_commit(archive) == PINNED_COMMIT
    tree, identity, commit = engine_source(source, tmp_path / "cache")
    assert (tree / "CMakeLists.txt").is_file() and commit == PINNED_COMMIT
    assert identity["kind"] == "archive" and identity["commit"] == PINNED_COMMIT
    _archive(tmp_path, "0" * 40)  # same name, another commit inside
    with pytest.raises(BuildError, match="holds commit 0000000000000000000000000000000000000000, not 2d4f2b1"):
        engine_source(source, tmp_path / "cache")


def test_source_needs_one_kind() -> None:
    with pytest.raises(BuildError, match="exactly one of git"):
        parse_source({"path": "/x", "git": UNREACHABLE, "commit": PINNED_COMMIT})
    with pytest.raises(BuildError, match="needs a commit"):
        parse_source({"git": UNREACHABLE})


def test_unavailable_optional_engine_is_left_out_in_one_line(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.campaign.prepare import drop_unavailable

    monkeypatch.setenv(SOURCES_ENV, str(tmp_path))
    source = {"git": UNREACHABLE, "commit": PINNED_COMMIT}
    engines = {"bigmoeonedge": EngineSpec(source=source, optional=True), "llama.cpp": EngineSpec()}
    said: list[str] = []
    assert drop_unavailable(engines, said.append) == {"bigmoeonedge"}
    assert list(engines) == ["llama.cpp"] and len(said) == 1
    assert said[0].startswith("engine bigmoeonedge left out (optional): no BigMoeOnEdge-2d4f2b1.tar.gz")
    required = {"bigmoeonedge": EngineSpec(source=source)}  # not optional: the build fails with its own line
    assert drop_unavailable(required, said.append) == set() and len(said) == 1


def test_engine_spec_takes_the_llama_tree_the_harness_builds() -> None:
    from harness.engines import ENGINES

    engine = ENGINES["bigmoeonedge"]
    default = engine.spec(None, {})
    assert default.source == {"git": "https://github.com/Helldez/BigMoeOnEdge", "commit": PINNED_COMMIT,
                              "llama_sdist": "llama-cpp-python==0.3.36"}
    other = engine.spec(None, {"llama.cpp": EngineSpec(source={"path": "/src/llama.cpp"})})
    assert other.source is not None and other.source["llama_path"] == "/src/llama.cpp"


def test_variant_label_names_the_other_engines_step() -> None:
    params = ["read_ahead_kb", "threads"]
    row = {"read_ahead_kb": 8192, "threads": 1, "cache": "cold"}
    assert variant_label({**row, "engine": "llama.cpp", "step_label": "llama-server"}, params) == \
        "read_ahead_kb=8192 threads=1 cold"
    assert variant_label({**row, "engine": None, "step_label": "fio"}, params) == "read_ahead_kb=8192 threads=1 cold"
    assert variant_label({**row, "engine": "bigmoeonedge", "step_label": "bmoe-cache256"}, params) == \
        "bmoe-cache256 read_ahead_kb=8192 threads=1 cold"


def test_read_bytes_cross_check() -> None:
    row = {"decode_dev_read_bytes": 31 * 100 * 2**20, "decode_majflt": 62, "engine_read_bytes_per_token": 50 * 2**20}
    checked = read_bytes_check(row, progress_lines=32)  # 31 tokens between the first progress line and the exit
    assert checked["decode_tokens"] == 31
    assert checked["decode_dev_read_bytes_per_token"] == 100 * 2**20
    assert checked["decode_dev_to_engine_read_ratio"] == pytest.approx(2.0)
    assert checked["decode_majflt_per_token"] == 2
    assert read_bytes_check({"engine_read_bytes_per_token": None}, 1)["decode_dev_to_engine_read_ratio"] is None


def _archive_or_skip() -> None:
    folder = os.environ.get(SOURCES_ENV)
    if not folder or not (Path(folder) / archive_name("BigMoeOnEdge", PINNED_COMMIT)).is_file():
        pytest.skip(f"no BigMoeOnEdge-2d4f2b1.tar.gz in ${SOURCES_ENV} ({folder or 'unset'})")


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
@needs_cgroups()
def test_bmoe_campaign_under_a_memory_budget(tmp_path: Path) -> None:
    _archive_or_skip()
    experiment = tmp_path / "bmoe.yaml"
    prompts = REPO / "experiments" / "prompts" / "quickstart.jsonl"
    experiment.write_text(f"""\
name: bmoe-test
model: {{synth: {{size: 1.6G, experts: 64, used: 4, hidden: 512}}}}
emulate: {{memory: 512M}}
cache: cold
validity: off
collect: {{blockstat: {{period_ms: 10}}}}
steps:
  - bmoe: {{moe_stream: true, cache_mb: 0, threads: 2, n_predict: 8, prompts: {prompts}}}
""")
    done = run_campaign(str(experiment), "--results", str(tmp_path / "results"), timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from harness.results.loader import load_result_set

    (path,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    rs = load_result_set(path)
    requests, tokens = rs.table("requests"), rs.table("tokens")
    assert len(requests) == 3 and len(tokens) >= 3 * 8
    assert requests["decode_tps"].notna().all() and (requests["decode_tps"] > 0).all()
    assert requests["engine_read_bytes_per_token"].notna().all()
    assert (requests["decode_dev_read_bytes_per_token"] > 0).all()
    assert requests["decode_dev_to_engine_read_ratio"].notna().all()
    build = json.loads((path / "manifest.json").read_text())["engines"]["bigmoeonedge"]
    assert build["commit"] == PINNED_COMMIT and build["source"]["engine"]["kind"] == "archive"
    assert build["source"]["llama.cpp"]["source"]["version"] == "0.3.36"
    assert [Path(p["path"]).name for p in build["patches"]] == ["session-cpp-llama-0.3.36.patch"]
    assert build["expert_ready_hook"] is False  # the stock tree: --overlap is refused by bmoe-cli


def _stat(read_ios: int, read_sectors: int) -> str:
    """A /sys/block/DEV/stat line (reads, merges, sectors, ticks; writes ...; in flight, io ticks, queue time)."""
    return f"{read_ios} 0 {read_sectors} 10 0 0 0 0 0 20 30 0 0 0 0 0 0"


def test_prompt_rows_from_a_real_progress_log(tmp_path: Path) -> None:
    from harness.steps.bmoe import BmoeStep

    log = (REPO / "tests" / "data" / "bmoe" / "format-sample-progress.log").read_bytes()  # 4 tokens, 42.69 MiB each
    (tmp_path / "bmoe-0.stdout").write_bytes(log)
    marks = {name: {"mono_ns": t * 10**9, "blockstat": _stat(ios, sectors), "proc": None}
             for name, t, ios, sectors in (("start", 1, 0, 0), ("first_token", 2, 10, 2048),
                                           ("end", 4, 40, 2048 + int(3 * 2 * 42.69 * 2048)))}
    record = {"index": 0, "prompt_index": 0, "repeat": 0, "cache": "cold", "n_predict": 4,
              "residency_before_pct": 0.0, "stdout": "bmoe-0.stdout", "stderr": "bmoe-0.stderr",
              "marks": marks}
    (tmp_path / "bmoe.jsonl").write_text(json.dumps(record) + "\n")
    tables = BmoeStep().ingest(tmp_path, {})
    (row,) = tables["requests"]
    assert len(tables["tokens"]) == 4 and {t["request"] for t in tables["tokens"]} == {0}
    assert row["decode_tps"] == pytest.approx(13.201) and row["cold_reached"] is True
    assert row["engine_read_bytes_per_token"] == pytest.approx(42.69 * 2**20)
    assert row["decode_tokens"] == 3 and row["decode_s"] == pytest.approx(2.0)
    # the device moved twice what the engine says it read, per decoded token
    assert row["decode_dev_to_engine_read_ratio"] == pytest.approx(2.0, rel=1e-3)


@pytest.mark.parametrize(("residency", "reached"), [(99.5, True), (60.0, False), (None, False)])
def test_warm_prompt_rows_say_whether_warm_was_reached(tmp_path: Path, residency: float | None,
                                                        reached: bool) -> None:
    """A warm bmoe prompt is judged as a warm llama-server request: at least 99 % of the model resident before
    it (under a memory budget earlier prompts may have pushed part of it out); no residency: not reached."""
    from harness.steps.bmoe import BmoeStep
    from harness.steps.llamacpp import request_row

    log = (REPO / "tests" / "data" / "bmoe" / "format-sample-progress.log").read_bytes()
    (tmp_path / "bmoe-0.stdout").write_bytes(log)
    record = {"index": 0, "prompt_index": 0, "repeat": 0, "cache": "warm", "n_predict": 4,
              "residency_before_pct": residency, "stdout": "bmoe-0.stdout", "stderr": "bmoe-0.stderr", "marks": {}}
    (tmp_path / "bmoe.jsonl").write_text(json.dumps(record) + "\n")
    (row,) = BmoeStep().ingest(tmp_path, {})["requests"]
    assert row["warm_reached"] is reached and "cold_reached" not in row
    assert request_row(record)["warm_reached"] is reached  # one rule for both engines
