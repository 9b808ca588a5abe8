"""Processes a run left behind, found by the mark every run puts in its environment, and stopped.

A runner that is SIGKILLed (or a step whose leader is) cannot clean up: fio's workers, re-parented to init, went on
reading the file for seconds while the next run was measured, and a sampler lived on for ever. Every process a run
starts inherits ``HARNESS_RUN_MARK=<set id>/<run id>`` (the runner sets it in its own environment first), so what a
run left can be found in /proc whatever became of its parent, and stopped before the next run of the same set
starts. A mark is ``<set id>/<target>/<run id>`` and a reap is scoped by a prefix of it: a run reaps only its own
target's runs of its set, so neither another campaign nor another target of the same set that shares this machine
(test boards on loopback, two targets on one host) is ever disturbed.

A run also reaps in itself: every process a step spawns carries ``HARNESS_RUN_SPAWN=<runner pid>/<n>`` too, so what
left the step's process group (fio's job processes call setsid; once fio's leader is SIGKILLed, they read on,
re-parented to init) is found and stopped when the run stops that process, before the run is recorded. A mark is
read again right before each signal: a pid that no longer carries it is left alone.
"""

import os
import signal
import time

MARK = "HARNESS_RUN_MARK"
SPAWN = "HARNESS_RUN_SPAWN"


def _env_of(pid, name=MARK):
    try:
        with open("/proc/%s/environ" % pid, "rb") as handle:
            env = handle.read()
    except OSError:
        return None
    prefix = (name + "=").encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def _mark_of(pid):
    return _env_of(pid, MARK)


def _comm(pid):
    try:
        with open("/proc/%s/comm" % pid) as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def in_scope(mark, scope):
    """Whether ``mark`` belongs to ``scope``: a whole set (``<set id>``) or one target's runs of it."""
    return mark == scope or mark.startswith(scope + "/")


def _marked(wanted):
    """``[(pid, comm, mark)]`` of live processes (but this one) whose environment ``wanted(pid)`` accepts."""
    if not os.path.isdir("/proc/self"):
        return []  # macOS: no /proc; its runs are stopped by process group only
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and wanted(name):
            found.append((int(name), _comm(name), _mark_of(name)))
    return found


def _exiting(pid):
    """Signalled but not yet dead: /proc/PID/stat still there and its state not Z (zombie) or X (dead)."""
    try:
        with open("/proc/%s/stat" % pid) as handle:
            state = handle.read().rsplit(") ", 1)[1][:1]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _in_scope(scope, keep_mark):
    def wanted(pid):
        mark = _mark_of(pid)
        return bool(mark) and in_scope(mark, scope) and mark != keep_mark
    return wanted


def _spawned_by(tag):
    return lambda pid: _env_of(pid, SPAWN) == tag


def strays(scope, keep_mark=None):
    """``[(pid, comm, mark)]`` of live processes marked with a run in ``scope`` (but ``keep_mark``)."""
    return _marked(_in_scope(scope, keep_mark))


def spawned(tag):
    """``[(pid, comm, mark)]`` of live processes descending from the step process tagged ``tag``."""
    return _marked(_spawned_by(tag))


def _stop(wanted, timeout_s):
    """SIGKILL every process ``wanted`` accepts, each checked again right before its signal (a pid that is another
    process's by then is left alone), and wait until none is left."""
    stopped = []
    for found in _marked(wanted):
        if not wanted(str(found[0])):
            continue
        try:
            os.kill(found[0], signal.SIGKILL)
        except OSError:
            continue
        stopped.append(found)
    deadline = time.monotonic() + timeout_s
    left = _marked(wanted)
    # an exiting process loses its environment (its memory) before it is a zombie: wait for the exit itself too,
    # so what is reported stopped has stopped (the test saw it still "running" right after)
    while (left or any(_exiting(pid) for pid, _comm, _mark in stopped)) and time.monotonic() < deadline:
        time.sleep(0.02)
        left = _marked(wanted)
    return {"stopped": [{"pid": pid, "comm": comm, "run": mark} for pid, comm, mark in stopped],
            "left": [{"pid": pid, "comm": comm, "run": mark} for pid, comm, mark in left]}


def reap(scope, keep_mark=None, timeout_s=10.0):
    """SIGKILL every stray in ``scope`` and wait until none is left. Returns what was stopped and whether all
    are gone (a process in uninterruptible I/O may take a moment to die)."""
    return _stop(_in_scope(scope, keep_mark), timeout_s)


def reap_spawned(tag, timeout_s=5.0):
    """SIGKILL what is left of the step process tagged ``tag`` (its group already stopped); as ``reap``."""
    return _stop(_spawned_by(tag), timeout_s)
