"""One run, start to finish: cache, collectors, step, snapshots, record, DONE.

Whatever happens (a failing step, SIGTERM from the controller, a bug here), the finally-block
stops every process this run started, by pid, writes run.json with the status and writes DONE.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import traceback

from runner import RUNNER_VERSION, cache, emulate, probe, reap
from runner.collectors import CollectorError, Collectors
from runner.steps import STEPS, StepFailed
from runner.util import now, tail, write_checksums, write_json

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(Exception):
    pass


def _interrupt(signum, _frame):
    raise Interrupted("stopped by signal %d" % signum)


blockstat_line = probe.blockstat_line


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _exit_code(status):
    # os.waitstatus_to_exitcode is 3.9+; the runner supports 3.8
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class RunContext:
    """What a step may do: make paths in the run dir, spawn processes (tracked), wait for them."""

    def __init__(self, spec, run_dir, collectors, emulation=None):
        self.spec, self.run_dir, self.collectors = spec, run_dir, collectors
        self.emulation = emulation
        self.processes = []
        self.rusage = {}

    def path(self, name):
        return os.path.join(self.run_dir, name)

    def spawn(self, argv, name=None, env=None):
        name = name or os.path.basename(argv[0])
        out = open(self.path(name + ".stdout"), "wb")
        err = open(self.path(name + ".stderr"), "wb")
        # A stop signal between fork and the append below would leave a child nobody tracks: hold
        # the signals until it is in self.processes (the child unblocks them before exec).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            # the child also joins the emulation cgroup before exec: all it touches is charged there
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, cwd=self.run_dir,
                                    env=dict(os.environ, **(env or {})), preexec_fn=self._child_setup)
            proc.log_name = name
            self.processes.append(proc)
        except OSError as exc:
            raise StepFailed("cannot start %s: %s" % (argv[0], exc)) from None
        except subprocess.SubprocessError:
            raise StepFailed("cannot start %s inside the emulation cgroup %s"
                             % (argv[0], sorted(self.emulation.dirs.values()))) from None
        finally:
            out.close()
            err.close()
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        self.collectors.on_spawn(proc.pid)
        return proc

    def _child_setup(self):
        """In the child between fork and exec (Popen preexec_fn)."""
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if self.emulation and self.emulation.dirs:
            self.emulation.enter()

    def wait(self, proc, timeout_s):
        """Wait for ``proc``; keep its rusage (major faults, CPU); a non-zero exit fails the step."""
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.kill(proc)
                raise StepFailed("%s did not finish within %.0f s" % (proc.log_name, timeout_s))
            time.sleep(0.01)
        proc.returncode = _exit_code(status)
        # ru_inblock: 512-byte blocks this process (and its reaped children) read from storage --
        # per-process accounting that other disk users on the machine cannot disturb
        self.rusage[proc.log_name] = {"majflt": usage.ru_majflt, "minflt": usage.ru_minflt,
                                      "storage_read_bytes": usage.ru_inblock * 512,
                                      "utime_s": usage.ru_utime, "stime_s": usage.ru_stime,
                                      "maxrss_kb": usage.ru_maxrss, "exit_code": proc.returncode}
        if proc.returncode != 0:
            raise StepFailed("%s exited with %s: %s" % (proc.log_name, proc.returncode,
                                                        tail(self.path(proc.log_name + ".stderr"), 5)))
        return proc.returncode

    def kill(self, proc, grace_s=3.0):
        """Stop a process group this run started: SIGTERM, then SIGKILL after a grace period, until no process
        of the group is left. The leader having exited is not enough: fio's workers stay in its group and went
        on reading after fio itself was killed."""
        for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                proc.poll()  # reap the leader (a zombie leader keeps the group "alive")
                if not _group_alive(proc.pid):
                    return
                time.sleep(0.01)

    def cleanup(self):
        for proc in self.processes:
            self.kill(proc)


def run(spec_path):
    import json

    spec_path = os.path.abspath(spec_path)
    run_dir = os.path.dirname(spec_path)
    with open(spec_path) as handle:
        spec = json.load(handle)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    # every process of this run (collectors, samplers, the step's) inherits the mark: what a killed run left is
    # found by it (runner.reap) and stopped before the next run of the set is measured
    set_id = spec.get("set_id", "?")
    mark = "%s/%s" % (set_id, spec["run_id"])
    os.environ[reap.MARK] = mark
    # <workdir>/runs/<set>/<run>: the workdir keeps a copy of what emulation changed, where a lost /run cannot
    # mislead (runner.emulate)
    workdir = os.path.dirname(os.path.dirname(os.path.dirname(run_dir)))
    os.environ.setdefault(emulate.DURABLE_ENV, os.path.join(workdir, "state"))
    strays = reap.reap(set_id, keep_mark=mark)

    native_bin = spec.get("native_bin") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "bin")
    files = spec.get("cache_files", [])
    record = {"run_id": spec["run_id"], "spec": spec, "status": "running", "error": None,
              "runner": {"version": RUNNER_VERSION, "pid": os.getpid(), "python": sys.version.split()[0],
                         "host": socket.gethostname()},
              "started": now()}
    device = probe.resolve_block_device(spec.get("block_device", "auto"), files)
    record["block_device"] = device
    if strays["stopped"]:
        record["strays_stopped"] = strays  # processes an earlier, killed run of this set left running
    collectors = Collectors(spec.get("collectors", []), native_bin, run_dir, device)
    emulation = emulate.Emulation(spec.get("emulate"), spec["run_id"], device)
    ctx = RunContext(spec, run_dir, collectors, emulation)
    try:
        repaired = emulate.repair()  # a runner killed mid-run may have left read_ahead_kb or a cgroup
        if repaired:
            record["emulation_repaired"] = repaired
        record["emulation"] = emulation.setup()  # refuses (EmulationError) before anything runs
        record["entry_state"] = probe.entry_state()
        # the device is idle when the run begins (a previous run's I/O would be measured as this one's)
        record["entry_state"]["device_inflight"] = _settle(device)
        record["cache"] = cache.prepare(native_bin, spec["cache"], files)  # macOS cold: + "drop" (cleared or not)
        collectors.start_global()
        record["blockstat_before"] = blockstat_line(device)
        emulation.note_before_step()
        record["step_started"] = now()
        record["summary"] = STEPS[spec["step"]["kind"]](ctx, spec["step"])
        record["step_ended"] = now()
        record["blockstat_after"] = blockstat_line(device)
        record["status"] = "ok"
    except (StepFailed, cache.CacheStateError, CollectorError, emulate.EmulationError) as exc:
        record.update(status="failed", error=str(exc))
    except Interrupted as exc:
        record.update(status="interrupted", error=str(exc))
    except Exception as exc:  # a runner bug must still leave a record and a DONE
        record.update(status="error", error="runner error: %r" % exc, traceback=traceback.format_exc())
    finally:
        for signum in STOP_SIGNALS:  # nothing may cut the clean-up short
            signal.signal(signum, signal.SIG_IGN)
        ctx.cleanup()
        record.setdefault("step_ended", now())
        record.setdefault("blockstat_after", blockstat_line(device))
        record["emulation"] = emulation.teardown()  # after the step's processes: stats, rmdir, restore
        oom = ((record["emulation"] or {}).get("stats") or {}).get("oom_kill")
        if oom and record["status"] != "ok":
            record["error"] = "%s (OOM: %d process(es) killed for exceeding the emulated memory budget of %.0f MiB)" % (
                record["error"], oom, emulation.wanted.get("memory_bytes", 0) / 1048576.0)
        sampler_errors = collectors.stop_all()
        if sampler_errors:
            record["collector_errors"] = sampler_errors
        record["rusage"] = ctx.rusage
        try:
            record.setdefault("cache", {"condition": spec["cache"]})
            record["cache"]["after"] = cache.residency(native_bin, files)
        except cache.CacheStateError as exc:
            record["cache"]["after_error"] = str(exc)
        record["ended"] = now()
        write_json(os.path.join(run_dir, "run.json"), record)
        write_checksums(run_dir)
        with open(os.path.join(run_dir, "DONE"), "w") as done:
            done.write(record["status"] + "\n")
    return 0 if record["status"] == "ok" else 1
