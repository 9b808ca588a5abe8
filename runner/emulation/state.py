"""What a runner's emulation changed, kept on disk until it is undone, so a runner killed outright can be repaired.

- ``state.json``: read_ahead_kb's original value while a run has changed it (written and removed under the
  machine-wide lock); a second copy in the workdir (``DURABLE_ENV``) survives a lost /run.
- ``run-PID.json``: the cgroups of one live runner, removed with them.

The state lives in /run (cleared at reboot, exactly when the kernel resets the setting), not in one workdir: any
runner on the machine must be able to repair it.
"""

import json
import os

from runner.emulation.cgroup import read, write
from runner.util import start_time, state_dir

DURABLE_ENV = "HARNESS_EMULATE_DURABLE"


def durable_path():
    """A second copy of read_ahead_kb's original value in the workdir (the agent and the controller name it):
    /run is cleared by a reboot, or by hand, and a lost copy there left the emulated value in place to be
    recorded by later runs as the original."""
    base = os.environ.get(DURABLE_ENV)
    return os.path.join(base, "read_ahead.json") if base else None


def state_path():
    """read_ahead_kb's original value while a run has changed it (written and removed under the lock)."""
    return os.path.join(state_dir(), "state.json")


def run_state_path(pid):
    """The cgroups of one live runner, so they can be removed if it is killed."""
    return os.path.join(state_dir(), "run-%d.json" % pid)


def forget_state():
    """read_ahead_kb is restored: drop both copies of its original."""
    for path in (state_path(), durable_path()):
        if path and os.path.exists(path):
            os.remove(path)


def save_state(state, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        json.dump(state, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def load(path):
    try:
        return json.loads(read(path) or "null")
    except ValueError:
        return {}  # a torn write: nothing to undo in it


def owner(run_id):
    """Who writes a state: this process, by pid, start time and the run it emulates for."""
    return {"pid": os.getpid(), "start": start_time(os.getpid()), "run_id": run_id}


def owner_alive(state):
    """The process that wrote ``state`` still runs: the same start time at its pid (a later process given the number
    is no match), or, for a state of an older runner without one, its command line naming its run. The start time
    counts for a process that is no runner too (a benchmark or a test using the emulation): their command lines do
    not name the run, and every runner's repair took their live cgroups for a dead runner's and removed them."""
    if state.get("start") is not None:
        try:
            return start_time(int(state.get("pid"))) == state.get("start")
        except (TypeError, ValueError):
            return False
    try:
        with open("/proc/%d/cmdline" % int(state.get("pid")), "rb") as handle:
            return str(state.get("run_id")).encode() in handle.read()
    except (OSError, TypeError, ValueError):
        return False


def restore_read_ahead(state):
    saved = state.get("read_ahead")
    if not saved or saved.get("original") is None:
        return None
    write(saved["path"], saved["original"])
    now = read(saved["path"])
    if now != str(saved["original"]):
        raise OSError("read_ahead_kb reads %s after restoring %s" % (now, saved["original"]))
    return now
