"""The counters collector against ground truth: runner/native/workload runs threads of known behaviour (compute, a
futex barrier, cold mmap faults, cold preads, sleep, two threads pinned to one CPU), each measuring its own truth
with clocks, under the runner's counters collector; the shares harness/analysis/waits.py derives from the
kernel's counters must agree with that truth. Also: kernel.task_delayacct restored after a run and after a
runner killed mid-run (repair), and the parsers on captured files (tests/data/counters, tests/data/taskstats)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.analysis.waits import wait_shares
from harness.parsers import ParseError, parse
from harness.parsers.counters import THREAD_COLUMNS
from runner import delayacct
from runner.collectors import taskstats
from runner.contract import CONTRACT_VERSION
from tests.helpers import a_bad_field_is_one_line, collect_step, wait_for, workload_files

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
PP = 0.05  # 5 percentage points

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc and delay accounting")
root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                          reason="needs root: taskstats (CAP_NET_ADMIN) and kernel.task_delayacct")


@pytest.fixture(scope="module")
def cold_files(native: Path) -> Iterator[dict[str, str]]:
    with workload_files("harness-counters-") as files:
        yield files


def run_workload(native: Path, run_dir: Path, args: list[str], period_ms: int = 20) -> tuple[dict, list[dict]]:
    """The workload under the runner's counters collector, as a run's step would be: (truth, counter rows). Reads
    every 20 ms: the reads inside a thread's phase then cover all of it but a few per cent (its truth is measured
    over the whole phase)."""
    _, status, _ = collect_step(native, run_dir, [{"kind": "counters", "period_ms": period_ms}],
                                [str(native / "workload"), *args, "--out", str(run_dir / "truth.json")])
    assert status == 0
    return json.loads((run_dir / "truth.json").read_text()), parse("counters", (run_dir / "counters.txt").read_bytes())


def assert_compute_thread(shares: dict, fractions: dict) -> None:
    """A thread that never blocks: whatever of its wall time it did not run (its clock's truth) it waited for a
    CPU. The counters put most of it in runqueue; what the guest counts nowhere (the vCPU taken by the hypervisor,
    interrupt time) lands in other_sleep."""
    assert abs(shares["runqueue"] + shares["other_sleep"] - fractions["runqueue_ns"]) <= PP, (shares, fractions)


def shares_by_role(truth: dict, rows: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """Per role: (the thread's truth as fractions of its wall time, the counters' shares over its phase)."""
    out: dict[str, list[tuple[dict, dict]]] = {}
    for thread in truth["threads"]:
        mine = [r for r in rows if r["kind"] == "thread" and r["tid"] == thread["tid"]]
        shares = wait_shares(mine, thread["start_ns"], thread["end_ns"])
        assert shares is not None, f"no two reads inside the phase of {thread['role']}"
        wall = thread["wall_ns"]
        fractions = {k: (thread[k] or 0) / wall for k in ("cpu_ns", "futex_ns", "fault_ns", "pread_ns", "sleep_ns",
                                                          "runqueue_ns")}
        out.setdefault(thread["role"], []).append((fractions, shares))
    return out


def assert_common(role: str, truth: dict, shares: dict) -> None:
    """What holds for every role: run is the thread's CPU time; nothing thrashes or reclaims here (no memory
    pressure); the classes add up to the wall time."""
    assert abs(shares["run"] - truth["cpu_ns"]) <= PP, (role, shares, truth)
    assert shares["thrashing"] < 0.02 and shares["reclaim"] < 0.02, (role, shares)
    total = sum(shares[c] for c in ("run", "runqueue", "io_wait", "thrashing", "reclaim", "other_sleep"))
    assert total == pytest.approx(1.0, abs=1e-6)


@linux
@root
def test_counters_match_the_truth_of_blocking_threads(native: Path, cold_files: dict, tmp_path: Path) -> None:
    """pread and mmap faults of cold files show as io_wait, sleep as other_sleep; no other role does I/O."""
    subprocess.run([str(native / "cachectl"), "drop", cold_files["fault"], cold_files["pread"]], check=True,
                   capture_output=True)
    truth, rows = run_workload(native, tmp_path, ["--seconds", "2.5", "--fault", cold_files["fault"], "--pread",
                                                  cold_files["pread"], "--sleep", "1"])
    header = (tmp_path / "counters.txt").read_text().splitlines()[0]
    assert "taskstats=v" in header and "delayacct=on" in header, header
    roles = shares_by_role(truth, rows)
    for role, pairs in roles.items():
        for fractions, shares in pairs:
            assert_common(role, fractions, shares)
            blocked = fractions["fault_ns"] + fractions["pread_ns"] + fractions["sleep_ns"]
            assert_blocked_matches("other_sleep" if role == "sleep" else "io_wait", blocked, shares)
    # the readers sleep in I/O for most of the time they are neither running nor waiting for a CPU, and for at least
    # half of what their own clock saw blocked net of that wait -- shares of their own time, whatever else the
    # machine runs (a fixed floor such as 30 % of the wall time failed beside CPU burners: runqueue 48 %)
    for role, measured in (("pread", "pread_ns"), ("fault", "fault_ns")):
        (truth, shares), = roles[role]
        assert shares["io_wait"] >= 0.5 * (1 - shares["run"] - shares["runqueue"]), (role, shares)
        assert shares["io_wait"] >= 0.5 * (truth[measured] - shares["runqueue"]) > 0, (role, truth, shares)
    (sleep, _), = [(s, t) for t, s in roles["sleep"]]
    assert sleep["io_wait"] < 0.02 and sleep["other_sleep"] >= 0.5, sleep


def assert_blocked_matches(sleep_class: str, blocked: float, shares: dict) -> None:
    """The thread's own clock around a blocking call sees the sleep, the wait for a CPU after the wake-up and what
    the guest counts nowhere (a vCPU taken by the hypervisor: other_sleep); the counters split them. So the sleep
    class never claims more than the clock saw blocked, and no less than that minus the thread's runqueue wait and
    its uncounted time (each within 5 points)."""
    counted = shares[sleep_class]
    uncounted = 0.0 if sleep_class == "other_sleep" else shares["other_sleep"]
    assert blocked - shares["runqueue"] - uncounted - PP <= counted <= blocked + PP, (counted, blocked, shares)


@linux
@root
def test_counters_match_the_truth_of_compute_threads(native: Path, tmp_path: Path) -> None:
    """Busy and barrier threads do no I/O; the pair pinned to one CPU waits in the runqueue about half the time."""
    truth, rows = run_workload(native, tmp_path, ["--seconds", "2.5", "--oversubscribed", "2", "--barrier",
                                                  "2:200us", "--cpu", "0"])
    roles = shares_by_role(truth, rows)
    for role, pairs in roles.items():
        for fractions, shares in pairs:
            assert_common(role, fractions, shares)
            assert shares["io_wait"] < 0.02, (role, shares)
            if role == "oversubscribed":  # never blocks: all it does not run, it waits for the CPU
                assert_compute_thread(shares, fractions)
                # at least its partner's half of CPU 0 minus slack; more when other work on the machine takes CPU 0
                # too (the truth check above holds either way; an upper bound held only on an idle machine)
                assert shares["runqueue"] >= 0.3 and shares["runqueue"] > shares["other_sleep"], shares
            else:  # the barrier's futex waits
                assert_blocked_matches("other_sleep", fractions["futex_ns"], shares)
    faster = min(roles["barrier"], key=lambda pair: pair[0]["cpu_ns"])[1]
    assert faster["other_sleep"] >= 0.1, faster  # the thread with less work per period waits at the barrier


@linux
def test_busy_thread_counters_without_root_come_from_proc(native: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Where taskstats is not usable, schedstat still gives run and runqueue, and status the context switches."""
    monkeypatch.setattr("runner.collectors.counters.open_taskstats", lambda: (None, "taskstats: not allowed (test)"))
    monkeypatch.setenv("HARNESS_DELAYACCT_SYSCTL", str(tmp_path / "no-such-sysctl"))
    truth, rows = run_workload(native, tmp_path, ["--seconds", "1.5", "--busy", "1"])
    text = (tmp_path / "counters.txt").read_text()
    assert "taskstats=no" in text and "# unavailable taskstats: taskstats: not allowed (test)" in text
    (fractions, shares), = shares_by_role(truth, rows)["busy"]
    assert abs(shares["run"] - fractions["cpu_ns"]) <= PP
    assert_compute_thread(shares, fractions)
    busy = [r for r in rows if r["kind"] == "thread" and r["comm"] == "wl-busy0"]
    assert busy[-1]["nivcsw"] is not None and busy[-1]["blkio_delay_ns"] is None
    assert "thrashing_delay_ns" not in shares["available"]



def proc_counters(task_dir: Path) -> dict[int, tuple[int, ...]]:
    """Per thread: schedstat's run_ns, runqueue_ns, timeslices and status's nvcsw, nivcsw."""
    found = {}
    for task in task_dir.iterdir():
        status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines())
        found[int(task.name)] = (*(int(v) for v in (task / "schedstat").read_text().split()[:3]),
                                 int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]))
    return found


def catches_sigterm(pid: int) -> bool:
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@linux
@root
def test_native_reader_with_taskstats_gives_schedstats_own_numbers(native: Path, tmp_path: Path) -> None:
    """With taskstats the C reader takes run, runqueue and timeslices from the netlink answer instead of reading
    schedstat (and the context switches instead of status): on a stopped process, whose counters stand still,
    every thread's row carries exactly what /proc says."""
    switch = delayacct.switch_on()
    workload = subprocess.Popen([str(native / "workload"), "--seconds", "5", "--busy", "1", "--sleep", "1",
                                 "--hold-ms", "0", "--out", str(tmp_path / "truth.json")])
    task_dir = Path(f"/proc/{workload.pid}/task")
    try:
        wait_for("the workload's threads", lambda: len(list(task_dir.iterdir())) >= 3, timeout=5)
        time.sleep(0.1)
        workload.send_signal(signal.SIGSTOP)
        wait_for("every thread stopped", lambda: all((t / "stat").read_text().rpartition(")")[2].split()[0] in "tT"
                                                     for t in task_dir.iterdir()), timeout=5)
        expected = proc_counters(task_dir)
        reader = subprocess.Popen([str(native / "counters"), "--pid", str(workload.pid), "--period-ms", "1000",
                                   "--out", str(tmp_path / "rows.txt"), "--taskstats"], stdout=subprocess.PIPE,
                                  text=True)
        wait_for("the reader's SIGTERM handler", lambda: catches_sigterm(reader.pid), timeout=5)
        reader.send_signal(signal.SIGTERM)  # a read at its start (or none, if the signal came first) and one at stop
        said = dict(word.split("=") for word in reader.communicate(timeout=10)[0].split())
    finally:
        workload.kill()
        workload.wait()
        delayacct.switch_back(switch)
    rows = [dict(zip(("kind", "t_ns", "pid", *THREAD_COLUMNS[1:], "comm"), line.split("\t"), strict=True))
            for line in (tmp_path / "rows.txt").read_text().splitlines() if not line.startswith("#")]
    assert {int(row["tid"]) for row in rows} == set(expected)
    assert {int(row["pid"]) for row in rows} == {workload.pid}  # v2: each thread line names its process
    for row in rows:
        got = tuple(int(row[name]) for name in ("run_ns", "runqueue_ns", "timeslices", "nvcsw", "nivcsw"))
        assert got == expected[int(row["tid"])], (row, expected)
    assert int(said["sched_taskstats"]) == len(rows) and said["sched_proc"] == "0", said


@linux
def test_native_reader_ends_when_its_runner_is_gone(native: Path, tmp_path: Path) -> None:
    """A runner killed mid-run leaves no reader behind polling forever: the reader sees its parent gone, reads once
    more and exits."""
    started = subprocess.run(["sh", "-c", f'"{native / "counters"}" --pid {os.getpid()} --period-ms 20 --out '
                              f'"{tmp_path / "rows.txt"}" >/dev/null & echo $!; sleep 0.1'],
                             capture_output=True, text=True, check=True)
    stat = Path(f"/proc/{int(started.stdout)}/stat")

    def ended() -> bool:
        return not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] in "ZX"

    wait_for("the orphaned reader to end", ended, timeout=5)
    assert any(line.startswith("t\t") for line in (tmp_path / "rows.txt").read_text().splitlines())

# ---------------------------------------------------------------------------------------------- delayacct switch

@pytest.fixture
def fake_sysctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """kernel.task_delayacct played by a file (the real one is machine-wide), off; the state in tmp_path."""
    sysctl = tmp_path / "task_delayacct"
    sysctl.write_text("0")
    monkeypatch.setenv("HARNESS_DELAYACCT_SYSCTL", str(sysctl))
    monkeypatch.setenv("HARNESS_EMULATE_STATE", str(tmp_path / "state"))
    return sysctl


def fio_spec(workdir: Path, native: Path, file: str, seconds: int) -> Path:
    run_id = f"counters-{uuid.uuid4().hex[:6]}"
    # a set of its own: a runner reaps every process of its set and target, and a neighbouring suite runs these
    # tests too
    run_dir = workdir / "runs" / f"set-{run_id}" / run_id
    run_dir.mkdir(parents=True)
    spec = {"contract": CONTRACT_VERSION, "run_id": run_id, "set_id": f"set-{run_id}", "target": "local",
            "cache": "none", "round": 1, "repeat": 1, "params": {}, "cache_files": [], "block_device": None,
            "native_bin": str(native),
            "collectors": [{"kind": "counters", "period_ms": 100}], "run_dir": str(run_dir), "emulate": None,
            "step": {"kind": "fio", "file": file, "timeout_s": 60,
                     "jobs": [{"name": "r", "rw": "randread", "bs": "4k", "runtime": seconds, "time_based": 1,
                               "ioengine": "psync"}]}}
    path = run_dir / "spec.json"
    path.write_text(json.dumps(spec))
    return path


@linux
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_delayacct_is_restored_after_a_run(native: Path, cold_files: dict, tmp_path: Path,
                                           fake_sysctl: Path) -> None:
    spec = fio_spec(tmp_path, native, cold_files["pread"], 1)
    done = subprocess.run([sys.executable, "-m", "runner", "run", str(spec)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    record = json.loads((spec.parent / "run.json").read_text())
    assert record["status"] == "ok", (record["error"], done.stderr)
    assert fake_sysctl.read_text() == "0"
    text = (spec.parent / "counters.txt").read_text()
    assert "delayacct=on delayacct_switched=yes" in text.splitlines()[0]
    assert "delayacct_restored=0" in text.splitlines()[-1]
    assert not Path(delayacct.state_file()).exists()


@linux
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_delayacct_is_repaired_after_a_killed_runner(native: Path, cold_files: dict, tmp_path: Path,
                                                     fake_sysctl: Path) -> None:
    spec = fio_spec(tmp_path, native, cold_files["pread"], 20)
    runner = subprocess.Popen([sys.executable, "-m", "runner", "run", str(spec)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (spec.parent / "counters.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_sysctl.read_text() == "1"  # on for the run
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
    finally:
        subprocess.run([sys.executable, "-m", "runner", "reap", f"{spec.parent.parent.name}/local"], cwd=REPO,
                       capture_output=True)
    assert fake_sysctl.read_text() == "1"  # a killed runner cannot restore
    done = subprocess.run([sys.executable, "-m", "runner.emulation", "repair"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    repaired = json.loads(done.stdout)
    assert repaired["delayacct"]["delayacct_restored"] == 0 and repaired["delayacct"]["delayacct_dead_holders"]
    assert fake_sysctl.read_text() == "0"


@linux
def test_delayacct_stays_on_while_another_run_holds_it(fake_sysctl: Path) -> None:
    """Two runs of one machine: the first to finish leaves it on for the other; the last restores."""
    other = subprocess.Popen([sys.executable, "-c", "import sys, time; from runner import delayacct; "
                              "delayacct.switch_on(); print('on', flush=True); sys.stdin.read()"],
                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "on"
        mine = delayacct.switch_on()
        assert mine["delayacct"] == "on" and fake_sysctl.read_text() == "1"
        assert delayacct.switch_back(mine).get("left_on_for_others") is True
        assert fake_sysctl.read_text() == "1"
    finally:
        other.kill()
        other.wait()
    assert delayacct.repair()["delayacct_restored"] == 0  # the other run died holding it
    assert fake_sysctl.read_text() == "0"


# ---------------------------------------------------------------------------------------------- parsers

def test_taskstats_reply_is_parsed_at_the_kernels_struct_version() -> None:
    """A real TASKSTATS_CMD_GET reply (kernel 6.18, struct version 16), see tests/data/taskstats/SOURCE.md."""
    data = (DATA / "taskstats" / "reply-v16.bin").read_bytes()
    (msg_type, _seq, payload), = list(taskstats.messages(data))
    assert msg_type > taskstats.NLMSG_DONE  # the family's own type, not an error
    tid, stats = taskstats.parse_reply(payload)
    expected = json.loads((DATA / "taskstats" / "reply-v16.json").read_text())
    assert tid == expected["tid"]
    assert stats == expected["stats"]
    assert stats["version"] == 16 and stats["size"] == 560
    assert stats["cpu_run_real_total"] > 0 and stats["blkio_delay_total"] > 0 and stats["blkio_count"] > 0


def test_taskstats_fields_a_short_struct_lacks_are_none() -> None:
    """An older kernel's smaller struct: the fields past its end are None, never read from the padding."""
    data = (DATA / "taskstats" / "reply-v16.bin").read_bytes()
    (_type, _seq, payload), = list(taskstats.messages(data))
    _tid, full = taskstats.parse_reply(payload)
    struct_v8 = taskstats.parse_stats(bytes(bytearray(payload[-560:])[:328]))  # ends before thrashing (v9)
    assert struct_v8["freepages_delay_total"] is not None and struct_v8["thrashing_delay_total"] is None
    assert struct_v8["blkio_delay_total"] == full["blkio_delay_total"]


def test_counters_capture_parses_to_rows_with_what_the_kernel_offered() -> None:
    rows = parse("counters", (DATA / "counters" / "counters.txt").read_bytes())
    threads = [r for r in rows if r["kind"] == "thread"]
    psi = [r for r in rows if r["kind"] == "psi"]
    assert threads and psi
    assert {r["taskstats"] for r in threads} == {"v16"} and {r["delayacct"] for r in threads} == {"on"}
    assert all(r["run_ns"] is not None and r["blkio_delay_ns"] is not None for r in threads)
    pread = [r for r in threads if r["comm"] == "wl-pread0"]
    shares = wait_shares(pread, pread[0]["t_ns"], pread[-1]["t_ns"])
    assert shares is not None and shares["io_wait"] > 0.3


def test_malformed_counters_line_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    a_bad_field_is_one_line("counters", DATA / "counters" / "counters.txt", tmp_path, 4, "t_ns is not an integer")


def test_counters_output_of_another_version_is_refused() -> None:
    with pytest.raises(ParseError, match="version v3: this parser reads harness-counters v1 or v2"):
        parse("counters", b"# harness-counters v3 pid=1\n")
    with pytest.raises(ParseError, match="no counters header"):
        parse("counters", b"t\t1\t2\n")


def test_wait_shares_clip_what_the_counters_claim_beyond_the_off_cpu_time() -> None:
    """blkio delay larger than the time the thread was off CPU (seen on kernel 6.18): clipped, and said so."""
    first = {"t_ns": 0, "run_ns": 0, "runqueue_ns": 0, "blkio_delay_ns": 0, "thrashing_delay_ns": 0,
             "freepages_delay_ns": 0}
    last = {"t_ns": 1_000_000_000, "run_ns": 300_000_000, "runqueue_ns": 100_000_000,
            "blkio_delay_ns": 900_000_000, "thrashing_delay_ns": 0, "freepages_delay_ns": 0}
    shares = wait_shares([first, last], 0, 10**9)
    assert shares["io_wait"] == pytest.approx(0.6) and shares["other_sleep"] == 0
    assert shares["overlap_s"] == pytest.approx(0.3)
    assert wait_shares([first], 0, 10**9) is None  # one read: no window


MS = 1_000_000


def _reads(*cumulative: tuple[int, int, int]) -> list[dict[str, int]]:
    """Reads every 20 ms with cumulative (run, runqueue, blkio delay) in ms."""
    return [{"t_ns": 20 * MS * i, "run_ns": run * MS, "runqueue_ns": rq * MS, "blkio_delay_ns": blkio * MS,
             "thrashing_delay_ns": 0, "freepages_delay_ns": 0} for i, (run, rq, blkio) in enumerate(cumulative)]


def test_a_sleep_longer_than_the_read_period_is_handed_back_to_the_intervals_it_spanned() -> None:
    """Delay accounting adds a sleep's delay when it ends: a 45 ms I/O wait that began 5 ms into a 20 ms interval
    lands whole in the third, which holds only 10 ms of it. The 35 ms it began with are io_wait, not other_sleep,
    and nothing is said to overlap (under load on this VM, per-interval clipping alone put a fault thread's io_wait
    15 points under bpftrace's D time)."""
    reads = _reads((0, 0, 0), (5, 0, 0), (5, 0, 0), (15, 0, 45))  # ran 5 ms, slept 45 ms, ran 10 ms
    shares = wait_shares(reads, 0, 60 * MS)
    assert shares["io_wait"] == pytest.approx(45 / 60) and shares["run"] == pytest.approx(15 / 60)
    assert shares["other_sleep"] == pytest.approx(0) and shares["overlap_s"] == pytest.approx(0)


def test_a_delay_is_handed_back_no_further_than_where_the_thread_last_ran() -> None:
    """A sleep cannot have begun before the thread last ran: an interval of other sleep (a futex, say) followed
    by running keeps its class, and what the later interval claimed beyond that is overlap."""
    # slept 20 ms in a futex, ran 5 ms and slept 15 ms, then a blkio jump of 60 ms with 10 ms run in the last
    reads = _reads((0, 0, 0), (0, 0, 0), (5, 0, 0), (15, 0, 60))
    shares = wait_shares(reads, 0, 60 * MS)
    assert shares["other_sleep"] == pytest.approx(20 / 60)  # the futex interval is untouched
    assert shares["io_wait"] == pytest.approx(25 / 60)  # 15 ms handed back + 10 ms in its own interval
    assert shares["overlap_s"] == pytest.approx(0.035)  # 60 claimed - 10 - 15


def test_ingest_keeps_each_rows_time_and_adds_the_collectors_notes() -> None:
    from harness.collectors import COLLECTORS

    rows = COLLECTORS["counters"].ingest(DATA / "counters", {})["thread_counters"]
    assert all(isinstance(r["t_ns"], int) for r in rows)  # the '# stop t_ns=' note must not overwrite it
    assert {r["delayacct_restored"] for r in rows} == {"0"} and float(rows[0]["collector_cpu_s"]) > 0
