"""Processes a run left behind, found by the mark every run puts in its environment, and stopped.

A runner that is SIGKILLed (or a step whose leader is) cannot clean up: fio's workers, re-parented to init, went on
reading the file for seconds while the next run was measured, and a sampler lived on for ever. Every process a run
starts inherits ``HARNESS_RUN_MARK=<set id>/<run id>`` (the runner sets it in its own environment first), so what a
run left can be found in /proc whatever became of its parent, and stopped before the next run of the same set
starts. A mark is ``<set id>/<target>/<run id>`` and a reap is scoped by a prefix of it: a run reaps only its own
target's runs of its set, so neither another campaign nor another target of the same set that shares this machine
(test boards on loopback, two targets on one host) is ever disturbed.
"""

import os
import signal
import time

MARK = "HARNESS_RUN_MARK"


def _mark_of(pid):
    try:
        with open("/proc/%s/environ" % pid, "rb") as handle:
            env = handle.read()
    except OSError:
        return None
    prefix = (MARK + "=").encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def _comm(pid):
    try:
        with open("/proc/%s/comm" % pid) as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def in_scope(mark, scope):
    """Whether ``mark`` belongs to ``scope``: a whole set (``<set id>``) or one target's runs of it."""
    return mark == scope or mark.startswith(scope + "/")


def strays(scope, keep_mark=None):
    """``[(pid, comm, mark)]`` of live processes marked with a run in ``scope`` (but ``keep_mark``)."""
    if not os.path.isdir("/proc/self"):
        return []  # macOS: no /proc; its runs are stopped by process group only
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        mark = _mark_of(name)
        if mark and in_scope(mark, scope) and mark != keep_mark:
            found.append((int(name), _comm(name), mark))
    return found


def reap(scope, keep_mark=None, timeout_s=10.0):
    """SIGKILL every stray in ``scope`` and wait until none is left. Returns what was stopped and whether all
    are gone (a process in uninterruptible I/O may take a moment to die)."""
    stopped = strays(scope, keep_mark)
    for pid, _comm_name, _mark in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + timeout_s
    left = strays(scope, keep_mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = strays(scope, keep_mark)
    return {"stopped": [{"pid": pid, "comm": comm, "run": mark} for pid, comm, mark in stopped],
            "left": [{"pid": pid, "comm": comm, "run": mark} for pid, comm, mark in left]}
