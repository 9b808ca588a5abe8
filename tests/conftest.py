"""Shared test helpers: the repo, the shared fixtures, and a way to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def small_campaign(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One small quickstart-shaped campaign on this machine, shared by the tests that read its set."""
    base = tmp_path_factory.mktemp("e2e")
    exp = base / "e2e.yaml"
    exp.write_text(SMALL)
    scratch = Path("/var/tmp/harness-tests") / base.name
    done = run_cli("run", str(exp), "--results", str(base / "results"), "--scratch", str(scratch))
    sets = list((base / "results").iterdir())
    return {"done": done, "sets": sets, "results": base / "results", "scratch": scratch}
