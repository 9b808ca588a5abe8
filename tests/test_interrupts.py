"""A stop signal is never lost, whatever phase the campaign is in.

The controller is paused at a named phase (HARNESS_PAUSE_AT, harness/campaign/stopping.py) and signalled there: no
sleeps that hope to land in a phase. In every phase: the exit code is 128 + the signal, finished runs are kept, the
manifest is valid JSON, no process of the campaign is left, and --resume completes what is missing.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from harness.results.loader import load_result_set
from tests.helpers import Controller, live_processes_mentioning, private_base, run_campaign, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.fault]

def statuses(path: Path) -> list[str]:
    return [r["status"] for r in json.loads((path / "manifest.json").read_text())["runs"]]


def assert_nothing_left(ctl: Controller, path: Path) -> None:
    set_id = json.loads((path / "manifest.json").read_text())["set_id"]
    assert live_processes_mentioning(set_id) == []
    assert not list(ctl.scratch.glob("*.bin")), "the created data file was left behind"


def resume(ctl: Controller, path: Path) -> list[str]:
    done = run_campaign("--resume", path.name, "--results", str(ctl.results), "--scratch", str(ctl.scratch))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(ctl.results.iterdir())
    assert not final.name.endswith(".incomplete") and load_result_set(final).complete
    return statuses(final)


def test_before_the_set_exists_nothing_is_written(tmp_path: Path) -> None:
    ctl = Controller(tmp_path, "preflight")
    code, _, err = ctl.stop(signal.SIGINT)
    assert code == 130, err
    assert not ctl.results.exists() or not any(ctl.results.iterdir())
    assert "interrupted (SIGINT)" in err


def test_while_a_runner_runs_it_is_stopped_and_the_set_resumes(tmp_path: Path) -> None:
    ctl = Controller(tmp_path, "run", runtime_s=30)  # the runner is busy for 30 s: the stop lands mid-run
    code, out, err = ctl.stop(signal.SIGINT)
    assert code == 130, err
    path = ctl.result_set()
    assert path.name.endswith(".incomplete")
    assert statuses(path) == ["interrupted", "pending"]
    assert "interrupted (SIGINT): finished runs are kept; the set is marked incomplete" in out
    assert_nothing_left(ctl, path)
    assert resume(ctl, path) == ["ok", "ok"]


def test_during_a_pull_the_run_is_recorded_first(tmp_path: Path) -> None:
    ctl = Controller(tmp_path, "pull")
    code, _, err = ctl.stop(signal.SIGINT)
    assert code == 130, err
    path = ctl.result_set()
    # the run had finished: it is pulled, verified and recorded ok before the stop takes effect
    assert statuses(path) == ["ok", "pending"]
    run_id = json.loads((path / "manifest.json").read_text())["runs"][0]["run_id"]
    assert run_id in set(load_result_set(path).table("fio")["run_id"])
    assert_nothing_left(ctl, path)
    assert resume(ctl, path) == ["ok", "ok"]


def test_between_runs_the_next_run_does_not_start(tmp_path: Path) -> None:
    ctl = Controller(tmp_path, "between-runs")
    code, _, err = ctl.stop(signal.SIGINT)
    assert code == 130, err
    path = ctl.result_set()
    assert statuses(path) == ["ok", "pending"]
    assert_nothing_left(ctl, path)


def test_while_tables_are_written_they_are_finished(tmp_path: Path) -> None:
    ctl = Controller(tmp_path, "tables")
    code, out, err = ctl.stop(signal.SIGINT)
    assert code == 130, err
    path = ctl.result_set()
    # every run had finished: the set is complete and its tables are whole; the figures are left for later
    assert not path.name.endswith(".incomplete") and statuses(path) == ["ok", "ok"]
    assert len(load_result_set(path).table("runs")) == 2
    assert not list((path / "figures").glob("*.png")) if (path / "figures").exists() else True
    assert f"harness report {path}" in " ".join(out.split())


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_like_ctrl_c(tmp_path: Path, signum: int, code: int) -> None:
    """What CI runners and systemd send (SIGTERM) and a closed terminal (SIGHUP)."""
    ctl = Controller(tmp_path, "run", runtime_s=30)
    got, out, err = ctl.stop(signum)
    assert got == code, err
    path = ctl.result_set()
    assert statuses(path) == ["interrupted", "pending"]
    assert f"interrupted ({signal.Signals(signum).name})" in out
    assert_nothing_left(ctl, path)


def test_sigint_reaches_a_controller_started_as_a_background_job(tmp_path: Path) -> None:
    """A non-interactive shell starts `harness run ... &` with SIGINT ignored; Python then never raises
    KeyboardInterrupt, and the campaign used to run to its end and exit 0 (seen as a flaky interrupt test)."""
    ctl = Controller(tmp_path, "run", runtime_s=30, ignore_sigint=True)
    code, _, err = ctl.stop(signal.SIGINT)
    assert code == 130, err
    assert statuses(ctl.result_set()) == ["interrupted", "pending"]


def two_local_targets(tmp_path: Path) -> Path:
    """Targets ``a`` and ``b``: this machine twice, each with its own workdir (so its own board lease)."""
    targets = tmp_path / "targets"
    targets.mkdir()
    for name in ("a", "b"):
        workdir = private_base() / f"work-{tmp_path.name}-{name}"
        (targets / f"{name}.yaml").write_text(f"platform: linux\ntransport: local\nworkdir: {workdir}\n")
    return targets


@pytest.mark.parametrize("targets", [1, 2])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_during_a_run_is_the_same_for_one_and_for_two_targets(tmp_path: Path, targets: int, signum: int,
                                                                     code: int) -> None:
    """Every target runs in a worker thread, a single one too: the stop is one request every worker acts on.
    Two targets used to stay paused at the run checkpoint forever (the pause was a no-op there)."""
    if targets == 1:
        ctl = Controller(tmp_path, "run", runtime_s=30)
    else:  # no common --scratch: two targets on one machine would create the same data file there at once
        ctl = Controller(tmp_path, "run", runtime_s=30, targets_dir=two_local_targets(tmp_path),
                         extra_yaml="targets: [a, b]\n", own_scratch=False)
    wait_for("every target's runner to run", lambda: sum("paused at run" in x for x in ctl.lines) >= targets or None)
    got, out, err = ctl.stop(signum)
    assert got == code, err
    path = ctl.result_set()
    assert path.name.endswith(".incomplete")
    assert statuses(path) == ["interrupted", "pending"] * targets  # each target's runner stopped, its run recorded
    assert f"interrupted ({signal.Signals(signum).name}): finished runs are kept; the set is marked incomplete" in out
    assert_nothing_left(ctl, path)
    assert not list(private_base().glob(f"work-{tmp_path.name}-*/**/*.bin")), "a created data file was left"
