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


@pytest.fixture
def scratch_dir() -> Path:
    """A temp dir on a real block device (not tmpfs), so cold-cache measurements mean something."""
    import tempfile

    base = Path("/var/tmp/harness-tests")
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        yield Path(tmp)
