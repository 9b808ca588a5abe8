"""Config errors: one line naming file, line and field; exit code 2; no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.boards.inventory import load_target
from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.errors import ConfigError
from tests.helpers import run_cli

GOOD = """\
name: cfg
files:
  data: {create: 1M}
matrix:
  qd: [1, 4]
collect: [blockstat]
steps:
  - fio:
      file: data
      jobs:
        - {name: custom, iodepth: "{qd}", bs: 64k}
      runtime_s: 1
"""


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build_plan(load_resolved(path))
    return info.value


def test_good_experiment_loads(tmp_path: Path) -> None:
    plan = build_plan(load_resolved(write(tmp_path, GOOD)))
    assert [r.params["qd"] for r in plan.runs] == [1, 4]
    # "{qd}" kept the matrix value's type
    assert plan.runs[1].cell.config.jobs[0].iodepth == 4


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    (GOOD.replace("collect: [blockstat]", "collect: [blockstat]\ncolect: [threads]"), 7, "colect", "unknown key"),
    (GOOD.replace("runtime_s: 1", "runtime_s: 1\n      runtim: 2"), 13, "steps[0].fio.runtim", "unknown key"),
    (GOOD.replace("bs: 64k}", "bs: 64k, depth: 3}"), 11, "steps[0].fio.jobs[0].depth", "unknown key"),
    (GOOD.replace("  - fio:", "  - fioo:"), 8, "steps[0].fioo", "unknown step 'fioo'"),
    (GOOD.replace("[blockstat]", "[blockstat, thread]"), 6, "collect.thread", "unknown collector 'thread'"),
    (GOOD.replace('"{qd}"', '"{depth}"'), 11, "steps[0].fio.jobs[0].iodepth", "not a matrix key"),
    (GOOD.replace("qd: [1, 4]", "qd: []"), 5, "matrix.qd", "zero runs"),
    (GOOD.replace("file: data", "file: model"), 9, "steps[0].fio.file", "not in files"),
    (GOOD.replace("runtime_s: 1", "runtime_s: fast"), 12, "steps[0].fio.runtime_s", "valid number"),
    (GOOD.replace("{create: 1M}", "{create: lots}"), 3, "files.data.create", "size like"),
    (GOOD.replace("name: cfg", "name: cfg\nrounds: 0"), 2, "rounds", "greater than or equal to 1"),
    (GOOD.replace("cache: ", "") + "cache: tepid\n", 13, "cache", "'cold', 'warm', 'both' or 'none'"),
])
def test_error_names_line_and_field(tmp_path: Path, text: str, line: int, field: str, words: str) -> None:
    path = write(tmp_path, text)
    error = error_of(path)
    assert (error.line, error.field) == (line, field), str(error)
    assert words in str(error)
    assert str(error).startswith(f"{path}:{line}: {field}: ")


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    error = error_of(write(tmp_path, GOOD.replace("  qd: [1, 4]", "  qd: [1, 4")))
    assert error.line is not None and 5 <= error.line <= 7
    assert "malformed YAML" in str(error)


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    error = error_of(write(tmp_path, GOOD + "matrix:\n  qd: [2]\n"))
    assert (error.line, "duplicate key 'matrix'") == (13, str(error).split(": ", 2)[-1])


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    error = error_of(tmp_path / "nope.yaml")
    assert "file not found" in str(error)


def test_target_errors_name_line(tmp_path: Path) -> None:
    path = write(tmp_path, "platform: linux\ntransport: local\nworkdirr: /tmp\n", "board.yaml")
    with pytest.raises(ConfigError) as info:
        load_target(path)
    assert info.value.line == 3 and "unknown key 'workdirr'" in str(info.value)
    path = write(tmp_path, "platform: amiga\n", "old.yaml")
    with pytest.raises(ConfigError) as info:
        load_target(path)
    assert info.value.line == 1 and "unknown platform 'amiga'" in str(info.value)


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  - fio:", "  - fioo:"))
    for command in (["plan"], ["run", "--results", str(tmp_path / "results")]):
        done = run_cli(*command, str(path))
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr
        assert f"{path}:8: steps[0].fioo: unknown step 'fioo'" in lines[0]
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_cli_debug_shows_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  - fio:", "  - fioo:"))
    done = run_cli("--debug", "plan", str(path))
    assert done.returncode != 0 and "Traceback" in done.stderr
