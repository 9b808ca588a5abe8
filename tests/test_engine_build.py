"""llama.cpp built from the llama-cpp-python sdist: cache, failures, the tiny synthetic MoE running for real.

The first run builds llama-bench + llama-server (~6 min on 2 cores) into ~/.cache/harness/builds (or
$HARNESS_BUILD_CACHE); later runs take them from the cache. Source handling (git/path sources, patches, cache
keys) is also tested on small trees without a build.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from harness.engines.errors import BuildError
from harness.engines.llamacpp import (
    CPU_NATIVE_FLAGS,
    DEFAULT_CACHE_DIR,
    BuildInfo,
    SourceSpec,
    build_llamacpp,
)
from harness.engines.llamacpp.build import _apply_patches, cache_key
from harness.engines.llamacpp.source import prepare_source, tree_sha256
from harness.models.synth import SynthInfo, synth_moe
from tests.helpers import private_targets_dir, run_cli, wait_for

SDIST = "llama-cpp-python==0.3.36"
COMMIT = "0c1e570"  # llama.cpp commit vendored in that sdist (its CHANGELOG and the fixtures agree)
# whichever test first asks for `llama_build` builds llama.cpp when the cache is empty (~6 min on two quiet cores,
# much longer on a busy machine); pytest-timeout counts fixture setup, so those tests declare a longer limit
BUILDS = pytest.mark.timeout(3600)


def _cache() -> Path:
    return Path(os.environ.get("HARNESS_BUILD_CACHE", str(DEFAULT_CACHE_DIR))).expanduser()


@pytest.fixture(scope="session")
def llama_build() -> BuildInfo:
    return build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), cache_dir=_cache(), log=print)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> SynthInfo:
    return synth_moe(tmp_path_factory.mktemp("model") / "tiny.gguf", layers=4, experts=8, used=2)


# --- the real build ---------------------------------------------------------------------------------------

@pytest.mark.slow
@BUILDS
def test_build_records_what_was_built(llama_build: BuildInfo) -> None:
    b = llama_build
    assert b.commit and b.commit.startswith(COMMIT)
    assert b.source["kind"] == "sdist" and b.source["version"] == "0.3.36" and len(b.source["sha256"]) == 64
    for target in ("llama-bench", "llama-server"):
        assert Path(b.binaries[target]).is_file()
        assert COMMIT in b.versions[target]
        assert len(b.binary_sha256[target]) == 64
    assert "-DGGML_NATIVE=ON" in b.cmake_flags and f"-DLLAMA_BUILD_COMMIT={COMMIT}" in b.cmake_flags
    assert json.loads((Path(b.dir) / "build.json").read_text())["key"] == b.key
    assert (Path(b.dir) / "DONE").is_file()
    assert (Path(b.source_dir) / "models" / "ggml-vocab-qwen2.gguf").is_file()


@pytest.mark.slow
@BUILDS
def test_second_build_is_a_cache_hit(llama_build: BuildInfo) -> None:
    binaries = [Path(path) for path in llama_build.binaries.values()]
    before = [(path.stat().st_mtime_ns, path.stat().st_ino) for path in binaries]
    again = build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), cache_dir=_cache())
    assert again.cached
    assert again == llama_build
    assert again.build_seconds == llama_build.build_seconds and again.built_at == llama_build.built_at
    # nothing was compiled or linked again: the very same binary files
    assert [(path.stat().st_mtime_ns, path.stat().st_ino) for path in binaries] == before


@pytest.mark.slow
@BUILDS
def test_bad_patch_names_the_patch(llama_build: BuildInfo, tmp_path: Path) -> None:
    patch = tmp_path / "nonsense.patch"
    patch.write_text(
        "--- a/src/llama.cpp\n+++ b/src/llama.cpp\n@@ -1,3 +1,3 @@\n"
        "-this line is not in llama.cpp\n+replacement\n context that does not exist\n context\n")
    with pytest.raises(BuildError) as e:
        build_llamacpp({"path": llama_build.source_dir}, [], patches=[patch], cache_dir=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and str(patch) in msg and "does not apply" in msg
    assert Path(msg.rsplit("log: ", 1)[1]).is_file()
    # the pristine source was not touched
    assert "replacement" not in (Path(llama_build.source_dir) / "src" / "llama.cpp").read_text()


@pytest.mark.slow
@BUILDS
def test_bad_cmake_flag_gives_one_line_and_the_log(llama_build: BuildInfo, tmp_path: Path) -> None:
    with pytest.raises(BuildError) as e:
        build_llamacpp({"path": llama_build.source_dir}, ["-DCMAKE_C_COMPILER=/nonexistent/cc"],
                       cache_dir=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and "configure failed" in msg
    log = Path(msg.rsplit("log: ", 1)[1])
    assert log.is_file() and "/nonexistent/cc" in log.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@BUILDS
def test_tiny_model_runs_in_llama_bench(llama_build: BuildInfo, tiny_model: SynthInfo) -> None:
    # -t 1: with OpenMP, two threads on a busy two-core box spin at barriers and run ~20x slower
    cmd = [str(llama_build.binary("llama-bench")), "-m", tiny_model.path, "-p", "16", "-n", "16", "-r", "1",
           "-t", "1", "-o", "jsonl"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(16, 0), (0, 16)]
    assert all(r["avg_ts"] > 0 for r in rows)
    assert rows[0]["build_commit"] == COMMIT and rows[0]["model_type"].startswith("qwen3moe")


@pytest.mark.slow
@BUILDS
def test_tiny_model_serves_completions(llama_build: BuildInfo, tiny_model: SynthInfo, tmp_path: Path) -> None:
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    cmd = [str(llama_build.binary("llama-server")), "-m", tiny_model.path, "--host", "127.0.0.1",
           "--port", str(port), "-t", "1"]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    def healthy() -> bool:
        assert server.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
        with urllib.request.urlopen(base + "/health", timeout=2) as r:  # not listening yet: OSError, "not yet"
            return r.status == 200

    try:
        wait_for("llama-server to answer /health with 200", healthy, timeout=300, interval=0.3)
        body = json.dumps({"prompt": "The quick brown fox", "n_predict": 8, "temperature": 0,
                           "cache_prompt": False}).encode()
        req = urllib.request.Request(base + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            resp = json.load(r)
        t = resp["timings"]
        assert t["prompt_n"] > 0 and t["predicted_n"] >= 1 and t["predicted_ms"] > 0
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # own session: the group is exactly the server
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
    with pytest.raises(ProcessLookupError):
        os.killpg(server.pid, 0)


# --- sources, patches, keys (no build) ---------------------------------------------------------------------

def _fake_llama(root: Path) -> Path:
    (root / "ggml").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\nproject(fake C)\n")
    (root / "src.c").write_text("int answer(void) { return 41; }\n")
    return root


def test_source_spec_needs_exactly_one_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        SourceSpec.model_validate({})
    with pytest.raises(ValueError, match="exactly one"):
        SourceSpec.model_validate({"sdist": SDIST, "path": "/x"})
    with pytest.raises(ValueError, match="pinned"):
        SourceSpec.model_validate({"sdist": "llama-cpp-python"})
    with pytest.raises(ValueError, match="commit"):
        SourceSpec.model_validate({"git": "https://example.org/llama.cpp"})
    assert SourceSpec.model_validate({"path": "/x"}).kind == "path"
    with pytest.raises(BuildError, match="exactly one of sdist, git, path; got sdist, git"):
        build_llamacpp({"sdist": SDIST, "git": "https://example.org/x", "commit": "abc"})


def test_path_source_identity_follows_content(tmp_path: Path) -> None:
    tree = _fake_llama(tmp_path / "llama")
    a = prepare_source(SourceSpec(path=tree), tmp_path / "cache")
    assert a.identity["tree_sha256"] == tree_sha256(tree) and a.commit is None
    (tree / "src.c").write_text("int answer(void) { return 42; }\n")
    b = prepare_source(SourceSpec(path=tree), tmp_path / "cache")
    assert a.identity != b.identity


def test_git_source_checks_out_the_commit(tmp_path: Path) -> None:
    repo = _fake_llama(tmp_path / "repo")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()
    git("init", "-q")
    (repo / "ggml" / "keep").write_text("")
    git("add", "-A")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    (repo / "src.c").write_text("int answer(void) { return 42; }\n")
    git("commit", "-qam", "two")
    src = prepare_source(SourceSpec(git=f"file://{repo}", commit=first), tmp_path / "cache")
    assert src.commit == first and src.identity == {"kind": "git", "url": f"file://{repo}", "commit": first}
    assert "41" in (src.tree / "src.c").read_text()
    with pytest.raises(BuildError, match="git"):
        prepare_source(SourceSpec(git=f"file://{repo}", commit="0" * 40), tmp_path / "cache")


def test_patches_apply_in_order_and_bad_ones_are_named(tmp_path: Path) -> None:
    tree = _fake_llama(tmp_path / "src")
    good = tmp_path / "answer.patch"
    good.write_text("--- a/src.c\n+++ b/src.c\n@@ -1 +1 @@\n-int answer(void) { return 41; }\n"
                    "+int answer(void) { return 42; }\n")
    log = tmp_path / "build.log"
    _apply_patches([good], tree, log)
    assert "42" in (tree / "src.c").read_text()
    with pytest.raises(BuildError) as e:
        _apply_patches([good], tree, log)  # already applied: the context no longer matches
    assert str(good) in str(e.value) and f"log: {log}" in str(e.value)


def test_cache_key_changes_with_every_input() -> None:
    ident = {"kind": "sdist", "name": "x", "version": "1", "sha256": "a"}
    base = cache_key(ident, ["-DA=1"], [], "gcc 12")
    assert base == cache_key(dict(ident), ["-DA=1"], [], "gcc 12")
    assert base != cache_key({**ident, "sha256": "b"}, ["-DA=1"], [], "gcc 12")
    assert base != cache_key(ident, ["-DA=2"], [], "gcc 12")
    assert base != cache_key(ident, ["-DA=1"], ["p"], "gcc 12")
    assert base != cache_key(ident, ["-DA=1"], [], "gcc 13")


@pytest.mark.slow
@BUILDS
def test_deploy_local_with_an_experiment_prebuilds_its_engine(llama_build: BuildInfo, tmp_path: Path) -> None:
    exp = tmp_path / "pre.yaml"
    exp.write_text("name: pre\nmodel: {synth: {layers: 4, experts: 8, used: 2}}\n"
                   "steps:\n  - llama-bench: {args: [-p, 8, -n, 8]}\n")
    done = run_cli("deploy", "local", "--targets-dir", str(private_targets_dir()), "--experiment", str(exp),
                   env={"HARNESS_BUILD_CACHE": str(_cache())})
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert f"local: llama.cpp already built (cache hit), key {llama_build.key[:12]}" in out
