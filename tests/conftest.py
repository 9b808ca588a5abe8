"""Shared test helpers: the repo, the shared fixtures, and a way to run the real CLI."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd import SshServer, sshd_unavailable

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 600, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """Run ``harness ARGS`` as a user would, in a subprocess."""
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})}, check=False)


FILE_BYTES = 256 << 20
SMALL = f"""\
name: e2e
files:
  data: {{create: {FILE_BYTES}}}
cache: both
rounds: 2
collect:
  blockstat: {{period_ms: 10}}
  threads: {{period_ms: 5}}
steps:
  - fio:
      file: data
      jobs: [randread-64k-qd1, randread-64k-qd4]
      runtime_s: 1
  - read: {{file: data, pattern: seq}}
"""


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """Hold the emulation lock: no emulated run (ours or a colleague's) can change read_ahead_kb meanwhile."""
    from runner import emulate

    fd = emulate._lock(blocking=True)
    try:
        yield
    finally:
        emulate._unlock(fd)


def private_targets_dir() -> Path:
    """A targets dir whose `local` has its own workdir, so its board lease is this test run's alone
    (campaigns elsewhere on the machine never make these tests wait)."""
    base = Path("/var/tmp/harness-tests") / f"targets-{os.getpid()}"
    if not (base / "local.yaml").exists():
        base.mkdir(parents=True, exist_ok=True)
        text = (REPO / "targets" / "local.yaml").read_text()
        workdir = base.parent / f"work-{os.getpid()}"
        (base / "local.yaml").write_text(text.replace("workdir: /var/tmp/harness", f"workdir: {workdir}"))
    return base


def run_campaign(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``harness run ARGS`` on the private local target."""
    return run_cli("run", *args, "--targets-dir", str(private_targets_dir()), **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def small_campaign(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One small quickstart-shaped campaign on this machine, shared by the tests that read its set."""
    base = tmp_path_factory.mktemp("e2e")
    exp = base / "e2e.yaml"
    exp.write_text(SMALL)
    # per process: two test sessions at once must not share (and drop or prefetch) each other's data file
    scratch = Path("/var/tmp/harness-tests") / f"{base.name}-{os.getpid()}"
    done = run_campaign(str(exp), "--results", str(base / "results"), "--scratch", str(scratch))
    sets = list((base / "results").iterdir())
    return {"done": done, "sets": sets, "results": base / "results", "scratch": scratch}


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
