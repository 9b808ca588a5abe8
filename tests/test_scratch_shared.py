"""Two targets of one machine given one ``--scratch``: before the fix both created ``data.bin`` there at once and one
failed with "data.bin.partial: No such file or directory" (and had it not, each target's cold runs would have dropped
the pages the other's warm runs measured, and the first to finish would have removed the file under the other).
Now preflight refuses it in one line naming both targets and the directory, before anything is made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, private_base, run_cli

EXP = """\
name: shared-scratch
files:
  data: {create: 64M}
cache: cold
validity: off
steps:
  - read: {file: data, bs: 1M}
"""


def _two_local_targets(tmp_path: Path) -> Path:
    """Two local-type targets of this machine, each with a workdir (and so a board lease) of its own."""
    targets = tmp_path / "targets"
    targets.mkdir()
    for name in ("bench-a", "bench-b"):
        (targets / f"{name}.yaml").write_text(f"platform: linux\ntransport: local\n"
                                              f"workdir: {private_base() / ('work-' + name)}\nblock_device: auto\n")
    return targets


@pytest.mark.slow
@pytest.mark.fault
def test_two_targets_of_one_machine_sharing_a_scratch_are_refused_in_one_line(tmp_path: Path) -> None:
    targets = _two_local_targets(tmp_path)
    exp = tmp_path / "e.yaml"
    exp.write_text(EXP)
    scratch = private_base() / f"scratch-shared-{tmp_path.name}"
    where = ["--targets-dir", str(targets), "-t", "bench-a", "-t", "bench-b"]
    done = run_cli("run", str(exp), *where, "--scratch", str(scratch), "--results", str(tmp_path / "refused"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: targets bench-a and bench-b share the scratch directory {scratch} on one machine: "
                     "both would create, cache-drop and remove data.bin there at once; give each its own (without "
                     "--scratch each uses its workdir) or run them as two campaigns"], done.stderr
    # refused before a set or a file exists
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    assert not list(scratch.glob("data.bin*")) if scratch.exists() else True
    # the same two targets, each in its own scratch (its workdir's), measure side by side as before
    done = run_cli("run", str(exp), *where, "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result_set,) = (tmp_path / "results").iterdir()
    manifest = json.loads((result_set / "manifest.json").read_text())
    assert sorted((run["target"], run["status"]) for run in manifest["runs"]) == [("bench-a", "ok"), ("bench-b", "ok")]


def test_the_runner_names_one_directory_the_same_by_any_path_and_two_apart(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")

    def identity(path: Path) -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "runner", "dirid", str(path)], cwd=REPO, capture_output=True,
                              text=True, check=True)
        found: dict[str, object] = json.loads(done.stdout)
        return {key: found[key] for key in ("machine", "dev", "ino", "below")}

    # the scratch directory is made later: the nearest existing one and the rest of the path identify it
    assert identity(tmp_path / "real" / "scratch") == identity(tmp_path / "link" / "scratch")
    assert identity(tmp_path / "real" / "scratch") != identity(tmp_path / "other" / "scratch")
    assert identity(tmp_path / "real") != identity(tmp_path / "real" / "scratch")
