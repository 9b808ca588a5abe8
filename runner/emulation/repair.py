"""Undo what runners that died mid-run left changed: their cgroups, read_ahead_kb and kernel.task_delayacct.

Every runner repairs before anything else, and the controller runs ``python3 -m runner.emulation repair`` as
soon as it sees a runner dead.
"""

import os

from runner import delayacct
from runner.emulation import cgroup
from runner.emulation.cgroup import read, to_int
from runner.emulation.lock import lock, unlock
from runner.emulation.state import (
    durable_path,
    forget_state,
    load,
    owner_alive,
    restore_read_ahead,
    state_dir,
    state_path,
)


def repair_locked():
    """With the lock held: restore the read_ahead_kb a dead runner left changed (from the workdir's copy when
    the state in /run was lost)."""
    state = load(state_path())
    if state is None:
        return repair_from_workdir_locked()
    done = {"from_run": state.get("run_id"), "from_pid": state.get("pid")}
    if state.get("read_ahead"):
        done["read_ahead_kb_restored"] = restore_read_ahead(state)
        done["read_ahead_kb_path"] = state["read_ahead"]["path"]
    forget_state()
    return done


def repair_from_workdir_locked():
    """With the lock held, when /run lost its copy: restore read_ahead_kb from the workdir's, and say what the
    device had (the emulated value, or after a reboot the kernel's default) and what was restored."""
    path = durable_path()
    state = load(path) if path and os.path.exists(path) else None
    if not state or not state.get("read_ahead") or owner_alive(state):
        return None
    found = read(state["read_ahead"]["path"])
    restored = restore_read_ahead(state)
    os.remove(path)
    return {"from_run": state.get("run_id"), "from_pid": state.get("pid"), "source": "workdir",
            "read_ahead_kb_path": state["read_ahead"]["path"], "read_ahead_kb_found": to_int(found),
            "read_ahead_kb_restored": to_int(restored),
            "note": "the state in %s was lost (reboot, or removed); read_ahead_kb was %s (the emulated value, or "
                    "the kernel's default after a reboot) and is restored to the original %s kept in the workdir"
                    % (state_dir(), found, restored)}


def repair_dead_runs():
    """Remove the cgroups of runners that died (their run-PID.json stays behind)."""
    done = []
    try:
        names = sorted(n for n in os.listdir(state_dir()) if n.startswith("run-") and n.endswith(".json"))
    except OSError:
        return done
    for name in names:
        path = os.path.join(state_dir(), name)
        state = load(path)
        if state is None or owner_alive(state):
            continue
        notes = [n for n in (cgroup.remove(d, grace_s=0.0) for d in state.get("cgroups", [])) if n]
        left = [d for d in state.get("cgroups", []) if os.path.isdir(d)]
        if not left:
            os.remove(path)
        done.append({"from_run": state.get("run_id"), "from_pid": state.get("pid"), "notes": notes,
                     "cgroups_removed": [d for d in state.get("cgroups", []) if d not in left]})
    return done


def repair():
    """Restore what runners that died mid-run left changed (None: nothing to do). Run at every
    runner's start and by the controller when it sees a runner dead.

    read_ahead_kb is skipped while a live run holds the lock: its state is not leftover.
    """
    out = {}
    try:
        runs = repair_dead_runs()
        if runs:
            out["cgroups"] = runs
        durable = durable_path()
        if os.path.exists(state_path()) or (durable and os.path.exists(durable)):
            fd = lock(blocking=False)
            if fd is not None:
                try:
                    restored = repair_locked()
                finally:
                    unlock(fd)
                if restored:
                    out["read_ahead"] = restored
        switched = delayacct.repair()  # turned on for a run that collected counters
        if switched:
            out["delayacct"] = switched
    except OSError as exc:  # not root, or a sysfs write refused: recorded; the state stays for another try
        out["error"] = "repair failed: %s" % exc
    return out or None
