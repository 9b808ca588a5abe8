"""Fixtures shared by the test modules. Helpers (paths, running the CLI, waiting) are in ``tests/helpers.py``."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    PAPER,
    QUICK_TEST,
    SMALL,
    STARTED,
    build_native_tools,
    cgroups_missing,
    private_base,
    run_campaign,
    trimmed_streaming_experiment,
)
from tests.sshd import SshServer, sshd_unavailable


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests not marked slow run with QUICK_TEST set: starting a campaign, a build, sshd, adb or jtop then fails
    them (helpers.slow_only), so ``-m "not slow"`` really is the quick suite."""
    if item.get_closest_marker("slow") is None:
        os.environ[QUICK_TEST] = item.nodeid
    else:
        os.environ.pop(QUICK_TEST, None)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    os.environ.pop(QUICK_TEST, None)
    while STARTED:  # controllers a failed test left paused or running
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session", autouse=True)
def _private_dirs() -> Iterator[None]:
    """Remove this test process's scratch files and workdirs under /var/tmp when the session ends."""
    yield
    shutil.rmtree(private_base(), ignore_errors=True)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file of a tree and its content hash."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_unchanged(before: dict[Path, dict[str, str]]) -> None:
    """Each shared result set still holds exactly the files, with the contents, it had when it was made."""
    for one, files in before.items():
        after = _snapshot(one)
        changed = sorted(name for name in files.keys() | after.keys() if files.get(name) != after.get(name))
        assert not changed, f"a test changed the shared result set {one.name}: {', '.join(changed)}"


@pytest.fixture(scope="session")
def native() -> Path:
    """runner/native built (``make``: a no-op when it is) and the directory of its binaries, once per session."""
    return build_native_tools()


@pytest.fixture(scope="session")
def small_campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One small quickstart-shaped campaign on this machine, shared by the tests that read its set. No test may
    change the set (file modes do not stop root): it is compared with its first state when the session ends.
    A test that changes a set works on a copy (``copy_of_set``)."""
    base = tmp_path_factory.mktemp("e2e")
    exp = base / "e2e.yaml"
    exp.write_text(SMALL)
    # per process: two test sessions at once must not share (and drop or prefetch) each other's data file
    scratch = private_base() / f"scratch-{base.name}"
    done = run_campaign(str(exp), "--results", str(base / "results"), "--scratch", str(scratch))
    sets = list((base / "results").iterdir())
    before = {one: _snapshot(one) for one in sets}
    yield {"done": done, "sets": sets, "results": base / "results", "scratch": scratch}
    _assert_unchanged(before)


@pytest.fixture(scope="session")
def streaming_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The result set of a trimmed experiments/paper/emulated-orin.yaml (``trimmed_streaming_experiment``): llama-bench,
    llama-server and the fio ladder on a synthetic MoE under a memory budget, with block stats, thread states and
    vmstat, so every figure group has data. Read-only and checked like ``small_campaign``; skips where the machine
    cannot emulate a board (cgroups)."""
    reason = cgroups_missing()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("streaming")
    exp = base / "streaming.yaml"
    exp.write_text(trimmed_streaming_experiment((PAPER / "emulated-orin.yaml").read_text()))
    done = run_campaign(str(exp), "--results", str(base / "results"), "--scratch",
                        str(private_base() / f"scratch-{base.name}"), timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    (one,) = (base / "results").iterdir()
    before = {one: _snapshot(one)}
    yield one
    _assert_unchanged(before)


@pytest.fixture
def copy_of_set(small_campaign: dict, tmp_path: Path) -> Path:
    """A private, writable copy of the small campaign's result set, for tests that change a set."""
    [one] = small_campaign["sets"]
    copy = tmp_path / one.name
    shutil.copytree(one, copy)
    return copy


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A real OpenSSH server on 127.0.0.1 (free port, temporary keys), one per test module; tests
    that need it skip with the reason when sshd cannot run here."""
    reason = sshd_unavailable()
    if reason:
        pytest.skip(reason)
    server = SshServer(tmp_path_factory.mktemp("sshd")).start()
    try:
        yield server
    finally:
        server.stop()


