"""Board emulation on this machine with real cgroups and the real block device (root needed).

The runner is started as the controller starts it (``python -m runner run SPEC``) on hand-written
specs; the tests read what a user relies on: run.json, the block device's read_ahead_kb afterwards,
the cgroup tree, the process table.
"""

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

from runner import sysroot
from runner.contract import CONTRACT_VERSION
from runner.emulation import cgroup, state
from runner.probes.blockdev import block_device_of
from runner.util import make_data_file
from tests.helpers import REPO, machine_lock, wait_for
from tests.helpers import needs_cgroups as needs_cgroups_mark

needs_cgroups = needs_cgroups_mark()
pytestmark = [pytest.mark.slow, needs_cgroups]

MiB = 1 << 20
BASE = Path("/var/tmp/harness-tests")  # a real disk, not tmpfs: cold reads must hit the device


@pytest.fixture(scope="module")
def native_bin() -> str:
    from harness.boards.session import build_native_here

    return str(build_native_here())


@pytest.fixture(scope="module")
def files() -> Iterator[dict[str, str]]:
    where = BASE / f"emulate-{uuid.uuid4().hex[:8]}"
    made = {"big": make_data_file(str(where / "big.bin"), 256 * MiB)["path"],
            "small": make_data_file(str(where / "small.bin"), 64 * MiB)["path"]}
    yield made
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture()
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    # whatever a test did: no step process and no cgroup of its runs may outlive it
    assert _processes_mentioning(str(tmp_path)) == []
    assert _harness_cgroups_mentioning(tmp_path.name) == []


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in cmdline and int(pid) != os.getpid():
                found.append(f"{pid}: {cmdline}")
    return found


def _harness_cgroups_mentioning(text: str) -> list[str]:
    found = []
    for _resource, (version, hierarchy) in cgroup.detect().items():
        for parent in {cgroup.parent_dir(version, hierarchy, r) for r in ("memory", "io")}:
            if os.path.isdir(parent):
                found += [os.path.join(parent, d) for d in os.listdir(parent) if text in d]
    return found


def read_ahead_path(path: str) -> Path:
    return Path(sysroot.ROOT + f"/sys/block/{block_device_of(path)}/queue/read_ahead_kb")


def other_read_ahead(path: str) -> int:
    """A value the device does not have now, so 'set' and 'restored' can be told apart."""
    return 128 if int(read_ahead_path(path).read_text()) != 128 else 256


def make_spec(workdir: Path, native_bin: str, file: str, emulate_spec: dict | None, *, cache: str = "cold",
              device: str | None = None, pattern: str = "seq", bs: int = MiB) -> Path:
    run_id = f"{workdir.name}-{uuid.uuid4().hex[:6]}"
    # a set of its own: a runner reaps every process of its set, and a neighbouring suite runs these tests too
    run_dir = workdir / "runs" / f"set-{run_id}" / run_id
    run_dir.mkdir(parents=True)
    spec = {"contract": CONTRACT_VERSION, "run_id": run_id, "set_id": f"set-{run_id}", "cache": cache,
            "round": 1, "repeat": 1, "params": {},
            "cache_files": [file] if cache != "none" else [], "block_device": device or block_device_of(file),
            "native_bin": native_bin, "collectors": [], "run_dir": str(run_dir), "emulate": emulate_spec,
            "step": {"kind": "read", "file": file, "pattern": pattern, "bs_bytes": bs, "seed": 0,
                     "timeout_s": 300}}
    path = run_dir / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def start_runner(spec: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "runner", "run", str(spec)], cwd=REPO,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def run_runner(spec: Path, env: dict[str, str] | None = None) -> dict:
    proc = start_runner(spec, env)
    out, _ = proc.communicate(timeout=600)
    assert (spec.parent / "DONE").exists(), out.decode(errors="replace")
    return json.loads((spec.parent / "run.json").read_text())


def read_result(spec: Path) -> dict:
    return json.loads((spec.parent / "read.json").read_text())


# ---------------------------------------------------------------------------------------------- budgets

def test_memory_budget_bounds_a_cold_read_of_a_bigger_file(workdir: Path, native_bin: str, files: dict) -> None:
    spec = make_spec(workdir, native_bin, files["big"], {"memory_bytes": 64 * MiB, "requested": {"memory": "64M"}})
    record = run_runner(spec)
    assert record["status"] == "ok", record["error"]
    emu = record["emulation"]
    assert emu["requested"] == {"memory": "64M"}
    assert emu["effective"]["memory_bytes"] == 64 * MiB  # read back from the kernel
    # the whole 256 MiB file went through a 64 MiB budget: page cache included, it never held more
    # (and it filled the budget: without a limit the cache would have grown to the file's size)
    assert 32 * MiB < emu["stats"]["memory_peak_bytes"] <= 64 * MiB + MiB
    assert abs(record["rusage"]["read"]["storage_read_bytes"] - 256 * MiB) <= 0.02 * 256 * MiB
    assert read_result(spec)["read_bytes"] == 256 * MiB
    assert emu["cgroups_removed"] is True and not os.path.exists(emu["cgroups"]["memory"])


def test_warm_under_a_budget_reads_the_host_cache_outside_it(workdir: Path, native_bin: str, files: dict) -> None:
    # warm = the file is resident in the host's page cache, charged outside the budget (README)
    spec = make_spec(workdir, native_bin, files["big"], {"memory_bytes": 64 * MiB}, cache="warm")
    record = run_runner(spec)
    assert record["status"] == "ok", record["error"]
    assert record["cache"]["before"][0]["resident_pct"] >= 99.0
    # (almost) no device I/O: a busy machine may evict a few pages during the read; cold reads the whole file
    assert record["rusage"]["read"]["storage_read_bytes"] <= 0.10 * 256 * MiB
    stats = record["emulation"]["stats"]
    assert stats["memory_peak_bytes"] <= 64 * MiB and stats["cache_bytes"] <= 8 * MiB  # none of it charged here


def test_a_budget_too_small_is_an_oom_kill_recorded_as_a_failed_run(workdir: Path, native_bin: str,
                                                                     files: dict) -> None:
    spec = make_spec(workdir, native_bin, files["small"], {"memory_bytes": 4 * MiB})  # python alone needs more
    record = run_runner(spec)
    assert record["status"] == "failed"
    assert "read exited with -9" in record["error"] and "OOM" in record["error"] and "4 MiB" in record["error"]
    assert record["emulation"]["stats"]["oom_kill"] >= 1 and record["rusage"]["read"]["exit_code"] == -9
    assert record["emulation"]["cgroups_removed"] is True


def test_read_throttle_caps_the_step_rate(workdir: Path, native_bin: str, files: dict) -> None:
    limit = 50 * MiB
    spec = make_spec(workdir, native_bin, files["small"], {"read_bytes_per_s": limit})
    record = run_runner(spec)
    assert record["status"] == "ok", record["error"]
    result = read_result(spec)
    assert result["read_bytes"] == 64 * MiB
    # the throttle enforces an upper rate: 64 MiB at 50 MiB/s cannot take less than ~1.3 s
    assert result["read_bytes"] / result["elapsed_s"] <= limit * 1.2
    assert result["elapsed_s"] >= 1.0
    emu = record["emulation"]
    assert emu["effective"]["read_bytes_per_s"] == limit
    device = block_device_of(files["small"])
    assert emu["device"]["majmin"] == Path(f"/sys/block/{device}/dev").read_text().strip()
    assert abs(emu["stats"]["io_read_bytes"] - 64 * MiB) <= 0.05 * 64 * MiB  # the reads went through the cgroup


def test_iops_throttle_is_applied(workdir: Path, native_bin: str, files: dict) -> None:
    # 1024 random 64 KiB reads (no readahead: FADV_RANDOM) at 500 IOPS: about 2 s, never much faster
    spec = make_spec(workdir, native_bin, files["small"], {"read_iops": 500}, pattern="rand", bs=64 << 10)
    record = run_runner(spec)
    assert record["status"] == "ok", record["error"]
    result, emu = read_result(spec), record["emulation"]
    assert emu["effective"]["read_iops"] == 500
    assert emu["stats"]["io_read_ios"] >= 0.9 * 1024  # the reads went through the throttled cgroup
    assert emu["stats"]["io_read_ios"] / result["elapsed_s"] <= 500 * 1.2


# ---------------------------------------------------------------------------------------------- read_ahead_kb

def test_read_ahead_is_set_for_the_run_and_restored(workdir: Path, native_bin: str, files: dict) -> None:
    wanted = other_read_ahead(files["small"])
    spec = make_spec(workdir, native_bin, files["small"], {"read_ahead_kb": wanted})
    record = run_runner(spec)
    assert record["status"] == "ok", record["error"]
    emu = record["emulation"]
    assert emu["effective"]["read_ahead_kb"] == wanted and emu["read_ahead_kb_seen"] == wanted
    with machine_lock():
        assert int(read_ahead_path(files["small"]).read_text()) == emu["read_ahead_kb_original"] != wanted
    assert emu["read_ahead_kb_restored"] == emu["read_ahead_kb_original"]


def test_read_ahead_restored_when_the_step_fails(workdir: Path, native_bin: str, files: dict) -> None:
    missing = str(Path(files["small"]).with_name("missing.bin"))
    wanted = other_read_ahead(files["small"])
    spec = make_spec(workdir, native_bin, missing, {"read_ahead_kb": wanted, "memory_bytes": 64 * MiB},
                     cache="none", device=block_device_of(files["small"]))
    record = run_runner(spec)
    assert record["status"] == "failed" and "read exited with 1" in record["error"]
    emu = record["emulation"]
    assert emu["read_ahead_kb_seen"] == wanted
    with machine_lock():
        assert int(read_ahead_path(files["small"]).read_text()) == emu["read_ahead_kb_original"]
    assert emu["cgroups_removed"] is True


def _wait_until_step_runs(spec: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the reader (not the runner forking it) is running inside the run's cgroups."""

    def readers() -> list[str]:
        if proc.poll() is not None:
            out = proc.communicate()[0].decode(errors="replace")
            pytest.fail(f"the runner exited ({proc.returncode}) before its step started: {out}")
        return [line for line in _processes_mentioning(str(spec.parent)) if "runner.steps.readfile" in line]

    # another emulated run on this machine (a colleague's test session) may hold the emulation lock a while
    pid = wait_for("the step's reader process (runner.steps.readfile) to start", readers, timeout=300)[0].split(":")[0]
    membership = Path(f"/proc/{pid}/cgroup").read_text()
    # in the run's cgroup for every emulated resource; the runner itself stays outside
    wanted = json.loads(spec.read_text())["emulate"]
    for controller, needed in (("memory", "memory_bytes" in wanted), ("blkio", "read_bytes_per_s" in wanted)):
        lines = membership.splitlines()  # v1: 'N:memory:/path'; v2 only: '0::/path'
        line = next((x for x in lines if controller in x.split(":")[1].split(",")),
                    next(x for x in lines if x.startswith("0::")))
        unified = line.startswith("0::")  # one cgroup for memory and io
        inside = f"/harness/{spec.parent.name}." in line  # harness/<run_id>.<runner pid>
        assert inside == (needed or unified), (controller, line)
    assert spec.parent.name not in Path(f"/proc/{proc.pid}/cgroup").read_text()


def test_read_ahead_restored_when_the_runner_is_sigtermed(workdir: Path, native_bin: str, files: dict) -> None:
    wanted = other_read_ahead(files["small"])
    # 64 MiB at 4 MiB/s: the step is still reading when the signal comes
    spec = make_spec(workdir, native_bin, files["small"], {"read_ahead_kb": wanted, "read_bytes_per_s": 4 * MiB,
                                                           "memory_bytes": 64 * MiB})
    proc = start_runner(spec)
    _wait_until_step_runs(spec, proc)
    assert int(read_ahead_path(files["small"]).read_text()) == wanted  # the runner holds the lock: it is ours
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    record = json.loads((spec.parent / "run.json").read_text())
    assert record["status"] == "interrupted"
    emu = record["emulation"]
    with machine_lock():
        assert int(read_ahead_path(files["small"]).read_text()) == emu["read_ahead_kb_original"] != wanted
    assert emu["cgroups_removed"] is True
    assert not any(os.path.exists(d) for d in emu["cgroups"].values())


def test_a_killed_runner_is_repaired_by_the_next_run(workdir: Path, native_bin: str, files: dict) -> None:
    wanted = other_read_ahead(files["small"])
    spec = make_spec(workdir, native_bin, files["small"], {"read_ahead_kb": wanted, "read_bytes_per_s": 4 * MiB})
    proc = start_runner(spec)
    _wait_until_step_runs(spec, proc)
    proc.kill()  # no finally-block: read_ahead_kb, the cgroup and the step stay behind
    proc.communicate(timeout=60)
    assert not (spec.parent / "DONE").exists()
    leftover = _harness_cgroups_mentioning(workdir.name)
    assert leftover and _processes_mentioning(str(spec.parent))
    # the next runner on this machine -- even one without emulation -- undoes it before its own run
    record = run_runner(make_spec(workdir, native_bin, files["small"], None, cache="none"))
    assert record["status"] == "ok", record["error"]
    with machine_lock():  # no emulated run is live now: a state file would be a leftover
        assert not os.path.exists(state.state_path())
        assert int(read_ahead_path(files["small"]).read_text()) != wanted
    assert not any(os.path.exists(d) for d in leftover)
    assert not os.path.exists(state.run_state_path(proc.pid))  # the record of its cgroups went with them
    # the orphaned step was stopped (by pid, it was in the dead run's cgroup); the fixture checks the rest
    assert _processes_mentioning(str(spec.parent)) == []


# ---------------------------------------------------------------------------------------------- refusal

def test_machine_without_controllers_refuses_and_runs_nothing(workdir: Path, native_bin: str, files: dict,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    empty = tmp_path_factory.mktemp("no-cgroups")
    spec = make_spec(workdir, native_bin, files["small"], {"memory_bytes": 64 * MiB, "read_bytes_per_s": 50 * MiB})
    record = run_runner(spec, env={"HARNESS_CGROUP_ROOT": str(empty)})
    assert record["status"] == "failed"
    assert record["error"].startswith("emulation refused")
    assert "no cgroup memory controller" in record["error"] and "blkio/io controller" in record["error"]
    assert "\n" not in record["error"]
    assert not (spec.parent / "read.stdout").exists()  # nothing ran unemulated
    assert "emulation refused" in subprocess.run(
        [sys.executable, "-m", "runner.emulation", "check", "--emulate", '{"memory_bytes": 1}'], cwd=REPO,
        env={**os.environ, "HARNESS_CGROUP_ROOT": str(empty)}, capture_output=True, text=True).stdout


@pytest.mark.skipif(not (shutil.which("setpriv") and os.path.exists("/usr/bin/python3")),
                    reason="needs setpriv and a system python3 an unprivileged user can run")
def test_unprivileged_runner_refuses_naming_what_needs_root(native_bin: str, files: dict) -> None:
    workdir = BASE / f"nobody-{uuid.uuid4().hex[:8]}"  # /tmp/pytest-of-root is private to root
    try:
        workdir.mkdir(parents=True)
        spec = make_spec(workdir, native_bin, files["small"], {"memory_bytes": 64 * MiB, "read_ahead_kb": 128},
                         cache="none")
        for path in (workdir, workdir / "runs", spec.parent.parent, spec.parent):
            path.chmod(0o777)
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                               "-m", "runner", "run", str(spec)], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        record = json.loads((spec.parent / "run.json").read_text())
        assert record["status"] == "failed", done.stdout + done.stderr
        assert record["error"].startswith("emulation refused") and "\n" not in record["error"]
        assert "cannot create cgroups in" in record["error"] and "read_ahead_kb (needs root)" in record["error"]
        assert not (spec.parent / "read.stdout").exists()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
