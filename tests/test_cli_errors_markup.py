"""An error line reaches the user as the harness wrote it: brackets in it are text, not Rich markup."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import cli_in_process


def test_brackets_in_an_error_line_are_printed_as_written(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("name: x\nsteps:\n  - {fio: {file: data}, llama-bench: {}}\n")
    done = cli_in_process("plan", str(tmp_path / "x.yaml"))
    assert done.returncode == 2
    assert "(optionally with over: [matrix keys] and cache:)" in done.stderr, done.stderr
