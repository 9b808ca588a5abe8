"""``kernel.task_delayacct``: turned on for a run that collects counters, and restored after it -- like
read_ahead_kb (runner.emulation), a machine-wide setting, so the same care: the original value is written to a
state file before the setting changes, and a runner killed outright is repaired (``runner.emulation.repair``: at
every runner's start, and by the controller when it sees a runner dead).

Several runs on one machine may hold it on at once (two sets, two targets of one machine): the state file lists
its holders (pid and start time, so a reused pid is no match), and the last live holder to leave restores the
original. Kernels before 5.14 have no such sysctl: delay accounting is then on unless booted with nodelayacct.
Writes go through ``HARNESS_DELAYACCT_SYSCTL`` (default /proc/sys/kernel/task_delayacct) so a test can play it.
"""

import fcntl
import json
import os
from contextlib import contextmanager

from runner.util import read_value as read
from runner.util import start_time, state_dir
from runner.util import write_value as write


def load(path):
    try:
        return json.loads(read(path) or "null")
    except ValueError:
        return {}  # a torn write


def save_state(state, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as out:
        json.dump(state, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(path + ".tmp", path)


def sysctl_path():
    return os.environ.get("HARNESS_DELAYACCT_SYSCTL", "/proc/sys/kernel/task_delayacct")


def state_file():
    return os.path.join(state_dir(), "delayacct.json")


@contextmanager
def _locked():
    """Its own lock file: an emulated run holds the read_ahead_kb lock for its whole run."""
    os.makedirs(state_dir(), exist_ok=True)
    fd = os.open(os.path.join(state_dir(), "delayacct.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a read and a write: never long
        yield
    finally:
        os.close(fd)


def _me():
    return {"pid": os.getpid(), "start": start_time(os.getpid())}


def _alive(holder):
    try:
        return start_time(int(holder.get("pid"))) == holder.get("start")
    except (TypeError, ValueError):
        return False


def switch_on():
    """Delay accounting on for this process's run. Returns what the run record keeps: ``delayacct`` (on, off or
    None when the kernel has no switch), ``switched_by_harness``, ``original``, and ``note`` when it stays off."""
    current = read(sysctl_path())
    if current is None:
        return {"delayacct": None, "switched_by_harness": False,
                "note": "no %s: a kernel before 5.14 accounts delays unless booted with nodelayacct" % sysctl_path()}
    with _locked():
        state = load(state_file()) or {}
        holders = [h for h in state.get("holders", []) if _alive(h)]
        if current == "1" and not state:
            return {"delayacct": "on", "switched_by_harness": False, "original": 1}
        original = state.get("original", current)
        # written before the setting changes: a runner killed from here on is repaired
        save_state({"original": original, "holders": holders + [_me()]}, state_file())
        if current != "1":
            try:
                write(sysctl_path(), "1")
            except OSError as exc:
                _leave(state_file())
                return {"delayacct": "off", "switched_by_harness": False, "original": int(original),
                        "note": "cannot turn on %s: %s (needs root)" % (sysctl_path(), exc.strerror)}
    return {"delayacct": "on", "switched_by_harness": True, "original": int(original)}


def _leave(path, me=None):
    """Drop ``me`` (default: this process) and dead holders; restore the original once nobody holds it.
    Returns the restored value, or None while another live run still holds it."""
    me = me or _me()
    state = load(path) or {}
    holders = [h for h in state.get("holders", []) if _alive(h) and h != me]
    if holders:
        save_state(dict(state, holders=holders), path)
        return None
    if state.get("original") is not None and read(sysctl_path()) != str(state["original"]):
        write(sysctl_path(), state["original"])
    if os.path.exists(path):
        os.remove(path)
    return read(sysctl_path())


def switch_back(record):
    """Undo :func:`switch_on` (``record`` is what it returned); adds ``restored`` (or ``left_on_for_others``)."""
    if not record.get("switched_by_harness"):
        return record
    try:
        with _locked():
            restored = _leave(state_file())
    except OSError as exc:  # the state file stays: the next runner repairs
        return dict(record, restore_error="delayacct not restored: %s" % exc)
    if restored is None:
        return dict(record, left_on_for_others=True)
    return dict(record, restored=int(restored))


def repair():
    """Restore the original value a dead runner left changed (None: nothing to do, or a live run holds it)."""
    if not os.path.exists(state_file()):
        return None
    with _locked():
        state = load(state_file()) or {}
        dead = [h.get("pid") for h in state.get("holders", []) if not _alive(h)]
        if state.get("holders") and not dead:
            return None  # every holder is a live run
        restored = _leave(state_file(), me={"pid": None})
    if restored is None:
        return {"delayacct_dead_holders": dead, "note": "a live run still holds it on"}
    return {"delayacct_restored": int(restored), "delayacct_dead_holders": dead}
