"""A memory budget of its own for part of a step: the equivalence step runs each side in a cgroup of its own.

A side's cgroup is made inside the run's memory cgroup when the run has one (``emulate: {memory: ...}``): the run's
budget stays the board's memory and still bounds the side. On cgroup v2 it is made inside the run's cgroup whatever
that holds (an io.max stays in force below it), and a side that declares no budget still gets a child there,
because v2 lets no process join a cgroup whose children hold controllers. Without a run cgroup to nest in, a side
that declares a budget gets a sibling of the run's cgroups (``harness/<run>.<pid>.<side>``, v1: the run's blkio
cgroup still joined), and one without a budget gets nothing: its processes join the run's cgroups as any step's do.

The cgroup is recorded in the runner's ``run-PID.json`` before it is made, listed before the run's own (a
child must go before its parent), so a runner killed mid-side is repaired like any run (``repair``); the
teardown removes it and its entry.
"""

import os

from runner.emulation import cgroup
from runner.emulation.base import EmulationError
from runner.emulation.state import load, owner, run_state_path, save_state


class SideBudget:
    """One side's cgroup: ``setup`` before its processes start, ``enter`` in each (Popen preexec_fn), ``teardown``
    after they were stopped. ``dirs`` maps resource -> cgroup dir, like :class:`runner.emulation.run.Emulation`."""

    def __init__(self, run_emulation, run_id, side, memory_bytes):
        self.run_dirs = dict(getattr(run_emulation, "dirs", None) or {})
        self.run_id, self.side, self.memory_bytes = run_id, side, memory_bytes
        self.dirs = dict(self.run_dirs)  # what the side's processes join (the run's, until setup makes its own)
        self.path = None
        self._made_state_file = False
        self.record = {"memory_bytes_requested": memory_bytes}

    def setup(self):
        """Make the side's cgroup (if it needs one) and set its memory.max; the record says where and what."""
        found = cgroup.detect() if self.memory_bytes is not None or self.run_dirs else {}
        version, hierarchy = found.get("memory") or (None, None)
        # v2 keeps every controller in one dir: a side nested in the run's io-only cgroup keeps its io.max, and
        # once one side has a child there, no process may join that dir itself (v2's no-internal-process rule)
        holder = self.run_dirs.get("memory") or (self.run_dirs.get("io") if version == "v2" else None)
        if self.memory_bytes is None and not holder:
            return self.record
        if version is None:
            raise EmulationError("side %s: a memory budget needs a cgroup memory controller, and %s has none"
                                 % (self.side, cgroup.cgroup_root()))
        if holder:
            self.path = os.path.join(holder, "side-" + self.side)
        else:
            name = "%s.%d.%s" % (self.run_id, os.getpid(), self.side)
            self.path = os.path.join(cgroup.parent_dir(version, hierarchy, "memory"), name)
        self._remember(True)
        try:
            if version == "v2":
                _pass_memory_down(hierarchy, os.path.dirname(self.path))
            cgroup.make(version, hierarchy, self.path, ["memory"])
            if self.memory_bytes is not None:
                self.record.update(cgroup.set_memory(self.path, int(self.memory_bytes)))
        except OSError as exc:
            raise EmulationError("side %s: cannot make its cgroup %s: %s" % (self.side, self.path, exc)) from None
        self.dirs["memory"] = self.path
        if version == "v2":  # one dir holds every controller; the child inherits the run's io.max from its parent
            self.dirs = {"memory": self.path}
        self.record.update(cgroup=self.path, backend=version)
        return self.record

    def enter(self):
        """In the child between fork and exec (as ``Emulation.enter``)."""
        cgroup.enter(sorted(set(self.dirs.values())))

    def teardown(self, grace_s=2.0):
        """Stats (peak, limit hits, OOM kills, major faults), then remove the cgroup and its state entry.
        Never raises: a problem is recorded, and the state entry stays for ``repair``."""
        if self.path is None:
            return self.record
        try:
            _killed, problem = cgroup.drain(self.path, grace_s)
            self.record["stats"] = cgroup.memory_stats(self.path)
            problem = problem or cgroup.remove(self.path, grace_s)
            if problem:
                self.record["teardown_error"] = problem
            if not os.path.isdir(self.path):
                self._remember(False)
                self.record["removed"] = True
        except Exception as exc:  # noqa: BLE001 - the step's record must still be written
            self.record["teardown_error"] = "side %s teardown: %r" % (self.side, exc)
        return self.record

    def _remember(self, present):
        """Add (first: children go before parents) or drop the side's cgroup in this runner's state file. A file
        the run's emulation wrote stays (it removes it itself); one made here goes once it lists nothing."""
        path = run_state_path(os.getpid())
        existed = os.path.exists(path)
        if present:
            self._made_state_file = not existed
        state = (load(path) if existed else None) or dict(owner(self.run_id), cgroups=[])
        others = [d for d in state.get("cgroups", []) if d != self.path]
        state["cgroups"] = ([self.path] if present else []) + others
        if state["cgroups"] or not self._made_state_file:
            save_state(state, path)
        elif existed:
            os.remove(path)


def _pass_memory_down(hierarchy, parent):
    """cgroup v2: enable the memory controller in every ancestor's subtree_control from the root to ``parent``
    (the run's cgroup may hold only io, and its parent then passes only io down)."""
    chain = []
    where = parent
    while where.startswith(hierarchy) and where != hierarchy:
        chain.append(where)
        where = os.path.dirname(where)
    for directory in [hierarchy] + list(reversed(chain))[:-1]:
        control = os.path.join(directory, "cgroup.subtree_control")
        if os.path.isdir(directory) and "memory" not in (cgroup.read(control) or "").split():
            cgroup.write(control, "+memory")
