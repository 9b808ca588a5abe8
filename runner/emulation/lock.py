"""The machine-wide emulation lock: one run at a time may change read_ahead_kb (a setting of the whole device)."""

import errno
import fcntl
import os
import sys
import time
from contextlib import contextmanager

from runner.emulation.base import EmulationError
from runner.emulation.state import state_dir

LOCK_WAIT_S = 3600.0  # another emulated run on this machine: wait for it rather than disturb it


def lock(blocking):
    """An exclusive flock on the state dir's lock file; None when busy and not ``blocking``."""
    os.makedirs(state_dir(), exist_ok=True)
    fd = os.open(os.path.join(state_dir(), "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
        if blocking and not announced:  # the runner's log says why the run has not started
            sys.stderr.write("emulation: waiting for %s (another run is changing read_ahead_kb)\n"
                             % os.path.join(state_dir(), "lock"))
            sys.stderr.flush()
            announced = True
        if not blocking or time.monotonic() > deadline:
            os.close(fd)
            if blocking:
                raise EmulationError("another emulated run on this machine held the lock %s for %.0f s"
                                     % (os.path.join(state_dir(), "lock"), LOCK_WAIT_S))
            return None
        time.sleep(0.2)  # a signal here raises the agent's Interrupted: waiting is interruptible


def unlock(fd):
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextmanager
def machine_lock():
    """Hold the machine-wide emulation lock (waiting for it, like an emulated run does): meanwhile no emulated run
    on this machine, of this campaign or another, changes read_ahead_kb."""
    fd = lock(blocking=True)
    try:
        yield
    finally:
        unlock(fd)
