"""What a step may do: make paths in the run directory, spawn processes (tracked, in the run's emulation cgroup),
wait for them (keeping their rusage) and stop them: their process group, and what left it (runner.reap)."""

import os
import signal
import subprocess
import time

from runner import reap
from runner.interference import InterferenceMeter
from runner.steps.base import StepFailed
from runner.util import tail

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        # the step's own process (the first it spawned): the one the runs table's proc_* columns describe; the
        # record names it, so the controller picks its rusage by name, not by where it falls in a dict
        self.main_process = None
        # what outlived a step process's group (fio's setsid job processes once its leader was killed): stopped by
        # kill(), listed in the run record
        self.left_running = {"stopped": [], "left": []}
        self.interference = InterferenceMeter()  # started and stopped around the step by the agent

    def path(self, name):
        return os.path.join(self.run_dir, name)

    def spawn(self, argv, name=None, env=None):
        name = name or os.path.basename(argv[0])
        out = open(self.path(name + ".stdout"), "wb")
        err = open(self.path(name + ".stderr"), "wb")
        # A stop signal between fork and the append below would leave a child nobody tracks: hold
        # the signals until it is in self.processes (the child unblocks them before exec).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        tag = "%d/%d" % (os.getpid(), len(self.processes))  # unique while this runner lives: its descendants' tag
        try:
            # the child also joins the emulation cgroup before exec: all it touches is charged there
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, cwd=self.run_dir,
                                    env=dict(os.environ, **(env or {}), **{reap.SPAWN: tag}),
                                    preexec_fn=self._child_setup)
            proc.log_name, proc.spawn_tag = name, tag
            self.processes.append(proc)
            self.main_process = self.main_process or name
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
        self.interference.track(proc.pid)  # its threads' runqueue wait
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
        self.reaped(proc, status, usage)
        if proc.returncode != 0:
            raise StepFailed("%s exited with %s: %s" % (proc.log_name, proc.returncode,
                                                        tail(self.path(proc.log_name + ".stderr"), 5)))
        return proc.returncode

    def reaped(self, proc, status, usage):
        """Record what ``os.wait4`` returned for ``proc``: its exit code and its rusage (major faults, CPU)."""
        proc.returncode = _exit_code(status)
        # ru_inblock: 512-byte blocks this process (and its reaped children) read from storage --
        # per-process accounting that other disk users on the machine cannot disturb
        self.rusage[proc.log_name] = {"majflt": usage.ru_majflt, "minflt": usage.ru_minflt,
                                      "storage_read_bytes": usage.ru_inblock * 512,
                                      "utime_s": usage.ru_utime, "stime_s": usage.ru_stime,
                                      "maxrss_kb": usage.ru_maxrss, "exit_code": proc.returncode}
        return proc.returncode

    def kill(self, proc, grace_s=3.0):
        """Stop a process this run started: its process group, then whatever of it left the group."""
        self._kill_group(proc, grace_s)
        # fio's job processes call setsid: outside the group, they read on after fio's leader was SIGKILLed
        found = reap.reap_spawned(proc.spawn_tag)
        for key in ("stopped", "left"):
            self.left_running[key] += [dict(item, process=proc.log_name) for item in found[key]]

    def _kill_group(self, proc, grace_s):
        """SIGTERM, then SIGKILL after a grace period, until no process of the group is left. The leader having
        exited is not enough: fio's workers stay in its group and went on reading after fio itself was killed."""
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
