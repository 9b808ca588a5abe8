"""One run, start to finish: cache, collectors, step, snapshots, record, DONE.

Whatever happens (a failing step, SIGTERM from the controller, a bug here), the clean-up stops every process
this run started, by pid, writes run.json with the status and writes DONE. A spec of another contract major
version is refused before anything runs, with the same record (runner.contract).
"""

import json
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

from runner import RUNNER_VERSION, pagecache, reap, util
from runner.collectors.base import CollectorError
from runner.collectors.run import Collectors
from runner.contract import CONTRACT_VERSION, RunRecord, RunSpec, incompatible
from runner.emulation.base import EmulationError
from runner.emulation.repair import repair as repair_emulation
from runner.emulation.run import Emulation
from runner.emulation.state import DURABLE_ENV
from runner.probes import machine
from runner.probes.blockdev import blockstat_line, resolve_block_device
from runner.run_context import STOP_SIGNALS, RunContext
from runner.steps.base import StepFailed
from runner.steps.registry import STEPS
from runner.util import now, write_checksums, write_json

REFUSED_EXIT = 2  # the spec was refused (another contract major version): nothing ran


class Interrupted(Exception):
    pass


def _interrupt(signum, _frame):
    raise Interrupted("stopped by signal %d" % signum)


def _inflight(device):
    """Requests in flight on the device now (block stat field 9), or None."""
    line = blockstat_line(device)
    fields = line.split() if line else []
    return int(fields[8]) if len(fields) > 8 else None


def _settle(device, timeout_s=5.0):
    """Wait (briefly) until the device has no request in flight: a run starts on an idle device."""
    deadline = time.monotonic() + timeout_s
    inflight = _inflight(device)
    while inflight and time.monotonic() < deadline:
        time.sleep(0.01)
        inflight = _inflight(device)
    return inflight


def _new_record(spec: RunSpec, status: str = "running", error: Optional[str] = None) -> RunRecord:
    return {"contract": CONTRACT_VERSION, "run_id": spec.get("run_id"), "spec": spec, "status": status,
            "error": error, "runner": {"version": RUNNER_VERSION, "pid": os.getpid(),
                                       "python": sys.version.split()[0], "host": socket.gethostname()},
            "started": now()}


def _finish(run_dir: str, record: RunRecord) -> None:
    """run.json, SHA256SUMS, then DONE (with the status): the controller pulls the run once DONE is there."""
    record["ended"] = now()
    write_json(os.path.join(run_dir, "run.json"), record)
    write_checksums(run_dir)
    with open(os.path.join(run_dir, "DONE"), "w") as done:
        done.write(record["status"] + "\n")


def _refuse(spec: RunSpec, run_dir: str, reason: str) -> int:
    """A spec this runner cannot read: nothing runs; run.json (status failed) and DONE say why, and stderr."""
    _finish(run_dir, _new_record(spec, status="failed", error=reason))
    print(reason, file=sys.stderr, flush=True)
    return REFUSED_EXIT


def _claim(spec: RunSpec, run_dir: str) -> Dict[str, Any]:
    """Mark this run's processes and stop what an earlier, killed run of the set left running."""
    # every process of this run (collectors, samplers, the step's) inherits the mark: what a killed run left is
    # found by it (runner.reap) and stopped before the next run of the set is measured
    scope = "%s/%s" % (spec.get("set_id", "?"), spec.get("target", "?"))  # this target's runs of the set
    mark = "%s/%s" % (scope, spec["run_id"])
    os.environ[reap.MARK] = mark
    # <workdir>/runs/<set>/<run>: the workdir keeps a copy of what emulation changed, where a lost /run cannot
    # mislead (runner.emulation)
    workdir = os.path.dirname(os.path.dirname(os.path.dirname(run_dir)))
    os.environ.setdefault(DURABLE_ENV, os.path.join(workdir, "state"))
    return reap.reap(scope, keep_mark=mark)


def _measure(ctx: RunContext, record: RunRecord, native_bin: str, files: List[str], device: Optional[str]) -> None:
    """Everything before, during and after the step that can fail the run; sets status "ok" at the end."""
    spec, emulation = ctx.spec, ctx.emulation
    repaired = repair_emulation()  # a runner killed mid-run may have left read_ahead_kb or a cgroup
    if repaired:
        record["emulation_repaired"] = repaired
    record["emulation"] = emulation.setup()  # refuses (EmulationError) before anything runs
    record["entry_state"] = machine.entry_state()
    # the device is idle when the run begins (a previous run's I/O would be measured as this one's)
    record["entry_state"]["device_inflight"] = _settle(device)
    record["cache"] = pagecache.prepare(native_bin, spec["cache"], files)  # macOS cold: + "drop" (cleared or not)
    ctx.collectors.start_global()
    record["blockstat_before"] = blockstat_line(device)
    emulation.note_before_step()
    ctx.interference.start()
    record["step_started"] = now()
    record["summary"] = STEPS[spec["step"]["kind"]](ctx, spec["step"])
    record["step_ended"] = now()
    record["interference"] = ctx.interference.stop()  # who else had the machine meanwhile
    record["blockstat_after"] = blockstat_line(device)
    record["status"] = "ok"


def _clean_up(ctx: RunContext, record: RunRecord, native_bin: str, files: List[str],
             device: Optional[str]) -> None:
    """Stop what the run started, undo its emulation, stop the collectors; what is left goes into the record."""
    for signum in STOP_SIGNALS:  # nothing may cut the clean-up short
        signal.signal(signum, signal.SIG_IGN)
    ctx.cleanup()  # each step process's group, then what of it left the group (runner.reap)
    if ctx.left_running["stopped"] or ctx.left_running["left"]:
        record["left_running_stopped"] = ctx.left_running
    ctx.interference.stop()  # a step that failed or was stopped: only its sampling thread ends
    record.setdefault("step_ended", now())
    record.setdefault("blockstat_after", blockstat_line(device))
    emulation = ctx.emulation
    record["emulation"] = emulation.teardown()  # after the step's processes: stats, rmdir, restore
    oom = ((record["emulation"] or {}).get("stats") or {}).get("oom_kill")
    if oom and record["status"] != "ok":
        record["error"] = "%s (OOM: %d process(es) killed for exceeding the emulated memory budget of %.0f MiB)" % (
            record["error"], oom, emulation.wanted.get("memory_bytes", 0) / 1048576.0)
    sampler_errors = ctx.collectors.stop_all()
    if sampler_errors:
        record["collector_errors"] = sampler_errors
    record["rusage"] = ctx.rusage
    if ctx.main_process is not None:
        record["main_process"] = ctx.main_process
    try:
        record.setdefault("cache", {"condition": ctx.spec["cache"]})
        record["cache"]["after"] = pagecache.residency(native_bin, files)
    except pagecache.CacheStateError as exc:
        record["cache"]["after_error"] = str(exc)


def run(spec_path: str) -> int:
    """Run one spec; 0 when the run is ok, 1 when it is not, 2 when the spec was refused."""
    spec_path = os.path.abspath(spec_path)
    run_dir = os.path.dirname(spec_path)
    with open(spec_path) as handle:
        spec = json.load(handle)
    refused = incompatible(spec.get("contract"), "runner")
    if refused:
        return _refuse(spec, run_dir, refused)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    strays = _claim(spec, run_dir)
    native_bin = util.native_bin(spec)
    files = spec.get("cache_files", [])
    record = _new_record(spec)  # its run_id is there: _claim read it
    device = resolve_block_device(spec.get("block_device", "auto"), files)
    record["block_device"] = device
    if strays["stopped"]:
        record["strays_stopped"] = strays  # processes an earlier, killed run of this set left running
    collectors = Collectors(spec.get("collectors", []), native_bin, run_dir, device)
    emulation = Emulation(spec.get("emulate"), spec["run_id"], device)
    ctx = RunContext(spec, run_dir, collectors, emulation)
    try:
        _measure(ctx, record, native_bin, files, device)
    except (StepFailed, pagecache.CacheStateError, CollectorError, EmulationError) as exc:
        record["status"], record["error"] = "failed", str(exc)
    except Interrupted as exc:
        record["status"], record["error"] = "interrupted", str(exc)
    except Exception as exc:  # a runner bug must still leave a record and a DONE
        record["status"], record["error"] = "error", "runner error: %r" % exc
        record["traceback"] = traceback.format_exc()
    finally:
        _clean_up(ctx, record, native_bin, files, device)
        _finish(run_dir, record)
    return 0 if record["status"] == "ok" else 1
