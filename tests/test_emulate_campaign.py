"""Board emulation through the controller: the ``emulate:`` key, refusal before a set exists, and the
emulation showing up in run.json, the runs table and the figures."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from runner.emulation import cgroup, state
from runner.probes.blockdev import block_device_of
from tests.helpers import REPO, cli_in_process, machine_lock, run_cli, wait_for
from tests.helpers import needs_cgroups as needs_cgroups_mark

MiB = 1 << 20


needs_cgroups = needs_cgroups_mark()


def experiment(tmp_path: Path, emulate_block: str, matrix: str = "{}") -> Path:
    path = tmp_path / "emu.yaml"
    path.write_text(f"""\
name: emu
files:
  data: {{create: 32M}}
matrix: {matrix}
cache: cold
emulate: {emulate_block}
steps:
  - read: {{file: data, pattern: seq}}
""")
    return path


@pytest.fixture(autouse=True)
def _remove_private_workdir(tmp_path: Path) -> Iterator[None]:
    yield
    shutil.rmtree(PRIVATE_WORKDIRS / f"{tmp_path.name}-work", ignore_errors=True)


PRIVATE_WORKDIRS = Path("/var/tmp/harness-tests")  # a real disk: cold reads must reach the device


def run_private(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``harness run`` on a local target of its own: its own workdir, so no other campaign's lease on
    this shared machine makes it wait."""
    return run_cli("run", *args, *private_target(tmp_path), env=env)


def private_target(tmp_path: Path) -> list[str]:
    targets = tmp_path / "targets"
    if not targets.exists():
        targets.mkdir()
        (targets / "local.yaml").write_text(f"platform: linux\ntransport: local\nblock_device: auto\n"
                                            f"workdir: {PRIVATE_WORKDIRS}/{tmp_path.name}-work\n")
    return ["--targets-dir", str(targets), "--target", "local"]


@pytest.mark.parametrize(("block", "words"), [
    ("{memroy: 512M}", "emulate.memroy: unknown key 'memroy' (expected one of: memory, read_bytes_per_s"),
    ("{memory: 64k}", "emulate.memory: expected a memory budget of at least 4.0 MiB"),
    ("{read_bytes_per_s: fast}", "emulate.read_bytes_per_s: expected a size like"),
    ("{read_ahead_kb: '{nope}'}", "names 'nope', which is not a matrix key"),
])
def test_bad_emulate_block_is_one_line_with_file_and_line(tmp_path: Path, block: str, words: str) -> None:
    path = experiment(tmp_path, block, matrix="{ra: [128]}")
    done = cli_in_process("plan", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{path}:6: " in done.stderr and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_template_from_the_matrix_is_checked_per_cell(tmp_path: Path) -> None:
    done = cli_in_process("plan", str(experiment(tmp_path, "{read_ahead_kb: '{ra}'}", matrix="{ra: [128, -1]}")))
    assert done.returncode == 2 and "emulate.read_ahead_kb" in done.stderr, done.stderr


@pytest.mark.slow
@needs_cgroups
def test_machine_without_controllers_refuses_before_a_set_exists(tmp_path: Path) -> None:
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    results = tmp_path / "results"
    done = run_private(tmp_path, str(experiment(tmp_path, "{memory: 64M}")), "--results", str(results),
                       "--scratch", str(tmp_path / "s"), env={"HARNESS_CGROUP_ROOT": str(empty)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "target local: emulation refused" in done.stderr and "no cgroup memory controller" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.slow
@needs_cgroups
def test_emulated_campaign_records_settings_everywhere(tmp_path: Path) -> None:
    path = experiment(tmp_path, "{memory: 16M, read_bytes_per_s: 200M, read_ahead_kb: '{ra}'}",
                      matrix="{ra: [128, 256]}")
    done = run_private(tmp_path, str(path), "--results", str(tmp_path / "results"), "--scratch", str(tmp_path / "s"))
    assert done.returncode == 0, done.stdout + done.stderr
    rs = load_result_set(next((tmp_path / "results").iterdir()))
    runs = rs.table("runs").set_index("ra")
    assert list(runs["status"]) == ["ok", "ok"]
    for ra in (128, 256):
        assert runs.loc[ra, "emu_read_ahead_kb"] == runs.loc[ra, "emu_read_ahead_kb_seen"] == ra
    assert (runs["emu_memory_bytes"] == 16 * MiB).all() and (runs["emu_read_bytes_per_s"] == 200 * MiB).all()
    assert (runs["emu_memory_peak_bytes"] <= 17 * MiB).all() and runs["emu_memory_at_limit"].all()
    assert (runs["emu_io_read_bytes"] >= 31 * MiB).all() and runs["emu_cgroups_removed"].all()
    record = json.loads(next((rs.path / "raw" / "local").glob("*-128-cold-r1/run.json")).read_text())
    assert record["emulation"]["requested"] == {"memory": "16M", "read_bytes_per_s": "200M", "read_ahead_kb": 128}
    assert record["emulation"]["effective"]["memory_bytes"] == 16 * MiB
    # a figure made from these runs says so, in its footer and in its metadata
    svg = (rs.path / "figures" / "read_accounting.svg").read_text()
    versions = "/".join(sorted({version for version, _where in cgroup.detect().values()}))
    assert f"emulated (cgroup {versions}): memory 16.0 MiB" in svg and "read_ahead_kb 128|256" in svg


def _pids_with(*words: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if all(word in cmdline for word in words):
                found.append(int(pid))
    return found


@pytest.mark.slow
@needs_cgroups
def test_controller_repairs_at_once_when_a_runner_dies(tmp_path: Path) -> None:
    name = f"emukill-{uuid.uuid4().hex[:8]}"
    ra_path = Path(f"/sys/block/{block_device_of(str(tmp_path))}/queue/read_ahead_kb")
    with machine_lock():  # no emulated run is changing it now: this is the machine's own value
        original = int(ra_path.read_text())
    wanted = 256 if original != 256 else 128
    path = experiment(tmp_path, f"{{read_bytes_per_s: 2M, read_ahead_kb: {wanted}}}")
    path.write_text(path.read_text().replace("name: emu", f"name: {name}"))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(path), "--results", str(tmp_path / "r"),
                             "--scratch", str(tmp_path / "s"), *private_target(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def step_started() -> list[int]:
        assert proc.poll() is None, proc.communicate()
        return _pids_with("runner.steps.readfile", tmp_path.name)

    try:
        # another emulated run on this machine may hold the emulation lock a while
        wait_for("the emulated step's reader process (runner.steps.readfile) to start", step_started, timeout=300)
        runner = _pids_with("-m runner run", name)
        assert len(runner) == 1 and int(ra_path.read_text()) == wanted
        os.kill(runner[0], signal.SIGKILL)  # no finally-block runs: only the controller can clean up now
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "undid the emulation a dead runner left" in out + err, out + err
    run = load_result_set(next((tmp_path / "r").iterdir())).manifest["runs"][0]
    assert run["status"] == "failed"
    with machine_lock():
        assert int(ra_path.read_text()) == original
        assert not os.path.exists(state.state_path())
    # the dead runner's record of its cgroups is gone with them
    assert not [n for n in os.listdir(state.state_dir()) if n.startswith("run-") and str(runner[0]) in n]
    assert _pids_with("runner.steps.readfile", tmp_path.name) == []
