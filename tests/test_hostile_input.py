"""Hostile but fair input: nothing outside the harness's own files is created or deleted, nothing runs that was not
asked for, no YAML can exhaust the controller. Each case is one line naming file and line, exit 2."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.yamlsrc import MAX_YAML_DEPTH
from runner import util
from tests.helpers import REPO, cli_in_process, one_line_exit_2, private_base, run_campaign

pytestmark = pytest.mark.fault


# ------------------------------------------------------------------------------------------ file names
def test_a_file_name_with_a_path_is_refused_at_plan_time(tmp_path: Path) -> None:
    exp = tmp_path / "trav.yaml"
    exp.write_text('name: trav\nfiles:\n  data: {create: 1M}\n  "../../../srv/lab/victim": {create: 1M}\n'
                   "steps:\n  - read: {file: data}\n")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert line.startswith(f"error: {exp}:4: ") and "not a plain name" in line


@pytest.mark.slow
def test_a_traversing_name_creates_and_deletes_nothing(tmp_path: Path) -> None:
    """The reproduction: the victim beside scratch survives and no set is made."""
    scratch = private_base() / f"scratch-{tmp_path.name}"
    victim = scratch.parent / f"victim-{tmp_path.name}.bin"
    victim.write_bytes(b"precious")
    exp = tmp_path / "trav.yaml"
    exp.write_text(f'name: trav\nfiles:\n  data: {{create: 1M}}\n  "../{victim.stem}": {{create: 1M}}\n'
                   "steps:\n  - read: {file: data}\n")
    one_line_exit_2(run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch", str(scratch)))
    assert victim.read_bytes() == b"precious"
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.slow
def test_a_file_already_in_scratch_is_neither_overwritten_nor_deleted(tmp_path: Path) -> None:
    scratch = private_base() / f"scratch-{tmp_path.name}"
    scratch.mkdir(parents=True)
    (scratch / "data.bin").write_bytes(b"someone else's")
    exp = tmp_path / "e.yaml"
    exp.write_text("name: mine\nfiles:\n  data: {create: 1M}\nsteps:\n  - read: {file: data}\n")
    done = run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch", str(scratch))
    line = one_line_exit_2(done)
    assert "data.bin exists and the harness did not create it" in line
    assert (scratch / "data.bin").read_bytes() == b"someone else's"


def test_the_runner_deletes_only_its_own_files_inside_scratch(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    util.make_data_file(str(scratch / "a.bin"), 4096, owner="set-1")
    outside = tmp_path / "outside.bin"
    util.make_data_file(str(outside), 4096, owner="set-1")
    with pytest.raises(util.NotOurs, match="outside the scratch directory"):
        util.remove_data_file(str(scratch / ".." / "outside.bin"), "set-1", str(scratch))
    with pytest.raises(util.NotOurs, match="not created by this campaign"):
        util.remove_data_file(str(scratch / "a.bin"), "set-2", str(scratch))
    (scratch / "link.bin").symlink_to(outside)
    with pytest.raises(util.NotOurs, match="outside the scratch directory"):
        util.remove_data_file(str(scratch / "link.bin"), "set-1", str(scratch))
    assert util.remove_data_file(str(scratch / "a.bin"), "set-1", str(scratch))
    assert not (scratch / "a.bin").exists() and outside.exists()


# ------------------------------------------------------------------------------------------ fio job files
INJECTION = """\
name: inj
files:
  data: {create: 1M}
matrix:
  bs: ["64k\\nexec_prerun=touch /tmp/pwn"]
steps:
  - fio:
      file: data
      jobs: [{name: custom, bs: "{bs}"}]
"""


def test_a_template_value_cannot_add_fio_options(tmp_path: Path) -> None:
    exp = tmp_path / "inj.yaml"
    exp.write_text(INJECTION)
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert "steps[0].fio.jobs[0].bs" in line and "cannot be an fio option value" in line


@pytest.mark.parametrize("options", ['{exec_prerun: "touch /tmp/pwn"}', '{write_lat_log: /etc/lat}',
                                     "{readonly: 0}", "{filename: /etc/passwd}", "{rw: write}"])
def test_fio_options_that_run_or_write_are_refused(tmp_path: Path, options: str) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: ex\nfiles:\n  data: {{create: 1M}}\nsteps:\n  - fio:\n      file: data\n"
                   f"      jobs: [{{name: custom, options: {options}}}]\n")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert f"{exp}:7: steps[0].fio.jobs[0].options." in line and "fio: {allow_exec: true}" in line


def test_the_runner_never_writes_a_line_break_into_a_job_file() -> None:
    from runner.steps.base import StepFailed
    from runner.steps.fio import fio_jobfile

    with pytest.raises(StepFailed, match="cannot be written"):
        fio_jobfile({"file": "/f", "jobs": [{"name": "j", "bs": "64k\nexec_prerun=id"}]})
    with pytest.raises(StepFailed, match="cannot be written"):
        fio_jobfile({"file": "/f", "jobs": [{"name": "j]\n[k", "bs": "64k"}]})


@pytest.mark.slow
def test_allow_exec_runs_them_and_the_manifest_says_so(tmp_path: Path) -> None:
    marker = tmp_path / "prerun-ran"
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: ex\nfio: {{allow_exec: true}}\nfiles:\n  data: {{create: 4M}}\nsteps:\n  - fio:\n"
                   f"      file: data\n      runtime_s: 0.5\n"
                   f"      jobs: [{{name: custom, options: {{exec_prerun: 'touch {marker}'}}}}]\n")
    done = run_campaign(str(exp), "--results", str(tmp_path / "r"), "--scratch",
                        str(private_base() / f"scratch-{tmp_path.name}"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert marker.exists()
    (path,) = list((tmp_path / "r").iterdir())
    assert json.loads((path / "manifest.json").read_text())["fio_policy"] == {"allow_exec": True}


# ------------------------------------------------------------------------------------------ YAML bounds
def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\nname: bomb\nsteps:\n  - read: {file: data}\n"


def test_an_alias_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    exp = tmp_path / "bomb.yaml"
    exp.write_text(_alias_bomb())
    assert exp.stat().st_size < 4096

    def limit_memory() -> None:  # 1 GiB of address space: the old line map grew past 12 GB
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run([sys.executable, "-m", "harness", "plan", str(exp)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, preexec_fn=limit_memory, check=False)
    line = one_line_exit_2(done)
    assert "expands to 387420489 values through its aliases" in line or "through its aliases" in line


def test_anchors_in_moderation_still_work(tmp_path: Path) -> None:
    exp = tmp_path / "anchors.yaml"
    exp.write_text("name: anchors\nfiles:\n  data: {create: 1M}\nx-job: &job {file: data, runtime_s: 1}\n"
                   "steps:\n  - fio: *job\n  - fio: *job\n")
    done = cli_in_process("plan", str(exp))
    assert done.returncode == 2 and "x-job" in done.stderr  # unknown top-level key: the anchors themselves parse
    exp.write_text("name: anchors\nfiles:\n  data: {create: 1M}\nmatrix:\n  qd: &qd [1, 2]\n"
                   "steps:\n  - fio: {file: data, runtime_s: 1, jobs: [randread-64k-qd1]}\n")
    assert cli_in_process("plan", str(exp)).returncode == 0


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    exp = tmp_path / "big.yaml"
    exp.write_text("name: big\n" + "# padding\n" * 120_000)
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert "HARNESS_MAX_YAML_BYTES" in line
    small = tmp_path / "small.yaml"
    small.write_text("name: small\nfiles:\n  data: {create: 1M}\nsteps:\n  - read: {file: data}\n")
    assert cli_in_process("plan", str(small)).returncode == 0
    line = one_line_exit_2(cli_in_process("plan", str(small), env={"HARNESS_MAX_YAML_BYTES": "20"}))
    assert "more than the 20 an experiment or target file may have" in line


def test_a_huge_matrix_says_how_many_cells_were_asked_for(tmp_path: Path) -> None:
    exp = tmp_path / "m.yaml"
    values = ", ".join(str(i) for i in range(200))
    exp.write_text(f"name: m\nfiles:\n  data: {{create: 1M}}\nmatrix:\n  a: [{values}]\n  b: [{values}]\n"
                   "steps:\n  - read: {file: data}\n")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert "asks for 40000 cells" in line and ":4: matrix" in line


@pytest.mark.parametrize("shape", ["flow", "block"])
def test_yaml_nested_past_the_bound_is_one_line_with_its_line(tmp_path: Path, shape: str) -> None:
    """600 levels of '[' (or 510 of nested keys): PyYAML composes recursively, so this was a RecursionError
    traceback. It is refused at the level past the bound, with that level's line."""
    exp = tmp_path / "deep.yaml"
    if shape == "flow":
        exp.write_text("name: deep\nx: " + "[" * 600 + "]" * 600 + "\nsteps:\n  - read: {file: data}\n")
        line_no = 2
    else:
        exp.write_text("name: deep\n" + "".join("  " * i + f"k{i}:\n" for i in range(510)) + "  " * 510 + "v: 1\n")
        line_no = 1 + MAX_YAML_DEPTH  # the key whose value is the first collection past the bound
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert line == (f"error: {exp}:{line_no}: collections nest more than {MAX_YAML_DEPTH} levels deep "
                    "(an experiment needs about eight)")


def test_nesting_within_the_bound_still_parses(tmp_path: Path) -> None:
    exp = tmp_path / "nested.yaml"
    depth = MAX_YAML_DEPTH - 2  # the document's mapping and x's list are two levels
    exp.write_text("name: nested\nfiles:\n  data: {create: 1M}\nx: " + "[" * depth + "]" * depth +
                   "\nsteps:\n  - read: {file: data}\n")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert "unknown key 'x'" in line and "levels deep" not in line  # parsed whole; only the key is wrong


def test_a_nul_byte_is_one_line_with_file_line_and_column(tmp_path: Path) -> None:
    exp = tmp_path / "nul.yaml"
    exp.write_bytes(b"name: nul\nfiles:\n  data: {create: 1M}\nsteps:\n  - read: {file: da\x00ta}\n")
    line = one_line_exit_2(cli_in_process("plan", str(exp)))
    assert line == (f"error: {exp}:5: a NUL byte at column 20: a YAML file is text without control characters")
