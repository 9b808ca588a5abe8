"""The emulation of one run: a memory and I/O budget (a fresh cgroup) and read_ahead_kb, set up before the step,
entered by each of the step's processes, torn down after it (see ``runner.emulation``)."""

import os
import time

from runner.emulation import cgroup
from runner.emulation.base import EmulationError, block_path, requested, resources
from runner.emulation.cgroup import read, to_int, write
from runner.emulation.check import check, refusal
from runner.emulation.lock import lock, unlock
from runner.emulation.repair import repair_locked
from runner.emulation.state import (
    durable_path,
    forget_state,
    owner,
    restore_read_ahead,
    run_state_path,
    save_state,
    state_path,
)

GRACE_S = 2.0  # after the agent stopped the step's process groups, before SIGKILL of what is left


class Emulation:
    """The emulation of one run: setup before the step, ``enter`` in each step process, teardown after."""

    def __init__(self, spec, run_id, device):
        self.spec = spec or {}
        self.wanted = requested(self.spec)
        self.active = bool(self.wanted)
        self.run_id, self.device = run_id, device
        self.dirs = {}  # resource -> cgroup dir (one dir serves both on v2)
        self.lock_fd = None
        self.state = None
        self.record = {"requested": dict(self.spec.get("requested") or {}), "settings": dict(self.wanted)}

    def setup(self):
        if not self.active:
            return None
        missing = check(self.spec, self.device)
        if missing:
            raise EmulationError(refusal(missing))
        started = time.monotonic()
        if "read_ahead_kb" in self.wanted:
            # a machine-wide setting: one run at a time may change it (cgroups are per run, no lock)
            self.lock_fd = lock(blocking=True)
            self.record["lock_wait_s"] = round(time.monotonic() - started, 3)
            leftover = repair_locked()  # a runner that died before us
            if leftover:
                self.record["repaired"] = leftover
            started = time.monotonic()
        found = cgroup.detect()
        plan = dict((resource, found[resource]) for resource in resources(self.wanted))
        for resource, (version, hierarchy) in plan.items():
            # the pid keeps two live runs of the same run id (two sets on one machine) apart
            name = "%s.%d" % (self.run_id, os.getpid())
            self.dirs[resource] = os.path.join(cgroup.parent_dir(version, hierarchy, resource), name)
        # written before anything changes, so a runner killed from here on can be repaired
        self.state = dict(owner(self.run_id), cgroups=sorted(set(self.dirs.values())))
        save_state(self.state, run_state_path(os.getpid()))
        if "read_ahead_kb" in self.wanted:
            path = block_path(self.device, "queue/read_ahead_kb")
            self.state["read_ahead"] = {"path": path, "original": read(path)}
            save_state(dict(self.state, cgroups=[]), state_path())
            if durable_path():
                save_state(dict(self.state, cgroups=[]), durable_path())
        self.record["backend"] = dict((r, v) for r, (v, _h) in plan.items())
        self.record["cgroups"] = dict(self.dirs)
        try:
            self.record["effective"] = self._apply(plan)
        except OSError as exc:
            raise EmulationError("emulation setup failed: %s" % exc) from None
        self.record["setup_s"] = round(time.monotonic() - started, 4)  # harness overhead, per run
        return self.record

    def _apply(self, plan):
        """Make the cgroups, write the limits; return what the kernel reports back (rounded, as enforced)."""
        effective = {}
        for path in sorted(set(self.dirs.values())):
            users = [r for r in plan if self.dirs[r] == path]
            version, hierarchy = plan[users[0]]
            cgroup.make(version, hierarchy, path, users)
        if "memory" in plan:
            effective.update(cgroup.set_memory(self.dirs["memory"], int(self.wanted["memory_bytes"])))
        if "io" in plan:
            majmin = read(block_path(self.device, "dev"))
            self.record["device"] = {"name": self.device, "majmin": majmin}
            effective.update(cgroup.set_io(self.dirs["io"], majmin, self.wanted.get("read_bytes_per_s"),
                                           self.wanted.get("read_iops")))
        if "read_ahead_kb" in self.wanted:
            path = self.state["read_ahead"]["path"]
            self.record["read_ahead_kb_original"] = to_int(self.state["read_ahead"]["original"])
            write(path, self.wanted["read_ahead_kb"])
            effective["read_ahead_kb"] = to_int(read(path))
        return effective

    def enter(self):
        """In the child between fork and exec: join the run's cgroups, so all it touches is charged there."""
        cgroup.enter(sorted(set(self.dirs.values())))

    def note_before_step(self):
        """What the step really got: read back just before it starts."""
        if "read_ahead_kb" in self.wanted and self.state:
            self.record["read_ahead_kb_seen"] = to_int(read(self.state["read_ahead"]["path"]))

    def stats(self):
        out = {}
        if "memory" in self.dirs and os.path.isdir(self.dirs["memory"]):
            out.update(cgroup.memory_stats(self.dirs["memory"]))
        majmin = (self.record.get("device") or {}).get("majmin")
        if "io" in self.dirs and os.path.isdir(self.dirs["io"]) and majmin:
            out.update(cgroup.io_stats(self.dirs["io"], majmin))
        return out

    def teardown(self):
        """After the step's processes were stopped: stats, remove the cgroups, restore read_ahead_kb.

        Never raises: problems are recorded, and anything not undone stays in the state file for
        the next runner to repair.
        """
        if not self.active:
            return None
        errors = []
        started = time.monotonic()
        try:
            self._undo(errors)
        except Exception as exc:  # noqa: BLE001 - run.json must still be written; the state file stays
            errors.append("teardown: %r" % exc)
        unlock(self.lock_fd)
        self.lock_fd = None
        self.record["teardown_s"] = round(time.monotonic() - started, 4)
        if errors:
            self.record["teardown_errors"] = errors
        return self.record

    def _undo(self, errors):
        if self.state is None:
            return
        paths = sorted(set(self.dirs.values()))
        for path in paths:
            killed, _problem = cgroup.drain(path, GRACE_S)  # stats once every process is gone
            if killed:
                errors.append("killed pids %s left in %s after the step" % (killed, path))
        try:
            self.record["stats"] = self.stats()
        except Exception as exc:  # noqa: BLE001 - the cgroups must go even if a stat file is odd
            errors.append("stats: %r" % exc)
        for path in paths:
            problem = cgroup.remove(path, GRACE_S)
            if problem:
                errors.append(problem)
        removed = not any(os.path.isdir(path) for path in paths)
        self.record["cgroups_removed"] = removed
        if removed:
            os.remove(run_state_path(os.getpid()))
        if self.state.get("read_ahead"):
            try:
                self.record["read_ahead_kb_restored"] = to_int(restore_read_ahead(self.state))
                forget_state()
            except OSError as exc:
                errors.append("read_ahead_kb not restored: %s" % exc)
