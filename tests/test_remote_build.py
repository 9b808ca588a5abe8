"""Engines built on a board over real SSH, keyed like local builds, and synthetic models pushed to it.

Two kinds of source tree:
- a tiny CMake project laid out like llama.cpp (CMakeLists.txt + ggml/, targets llama-bench and
  llama-server) for the build machinery itself: push, patch, configure, build, cache hit, failures. It
  builds in seconds, so every run of the suite takes the full first-build path.
- the real llama.cpp from the llama-cpp-python sdist, in a campaign that runs llama-bench on the board.
  Its board workdir persists like ~/.cache/harness (a real build takes minutes on 2 cores), so the
  first suite run builds it on the board and later ones check the cache hit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.boards.inventory import load_target
from harness.boards.session import TargetSession, open_session
from harness.engines.errors import BuildError
from harness.engines.llamacpp.build import BASE_CMAKE_FLAGS, cache_key, compiler_identity
from harness.engines.llamacpp.remote import build_on_target
from harness.engines.llamacpp.source import SourceSpec, prepare_source, sha256_file
from harness.results.loader import load_result_set
from tests.helpers import needs_cgroups as needs_cgroups_mark
from tests.helpers import python_or_skip, run_cli
from tests.sshd import SshServer, sshd_unavailable

# every test here talks to the real sshd and builds a CMake tree (or llama.cpp) on the "board"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(sshd_unavailable() is not None, reason=sshd_unavailable() or "")]


needs_cgroups = needs_cgroups_mark()

MAIN_C = """#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) { printf("version: " GREETING " (" COMMIT ")\\n"); }
    return 0;
}
"""
CMAKE = """cmake_minimum_required(VERSION 3.10)
project(tiny C)
set(LLAMA_BUILD_COMMIT "unknown" CACHE STRING "")
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
foreach(t llama-bench llama-server)
  add_executable(${t} main.c)
  target_compile_definitions(${t} PRIVATE GREETING="hello" COMMIT="${LLAMA_BUILD_COMMIT}")
endforeach()
"""
PATCH = """--- a/main.c
+++ b/main.c
@@ -2,3 +2,3 @@
 #include <string.h>
-int main(int argc, char **argv) {
+int main(int argc, char **argv) { /* patched */
     if (argc > 1 && strcmp(argv[1], "--version") == 0) { printf("version: " GREETING " (" COMMIT ")\\n"); }
"""


def _tiny_tree(root: Path, cmake: str = CMAKE) -> Path:
    (root / "ggml").mkdir(parents=True)
    (root / "ggml" / "README").write_text("stands in for ggml/ so the tree is recognised as llama.cpp\n")
    (root / "CMakeLists.txt").write_text(cmake)
    (root / "main.c").write_text(MAIN_C)
    return root


@pytest.fixture()
def open_board(sshd: SshServer, tmp_path: Path) -> Iterator[Callable[..., TargetSession]]:
    """Open a session on a fresh board (its own workdir) behind the test sshd; closed and removed after."""
    opened: list[tuple[TargetSession, str]] = []

    def _open(extra: str = "") -> TargetSession:
        workdir = f"/var/tmp/harness-ssh-tests/{uuid.uuid4().hex[:8]}"
        sshd.write_target(tmp_path / "targets", "board", workdir=workdir, extra=extra)
        opened.append((open_session(load_target(tmp_path / "targets" / "board.yaml")), workdir))
        return opened[-1][0]

    yield _open
    for session, workdir in opened:
        session.close()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture()
def session(open_board: Callable[..., TargetSession]) -> TargetSession:
    return open_board()


def _board_ls(session: TargetSession, path: str) -> list[str]:
    return session.transport.run(["ls", path]).stdout.decode().split()


def test_pushed_tree_builds_on_the_board_then_is_a_cache_hit(session: TargetSession, tmp_path: Path) -> None:
    tree = _tiny_tree(tmp_path / "tiny")
    patch = tmp_path / "greeting.patch"
    patch.write_text(PATCH)
    messages: list[str] = []
    first = build_on_target(session, {"path": str(tree)}, [], [patch], tmp_path / "sources", messages.append)
    assert first["built"] and first["location"] == "target" and first["transferred_bytes"] > 0
    assert any("pushing the llama.cpp source" in m for m in messages)
    # keyed like a local build of the same inputs with this (same) compiler
    identity = prepare_source(SourceSpec(path=tree), tmp_path / "sources").identity
    assert first["key"] == cache_key(identity, list(BASE_CMAKE_FLAGS), [sha256_file(patch)], compiler_identity())
    assert first["dir"] == f"{session.workdir}/cache/builds/{first['key']}"
    assert first["patches"][0]["sha256"] == sha256_file(patch)
    for target in ("llama-bench", "llama-server"):
        binary = first["binaries"][target]
        assert binary.startswith(session.workdir)
        ran = session.transport.run([binary, "--version"])
        assert ran.stdout.decode().strip() == "version: hello (unknown)" == first["versions"][target]
    board_main = session.transport.read_file(f"{first['dir']}/src/main.c").decode()
    assert "/* patched */" in board_main and "/* patched */" not in (tree / "main.c").read_text()

    messages.clear()
    again = build_on_target(session, {"path": str(tree)}, [], [patch], tmp_path / "sources", messages.append)
    assert not again["built"] and again["transferred_bytes"] == 0 and not messages
    assert again["key"] == first["key"] and again["binary_sha256"] == first["binary_sha256"]

    # a changed flag is another build (another key), from the source already on the board
    flagged = build_on_target(session, {"path": str(tree)}, ["-DTINY_UNUSED=1"], [patch], tmp_path / "sources",
                              messages.append)
    assert flagged["built"] and flagged["key"] != first["key"]
    assert flagged["transferred_bytes"] == 0 and "TINY_UNUSED" in flagged["unused_cmake_vars"]


def test_git_source_is_fetched_by_the_board(session: TargetSession, tmp_path: Path) -> None:
    repo = _tiny_tree(tmp_path / "repo")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tiny"]):
        subprocess.run([*git, *args], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    source = {"git": f"file://{repo}", "commit": commit[:10]}  # a short commit is resolved by the board
    record = build_on_target(session, source, [], [], tmp_path / "sources", print)
    assert record["built"] and record["transferred_bytes"] == 0  # nothing pushed: the board fetched it
    assert record["source"] == {"kind": "git", "url": f"file://{repo}", "commit": commit}
    assert record["versions"]["llama-bench"] == f"version: hello ({commit[:7]})"
    full = build_on_target(session, {"git": f"file://{repo}", "commit": commit}, [], [], tmp_path / "sources", print)
    assert not full["built"] and full["key"] == record["key"]


def test_failed_board_build_is_one_line_naming_the_board_log(session: TargetSession, tmp_path: Path) -> None:
    tree = _tiny_tree(tmp_path / "broken", cmake=CMAKE + "this_is_not_a_cmake_command(\n")
    with pytest.raises(BuildError) as caught:
        build_on_target(session, {"path": str(tree)}, [], [], tmp_path / "sources", print)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("target board: llama.cpp build failed: llama.cpp cmake configure failed")
    log = message.rsplit("log: ", 1)[1]
    assert log.startswith(f"{session.workdir}/cache/builds/") and log.endswith("/build.log")
    assert b"Configuring incomplete, errors occurred" in session.transport.read_file(log)


# --- the real engine on the board -------------------------------------------------------------------------

BOARD_CACHE = Path(os.environ.get("HARNESS_TEST_BOARD", "/var/tmp/harness-test-board"))
REMOTE_BENCH = """\
name: remote-bench
model: {synth: {layers: 4, experts: 8, used: 2}}
cache: cold
emulate: {memory: 512M, read_ahead_kb: 128}
collect:
  blockstat: {period_ms: 10}
  threads: {period_ms: 5}
steps:
  - llama-bench: {args: [-p, 8, -n, 8, -t, 1, -r, 1]}
  - llama-server:
      args: [-t, "1", -c, 256]
      prompts: ["Say hello.", "Name a colour."]
      n_predict: 8
"""


@needs_cgroups  # the experiment emulates a board (emulate:)
@pytest.mark.timeout(2 * 3600 + 600)  # two campaigns of up to an hour each: the first builds llama.cpp on the board
def test_campaign_builds_llamacpp_on_the_board_and_runs_it(sshd: SshServer, tmp_path: Path) -> None:
    sshd.write_target(tmp_path / "targets", "board", workdir=str(BOARD_CACHE))
    exp = tmp_path / "remote.yaml"
    exp.write_text(REMOTE_BENCH)

    def campaign() -> dict:
        done = run_cli("run", str(exp), "--target", "board", "--targets-dir", str(tmp_path / "targets"),
                       "--results", str(tmp_path / "results"), timeout=3600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        newest = max((tmp_path / "results").iterdir(), key=lambda p: p.stat().st_mtime)
        rs = load_result_set(newest)
        assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok", "ok"]
        bench = rs.table("bench")
        assert len(bench) >= 2 and (bench["avg_ts"] > 0).all()
        # the server step's per-request tables, as a local run gives them
        requests = rs.table("requests")
        assert len(requests) == 2 and (requests["predicted_n"] == 8).all() and requests["cold_reached"].all()
        assert (requests["request_dev_read_bytes"] > 0).all()
        assert set(rs.table("threads")["state"]) & {"R", "D", "S"}
        # the board emulated on the board: budget and readahead applied there, and the readahead restored
        runs = rs.table("runs")
        assert runs["emulated"].all() and (runs["emu_memory_bytes"] == 512 << 20).all()
        assert (runs["emu_read_ahead_kb_seen"] == 128).all()
        (entry,) = rs.manifest["targets"]
        return {"entry": entry, "files": rs.manifest["files"]["board"], "rs": rs, "out": done.stdout}

    first = campaign()
    build = first["entry"]["engines"]["llama.cpp"]
    assert build["location"] == "target" and build["dir"].startswith(f"{BOARD_CACHE}/cache/builds/")
    assert build["source"]["kind"] == "sdist" and build["commit"].startswith("0c1e570")
    assert "0c1e570" in build["versions"]["llama-bench"]
    # the board's build is keyed like this machine's (same compiler here)
    identity = build["source"]
    flags = [f for f in build["cmake_flags"] if not f.startswith("-DLLAMA_BUILD_COMMIT=")]
    assert build["key"] == cache_key(identity, flags, [], compiler_identity())
    model = first["files"]["model"]
    assert model["path"].startswith(f"{BOARD_CACHE}/cache/models/") and model["size_bytes"] > 0
    assert first["rs"].manifest["engines"] == {}  # nothing was built on the controller for a board

    second = campaign()
    again = second["entry"]["engines"]["llama.cpp"]
    assert not again["built"] and again["transferred_bytes"] == 0 and again["key"] == build["key"]
    assert "pushing" not in second["out"] and "building llama.cpp on the board" not in second["out"]
    assert json.dumps(second["files"]["model"]["path"]) == json.dumps(model["path"])

    # `harness deploy --experiment` answers from the board's cache: nothing sent, nothing built
    deployed = run_cli("deploy", "board", "--targets-dir", str(tmp_path / "targets"), "--experiment", str(exp))
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert "llama.cpp already built (cache hit)" in deployed.stdout and "0 bytes sent" in deployed.stdout
    assert f"model model at {model['path']}" in deployed.stdout


def test_a_board_without_cmake_says_so_in_one_line(open_board: Callable[..., TargetSession],
                                                   tmp_path: Path) -> None:
    real_python = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    opened = open_board(f"python: {real_python}\n")
    # the board's builder runs with a PATH that has a compiler but no cmake
    bare = f"{opened.workdir}/bare-bin"
    opened.transport.run(["sh", "-c", f"mkdir -p {bare} && for t in cc c++ sh setsid nohup; do "
                                      f"ln -sf $(command -v $t) {bare}/$t; done"]).check()
    original = opened.transport.start_detached

    def without_cmake(argv, *, cwd, log, env=None):  # noqa: ANN001, ANN202
        return original(argv, cwd=cwd, log=log, env={**(env or {}), "PATH": bare})

    opened.transport.start_detached = without_cmake  # type: ignore[method-assign]
    with pytest.raises(BuildError, match=r"^target board: llama.cpp build failed: cannot build llama.cpp here: "
                                         r"cmake not installed \(apt-get install cmake gcc g\+\+\)$"):
        build_on_target(opened, {"path": str(_tiny_tree(tmp_path / "t"))}, [], [], tmp_path / "sources", print)


def test_board_build_survives_a_dropped_connection(sshd: SshServer, session: TargetSession, tmp_path: Path) -> None:
    slow = CMAKE + "add_custom_target(slow COMMAND sleep 4)\nadd_dependencies(llama-bench slow)\n"
    tree = _tiny_tree(tmp_path / "slow", cmake=slow)
    messages: list[str] = []
    session.transport.on_event = messages.append  # type: ignore[attr-defined]

    def drop_when_compiling(line: str) -> None:
        messages.append(line)
        if "compiling" in line:
            assert sshd.drop_connections(), "no ssh session to drop"

    record = build_on_target(session, {"path": str(tree)}, [], [], tmp_path / "sources", drop_when_compiling)
    assert record["built"] and set(record["binaries"]) == {"llama-bench", "llama-server"}
    assert any("connection lost" in m for m in messages) and any("reconnected" in m for m in messages)


def test_a_python_3_8_board_builds_too(open_board: Callable[..., TargetSession], tmp_path: Path) -> None:
    """JetPack 5 boards ship Python 3.8: the board-side builder must run there."""
    opened = open_board(f"python: {python_or_skip('3.8')}\n")
    tree = _tiny_tree(tmp_path / "tiny")
    record = build_on_target(opened, {"path": str(tree)}, [], [], tmp_path / "sources", print)
    assert record["built"] and record["versions"]["llama-server"] == "version: hello (unknown)"
    assert not build_on_target(opened, {"path": str(tree)}, [], [], tmp_path / "sources", print)["built"]


def test_two_boards_build_their_engines_at_the_same_time(sshd: SshServer, tmp_path: Path) -> None:
    """The campaign's preflight builds on every board in parallel (a board build takes minutes)."""
    from datetime import datetime

    from harness.campaign.orchestrator import Campaign
    from harness.campaign.plan import build_plan
    from harness.config.experiment import load_experiment

    # each board's build checks in, then waits for the other board's build to check in too: built in turn, the
    # first would give up (and fail its build) instead of finishing; then both hold on together for 3 s
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    meet = "add_custom_target(meet COMMAND sh ${CMAKE_SOURCE_DIR}/meet.sh)\nadd_dependencies(llama-bench meet)\n"
    tree = _tiny_tree(tmp_path / "meet", cmake=CMAKE + meet)
    (tree / "meet.sh").write_text(f"""touch {rendezvous}/build-$$
i=0
while [ "$(ls {rendezvous} | wc -l)" -lt 2 ]; do
  i=$((i + 1))
  if [ $i -gt 3000 ]; then echo "the other board's build never started" >&2; exit 1; fi
  sleep 0.1
done
sleep 3
""")
    workdirs = [f"/var/tmp/harness-ssh-tests/{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name, workdir in zip(("board-a", "board-b"), workdirs, strict=True):
        sshd.write_target(tmp_path / "targets", name, workdir=workdir)
    exp = tmp_path / "two.yaml"
    exp.write_text(f"name: two\nmodel: {{synth: {{layers: 4, experts: 8, used: 2}}}}\n"
                   f"engine:\n  llama.cpp: {{source: {{path: {tree}}}}}\ncache: none\n"
                   "steps:\n  - llama-bench: {args: [-p, 8, -n, 8]}\n")
    targets = [load_target(tmp_path / "targets" / f"{n}.yaml") for n in ("board-a", "board-b")]
    campaign = Campaign(build_plan(load_experiment(exp)), targets, tmp_path / "results", lease_wait_s=0)
    sessions = campaign._preflight()
    try:
        windows = []
        for session, workdir in zip(sessions, workdirs, strict=True):
            build = session.engines["llama.cpp"]
            assert build["built"] and build["dir"].startswith(f"{workdir}/cache/builds/")
            assert session.models["model"].startswith(f"{workdir}/cache/models/")
            end = datetime.fromisoformat(build["built_at"]).timestamp()
            windows.append((end - build["build_seconds"], end))
        (a_start, a_end), (b_start, b_end) = windows
        # the recorded windows overlap by the 3 s held together (built_at has whole seconds)
        assert min(a_end, b_end) - max(a_start, b_start) >= 1.5, windows
        assert len(list(rendezvous.iterdir())) == 2  # one check-in per board build
        assert sessions[0].engines["llama.cpp"]["key"] == sessions[1].engines["llama.cpp"]["key"]
    finally:
        for session in sessions:
            session.close()
        for workdir in workdirs:
            shutil.rmtree(workdir, ignore_errors=True)


BMOE_CMAKE = """cmake_minimum_required(VERSION 3.10)
project(tiny_bmoe C)
add_subdirectory(third_party/llama.cpp EXCLUDE_FROM_ALL)
add_subdirectory(cli)
"""


def test_bigmoeonedge_builds_on_the_board_with_the_harness_llama_tree(session: TargetSession,
                                                                     tmp_path: Path) -> None:
    """The engine's tree (empty third_party/llama.cpp) gets the llama.cpp tree in, is pushed, built by the same
    board builder into the same cache, and its bmoe-cli is found where cmake put it (cli/, not bin/)."""
    from harness.config.experiment import EngineSpec
    from harness.engines import ENGINES

    llama = _tiny_tree(tmp_path / "llama")
    engine = tmp_path / "bmoe"
    (engine / "third_party" / "llama.cpp").mkdir(parents=True)  # the empty submodule of an archive
    (engine / "cli").mkdir()
    (engine / "CMakeLists.txt").write_text(BMOE_CMAKE)
    (engine / "cli" / "CMakeLists.txt").write_text('add_executable(bmoe-cli ../third_party/llama.cpp/main.c)\n'
                                                   'target_compile_definitions(bmoe-cli PRIVATE GREETING="bmoe" '
                                                   'COMMIT="${LLAMA_BUILD_COMMIT}")\n')
    spec = EngineSpec(source={"path": str(engine), "llama_path": str(llama)}, cmake=[])
    messages: list[str] = []
    first = ENGINES["bigmoeonedge"].build_on_target(session, spec, tmp_path, tmp_path / "sources", messages.append)
    assert first["built"] and any("pushing the BigMoeOnEdge source" in m for m in messages)
    assert first["binaries"]["bmoe-cli"].endswith("/build/cli/bmoe-cli")
    assert first["versions"]["bmoe-cli"] == "version: bmoe (unknown)"
    assert first["source"]["llama.cpp"]["from"] == "harness llama.cpp source"
    assert first["source"]["llama.cpp"]["source"]["kind"] == "path" and first["expert_ready_hook"] is False
    again = ENGINES["bigmoeonedge"].build_on_target(session, spec, tmp_path, tmp_path / "sources", messages.append)
    assert not again["built"] and again["key"] == first["key"] and again["transferred_bytes"] == 0
