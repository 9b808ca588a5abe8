"""Perturbed runs are flagged, not averaged in (issue 13): the runner measures who else had the machine during the
step (runner/interference.py), the controller holds that to the experiment's ``validity:`` limits
(harness/results/validity.py), and every summary, figure, compare and gate selects runs through one helper
(harness/results/selection.py) that leaves perturbed runs out.

The quick tests here are pure, or run the runner alone on a small read step: once with two busy processes this test
starts at high priority (and stops by pid), once without. The campaign with a perturbed run, its retry and its
report is in tests/test_validity_campaign.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.config.experiment import load_experiment
from harness.config.validity import ValidityLimits
from harness.errors import ConfigError
from harness.figures.report import perturbed_lines
from harness.results.ingest import _frame, run_row
from harness.results.loader import ResultSet
from harness.results.metrics import METRICS
from harness.results.samples import perturbed_note, samples
from harness.results.selection import including_perturbed, perturbed_runs, usable_runs
from harness.results.validity import MEASURES, judge
from runner import interference, sysroot
from tests.helpers import REPO

LIMITS = ValidityLimits()  # the defaults: runqueue 5 %, foreign CPU 10 %, steal 5 %, no throttling


def record(**values: Any) -> dict[str, Any]:
    """An interference record of a quiet 2-CPU machine over a 2 s step, with ``values`` changed."""
    return {"wall_s": 2.0, "ncpu": 2, "foreign_cpu_pct": 1.0, "steal_pct": 0.0, "runqueue_pct": 0.5,
            "resolution_pct": 1.0, "throttled": None, **values}


# ----------------------------------------------------------------------------------------------- the limits
def test_a_quiet_run_is_not_perturbed() -> None:
    verdict = judge(record(), LIMITS)
    assert (verdict.perturbed, verdict.reason) == (False, None)
    assert verdict.fields() == {"perturbed": False, "perturbed_reason": None}


def test_another_process_on_a_core_is_named_with_its_share() -> None:
    # issue 13's run: llama.cpp's own threads on 17.6 s of 2 x 17.7 s, the rest someone else's
    verdict = judge(record(foreign_cpu_pct=43.0), LIMITS)
    assert verdict.perturbed
    assert verdict.reason == "foreign CPU 43 % > 10 %: other processes held 0.9 of 2 CPUs"


def test_every_limit_passed_is_in_the_one_line_reason() -> None:
    verdict = judge(record(foreign_cpu_pct=50.0, runqueue_pct=34.0, steal_pct=12.0, throttled=True,
                           cpu_cap_drop_khz=500000), LIMITS)
    assert verdict.reason is not None and "\n" not in verdict.reason
    assert verdict.reason.split("; ") == [
        "foreign CPU 50 % > 10 %: other processes held 1.0 of 2 CPUs",
        "runqueue 34 % > 5 %: the step's threads waited for a CPU",
        "steal 12 % > 5 %: the hypervisor ran other guests",
        "throttled: a CPU frequency cap fell by 500 MHz during the step"]


def test_a_jiffy_counter_is_not_trusted_past_its_resolution() -> None:
    # 14 % over a 0.25 s step (8 % resolution) may be 6 %: not flagged; the same over a 2 s step is
    assert not judge(record(foreign_cpu_pct=14.0, steal_pct=12.0, resolution_pct=8.0), LIMITS).perturbed
    assert judge(record(foreign_cpu_pct=14.0, resolution_pct=1.0), LIMITS).perturbed
    # the runqueue share comes from nanosecond counters: no slack
    assert judge(record(runqueue_pct=5.5, resolution_pct=8.0), LIMITS).perturbed


def test_limits_off_or_no_record_mark_nothing() -> None:
    busy = record(foreign_cpu_pct=90.0, runqueue_pct=60.0, steal_pct=30.0, throttled=True, throttle_events=3)
    assert not judge(busy, None).perturbed  # validity: off
    assert not judge(None, LIMITS).perturbed  # a contract 1.0 run.json: nothing measured, nothing to judge
    assert not judge(busy, ValidityLimits(max_runqueue_pct=None, max_foreign_cpu_pct=None, max_steal_pct=None,
                                          allow_throttling=True)).perturbed
    only_steal = judge(busy, ValidityLimits(max_runqueue_pct=None, max_foreign_cpu_pct=None, allow_throttling=True))
    assert only_steal.reason == "steal 30 % > 5 %: the hypervisor ran other guests"
    assert judge(record(runqueue_pct=None, foreign_cpu_pct=None), LIMITS).perturbed is False  # not measurable here


# ----------------------------------------------------------------------------------------------- the YAML
def _experiment(tmp_path: Path, line: str) -> Any:
    path = tmp_path / "x.yaml"
    path.write_text(f"name: x\nsteps:\n  - read: {{file: data}}\n{line}\n")
    return load_experiment(path).experiment.validity


def test_validity_defaults_off_and_partial_limits(tmp_path: Path) -> None:
    assert _experiment(tmp_path, "") == ValidityLimits()
    assert _experiment(tmp_path, "validity: off") is None
    assert _experiment(tmp_path, "validity: null") is None
    assert _experiment(tmp_path, "validity: on") == ValidityLimits()
    limits = _experiment(tmp_path, "validity: {max_foreign_cpu_pct: 25, max_runqueue_pct: null}")
    assert (limits.max_foreign_cpu_pct, limits.max_runqueue_pct, limits.max_steal_pct) == (25.0, None, 5.0)


@pytest.mark.parametrize(("line", "message"), [
    ("validity: {max_foreign: 10}", "x.yaml:4: validity.max_foreign: unknown key 'max_foreign' (expected one of: "
                                    "max_runqueue_pct, max_foreign_cpu_pct, max_steal_pct, allow_throttling, "
                                    "min_decode_tokens, min_window_s, exclude_outliers)"),
    ("validity:\n  max_runqueue_pct: 120", "x.yaml:5: validity.max_runqueue_pct: Input should be less than or "
                                           "equal to 100 (got 120)"),
    ("validity: {max_steal_pct: lots}", "x.yaml:4: validity.max_steal_pct: "),
])
def test_a_bad_validity_key_is_one_line_with_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _experiment(tmp_path, line)
    assert str(caught.value).startswith(str(tmp_path / message)), str(caught.value)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------ what the runner computes
def test_foreign_cpu_is_the_machine_minus_the_runs_own_tree() -> None:
    hz = interference.CLK_TCK
    cpu0 = {"user": 0, "nice": 0, "system": 0, "idle": 0, "iowait": 0, "irq": 0, "softirq": 0, "steal": 0, "ncpu": 2}
    # 2 s on 2 CPUs: 3 s busy (user + system), 0.2 s irq, 0.2 s steal; the run's own tree used 1 s
    cpu1 = dict(cpu0, user=int(2.5 * hz), system=int(0.5 * hz), idle=int(0.6 * hz), irq=int(0.2 * hz),
                steal=int(0.2 * hz))
    out = interference.measure(cpu0, cpu1, 1.0, 2.0, [(900_000_000, 100_000_000), (450_000_000, 50_000_000)])
    assert out["machine_busy_s"] == 3.0 and out["own_cpu_s"] == 1.0
    assert out["foreign_cpu_pct"] == 50.0  # (3 - 1) / (2 s x 2 CPUs); irq is not someone else's process
    assert out["steal_pct"] == 5.0 and out["irq_pct"] == 5.0  # of the 4 s of CPU time in the window
    assert out["runqueue_pct"] == 10.0  # 0.15 s waiting of 1.35 + 0.15 s
    assert out["resolution_pct"] == round(100 * 2 / hz / 2.0, 2)
    # more own CPU than the machine counted (jiffy rounding): no negative share
    assert interference.measure(cpu0, cpu1, 3.5, 2.0, [])["foreign_cpu_pct"] == 0.0


def test_proc_stat_is_read_through_the_sysroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text(
        "cpu  2070960 0 771435 2101731 154752 0 51547 129683 0 0\n"
        "cpu0 870740 0 339901 1296567 57203 0 17371 64575 0 0\n"
        "cpu1 1200220 0 431534 805164 97549 0 34175 65108 0 0\nintr 1 2 3\n")
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))
    assert interference.machine_cpu() == {"user": 2070960, "nice": 0, "system": 771435, "idle": 2101731,
                                          "iowait": 154752, "irq": 0, "softirq": 51547, "steal": 129683, "ncpu": 2}
    (tmp_path / "proc" / "stat").write_text("not a stat file\n")
    assert interference.machine_cpu() is None


def test_a_lowered_frequency_cap_is_throttling() -> None:
    before = {"caps": {"policy0": 1728000}, "events": None, "temp_max_c": 51.0}
    after = {"caps": {"policy0": 1190400}, "events": None, "temp_max_c": 88.5}
    assert interference.throttling(before, after) == {"throttled": True, "cpu_cap_drop_khz": 537600,
                                                      "throttle_events": None, "temp_max_c": 88.5}
    assert interference.throttling(before, before)["throttled"] is False
    nothing = {"caps": {}, "events": None, "temp_max_c": None}
    assert interference.throttling(nothing, nothing)["throttled"] is None  # this VM: nothing to read


# ------------------------------------------------------------------------------------ the runner, for real
def _burners() -> list[subprocess.Popen[bytes]]:
    """A busy process on each CPU, at a higher priority than the step (root may raise it): another user's job.

    Each sits in a session of its own, as the step does. With autogroup scheduling (Debian's default) CPU is
    shared between sessions first and a task's nice counts only inside its session, so the burners raise their
    session's nice too. Each is bound to its own CPU: three equal shares on two CPUs may otherwise be balanced as
    the step alone on one CPU (CI once measured a 2 % run-queue wait that way).
    """
    def burner(cpu: int) -> Callable[[], None]:
        def prepare() -> None:
            os.sched_setaffinity(0, {cpu})
            os.nice(-10)
            autogroup = Path("/proc/self/autogroup")
            if autogroup.exists():
                autogroup.write_text("-10")
        return prepare

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=burner(cpu),
                             start_new_session=True) for cpu in sorted(os.sched_getaffinity(0))]


def _read_run(tmp_path: Path, name: str) -> dict[str, Any]:
    """The runner, as the controller starts it, on a spec that reads a 256 MiB (sparse) file in random 4 KiB
    blocks: a step of a few hundred ms that needs a CPU all along."""
    data = tmp_path / "data.bin"
    if not data.exists():
        with open(data, "wb") as handle:
            handle.truncate(256 << 20)
    run_dir = tmp_path / "runs" / "set" / name
    run_dir.mkdir(parents=True)
    spec = {"contract": "1.1", "run_id": name, "set_id": f"validity-{uuid.uuid4().hex[:8]}", "cache": "none",
            "cache_files": [], "block_device": "auto", "collectors": [{"kind": "threads", "period_ms": 5}],
            "emulate": None, "run_dir": str(run_dir),
            "step": {"kind": "read", "file": str(data), "pattern": "rand", "bs_bytes": 4096, "seed": 0,
                     "timeout_s": 120}}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "runner", "run", str(run_dir / "spec.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=180, check=False)
    found = json.loads((run_dir / "run.json").read_text())
    assert done.returncode == 0, done.stderr + str(found.get("error"))
    return found


def _cpu_s(pid: int) -> float:
    """utime + stime of a live process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow  # runs the runner twice for seconds, beside CPU burners
def test_the_runner_measures_other_processes_and_its_own_tree(tmp_path: Path) -> None:
    burners = _burners()
    try:
        started, burned0 = time.monotonic(), sum(_cpu_s(p.pid) for p in burners)
        loaded = _read_run(tmp_path, "loaded")
        burned = (sum(_cpu_s(p.pid) for p in burners) - burned0) / (time.monotonic() - started)
    finally:
        for proc in burners:
            proc.kill()
            proc.wait()
    quiet = _read_run(tmp_path, "quiet")
    for found in (loaded, quiet):
        measured = found["interference"]
        assert set(MEASURES) - {"throttled"} <= set(measured), measured
        assert measured["ncpu"] == len([line for line in Path("/proc/stat").read_text().splitlines()
                                        if line[:3] == "cpu" and line[3:4].isdigit()])
        # the step's own process is part of the run's own CPU (with the runner and its sampler)
        step = found["rusage"]["read"]
        assert measured["own_cpu_s"] >= step["utime_s"] + step["stime_s"] - 0.02, (measured, step)
        assert measured["tasks_seen"] >= 1 and measured["run_s"] > 0
    # the burners' CPU (measured here, around the run: the CPUs they held per second) is other processes' CPU to the
    # runner, whatever else the machine runs (more load only adds to the foreign share); the step waited for a CPU.
    # Compared with what the burners did in this run, not with a "quiet" run: on a shared machine none is quiet.
    # Within the step the burners cannot have had more than the CPUs the run's own tree left free (the step is
    # CPU-bound), while ``burned`` also spans the runner's start, when they had both.
    measured = loaded["interference"]
    ncpu, wall_s = measured["ncpu"], measured["wall_s"]
    foreign_cpus = measured["foreign_cpu_pct"] / 100 * ncpu
    possible = min(burned, ncpu - measured["own_cpu_s"] / wall_s)
    assert foreign_cpus >= 0.8 * possible - measured["resolution_pct"] / 100 * ncpu, (measured, burned)
    assert measured["runqueue_pct"] > LIMITS.max_runqueue_pct, measured
    assert judge(measured, ValidityLimits()).perturbed  # far beyond any default: reproducible


# ------------------------------------------------------------------------------------ tables and selection
def _planned(run_id: str, **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "index": 1, "target": "local", "step": "fio", "cache": "cold", "round": 1,
            "repeat": 1, "status": "ok", **fields}


def test_a_contract_1_0_record_ingests_with_empty_columns() -> None:
    old = {"contract": "1.0", "status": "ok", "spec": {}, "started": {"wall": 1.0, "mono_ns": 1}}
    new = dict(old, contract="1.1", interference=record(foreign_cpu_pct=43.0, own_cpu_s=17.6))
    frame = _frame([run_row(_planned("a"), old),
                    run_row(_planned("b", perturbed=True, perturbed_reason="foreign CPU 43 % > 10 %"), new)])
    assert set(MEASURES) <= set(frame.columns)
    assert frame.loc[0, ["foreign_cpu_pct", "steal_pct", "runqueue_pct", "own_cpu_s"]].isna().all()
    assert frame.loc[1, "foreign_cpu_pct"] == 43.0 and frame.loc[1, "own_cpu_s"] == 17.6
    assert frame["perturbed"].tolist() == [False, True]
    assert frame.loc[1, "perturbed_reason"] == "foreign CPU 43 % > 10 %"


def _runs() -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": ["r1", "r2", "r3", "r4"], "target": "local", "step": "fio", "step_label": "fio", "round": 1,
        "cache": "cold", "variant": "cold", "status": ["ok", "ok", "failed", "ok"], "error": None,
        "perturbed": [False, True, False, None], "foreign_cpu_pct": [1.0, 43.0, None, None],
        "runqueue_pct": [0.5, 30.0, None, None], "steal_pct": [0.0, 0.0, None, None],
        "perturbed_reason": [None, "foreign CPU 43 % > 10 %: other processes held 0.9 of 2 CPUs", None, None]})


def test_one_selection_leaves_out_failed_and_perturbed_runs() -> None:
    runs = _runs()
    assert usable_runs(runs)["run_id"].tolist() == ["r1", "r4"]  # r4: a set from before the mark
    assert usable_runs(runs, include_perturbed=True)["run_id"].tolist() == ["r1", "r2", "r4"]
    assert perturbed_runs(runs)["run_id"].tolist() == ["r2"]
    assert usable_runs(including_perturbed(runs))["run_id"].tolist() == ["r1", "r2", "r4"]
    assert usable_runs(runs.drop(columns=["perturbed"]))["run_id"].tolist() == ["r1", "r2", "r4"]


def test_compare_and_gate_samples_leave_perturbed_runs_out_and_say_so(tmp_path: Path) -> None:
    fio = pd.DataFrame({"run_id": ["r1", "r2", "r3", "r4"], "target": "local", "job_name": "randread-64k-qd1",
                        "read_bw_bytes_per_s": [300e6, 30e6, 1e6, 310e6]})
    one = ResultSet(tmp_path, {"set_id": "s1", "matrix": {}}, {"runs": _runs(), "fio": fio})
    found = samples(one, METRICS["fio_read_mbps"])
    assert sorted(found["run_id"]) == ["r1", "r4"]
    assert perturbed_note(one) == ("s1: 1 perturbed runs are left out (r2: foreign CPU 43 % > 10 %: other "
                                   "processes held 0.9 of 2 CPUs)")
    clean = ResultSet(tmp_path, {"set_id": "s2", "matrix": {}}, {"runs": _runs().assign(perturbed=False),
                                                                 "fio": fio})
    assert perturbed_note(clean) is None


def test_the_report_lists_each_perturbed_run_with_its_reason() -> None:
    lines = perturbed_lines(_runs())
    assert "**1 perturbed run(s)**" in lines[1] and "left out of the summaries and figures" in lines[1]
    assert lines[3] == ("- `r2` perturbed: foreign CPU 43 % > 10 %: other processes held 0.9 of 2 CPUs "
                        "(runqueue 30 %, steal 0 %)")
    assert perturbed_lines(_runs().assign(perturbed=False)) == []
