"""Board emulation on the target: a memory and I/O budget per run (cgroups) and read_ahead_kb.

``spec["emulate"]`` (from the controller) holds ``memory_bytes``, ``read_bytes_per_s``, ``read_iops``
and ``read_ahead_kb``, each optional. For one run:

- a fresh cgroup ``.../harness/<run_id>.<runner pid>`` gets the limits: cgroup v2 ``memory.max`` / ``io.max``
  where the v2 hierarchy offers the controller, cgroup v1 ``memory.limit_in_bytes`` /
  ``blkio.throttle.read_{bps,iops}_device`` otherwise. v1 also sets ``memory.memsw.limit_in_bytes``
  (v2: ``memory.swap.max 0``) where it exists: the budget is all the memory the step gets, it cannot
  spill into the host's swap (a board's zram is not emulated).
- The step's processes enter the cgroup between fork and exec (``enter`` as Popen's preexec_fn), so
  every page they touch -- page cache included -- is charged to the budget from the first one.
- Pages stay charged to the cgroup that first touched them. The runner's cache preparation (cachectl)
  runs outside: cold evicts the file first, so the step faults it all in under the budget; warm means
  the file sits in the host's page cache, charged outside the budget, and the step reads it without
  device I/O -- the no-I/O bound, not what a small board could keep resident.
- ``read_ahead_kb`` is a machine-wide block-device setting. It is changed only under a machine-wide
  lock, after the original value was written to a state file, and restored in teardown (the agent's
  finally-block, which also runs on SIGTERM). A runner killed outright leaves the state file: the
  controller runs ``repair`` as soon as it sees the runner dead, and every runner does before anything
  else. The original value is in run.json as well. Each runner's cgroups are recorded the same way
  (run-PID.json, no lock needed: they are its own) and removed once that runner is dead. The state lives in /run
  (cleared at reboot, exactly when the kernel resets the setting), not in one workdir: any runner on
  the machine must be able to repair it.
- What the machine does not allow is a refusal (EmulationError naming what is missing), never a
  silently unemulated run.

The cgroup file formats (v1 and v2) live in ``runner/cgroup.py``.
"""

import errno
import fcntl
import json
import os
import sys
import tempfile
import time

from runner import cgroup, probe
from runner.cgroup import read, to_int, write

KEYS = ("memory_bytes", "read_bytes_per_s", "read_iops", "read_ahead_kb")
LOCK_WAIT_S = 3600.0  # another emulated run on this machine: wait for it rather than disturb it
GRACE_S = 2.0  # after the agent stopped the step's process groups, before SIGKILL of what is left


class EmulationError(Exception):
    """The machine does not allow the requested emulation; the run is refused."""


def state_dir():
    configured = os.environ.get("HARNESS_EMULATE_STATE")
    if configured:
        return configured
    return "/run/harness" if os.path.isdir("/run") else os.path.join(tempfile.gettempdir(), "harness-state")


DURABLE_ENV = "HARNESS_EMULATE_DURABLE"


def _durable_path():
    """A second copy of read_ahead_kb's original value in the workdir (the agent and the controller name it):
    /run is cleared by a reboot, or by hand, and a lost copy there left the emulated value in place to be
    recorded by later runs as the original."""
    base = os.environ.get(DURABLE_ENV)
    return os.path.join(base, "read_ahead.json") if base else None


def _forget_state():
    """read_ahead_kb is restored: drop both copies of its original."""
    for path in (_state_path(), _durable_path()):
        if path and os.path.exists(path):
            os.remove(path)


def _block(device, rel):
    return probe.ROOT + "/sys/block/%s/%s" % (device, rel)


def _requested(spec):
    return dict((k, spec.get(k)) for k in KEYS if spec.get(k) is not None)


def _resources(wanted):
    """The cgroup resources ``wanted`` needs: memory and/or io."""
    out = []
    if "memory_bytes" in wanted:
        out.append("memory")
    if "read_bytes_per_s" in wanted or "read_iops" in wanted:
        out.append("io")
    return out


def _nearest_existing(path):
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check(spec, device):
    """What is missing for ``spec`` on this machine, as short phrases (empty: all is possible)."""
    wanted = _requested(spec or {})
    resources = _resources(wanted)
    missing = []
    found = cgroup.detect()
    for resource in resources:
        if resource not in found:
            what = ("memory controller (no v2 memory.max, no v1 memory.limit_in_bytes)" if resource == "memory"
                    else "blkio/io controller (no v2 io.max, no v1 blkio.throttle.read_bps_device)")
            missing.append("no cgroup %s under %s" % (what, cgroup.cgroup_root()))
            continue
        existing = _nearest_existing(cgroup.parent_dir(found[resource][0], found[resource][1], resource))
        if not os.access(existing, os.W_OK):
            missing.append("cannot create cgroups in %s (needs root)" % existing)
    if ("io" in resources or "read_ahead_kb" in wanted) and not device:
        missing.append("no block device known for the run's files (set block_device in the target)")
    elif device:
        if "io" in resources and read(_block(device, "dev")) is None:
            missing.append("no %s (block device %s unknown)" % (_block(device, "dev"), device))
        if "read_ahead_kb" in wanted:
            path = _block(device, "queue/read_ahead_kb")
            if read(path) is None:
                missing.append("no %s" % path)
            elif not os.access(path, os.W_OK):
                missing.append("cannot write %s (needs root)" % path)
    if wanted and not os.access(_nearest_existing(state_dir()), os.W_OK):
        missing.append("cannot write the emulation state directory %s" % state_dir())
    return missing


def refusal(missing):
    return "emulation refused, this machine cannot do it: " + "; ".join(missing)


# ---------------------------------------------------------------------- machine-wide lock and state
def _lock(blocking):
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


def _unlock(fd):
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _state_path():
    """read_ahead_kb's original value while a run has changed it (written and removed under the lock)."""
    return os.path.join(state_dir(), "state.json")


def _run_state_path(pid):
    """The cgroups of one live runner, so they can be removed if it is killed."""
    return os.path.join(state_dir(), "run-%d.json" % pid)


def _save_state(state, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        json.dump(state, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _owner_alive(state):
    """The runner that wrote ``state`` still runs (its command line names its run, so pid reuse is no match)."""
    try:
        with open("/proc/%d/cmdline" % int(state.get("pid")), "rb") as handle:
            return str(state.get("run_id")).encode() in handle.read()
    except (OSError, TypeError, ValueError):
        return False


def _restore_read_ahead(state):
    saved = state.get("read_ahead")
    if not saved or saved.get("original") is None:
        return None
    write(saved["path"], saved["original"])
    now = read(saved["path"])
    if now != str(saved["original"]):
        raise OSError("read_ahead_kb reads %s after restoring %s" % (now, saved["original"]))
    return now


def _load(path):
    try:
        return json.loads(read(path) or "null")
    except ValueError:
        return {}  # a torn write: nothing to undo in it


def _repair_locked():
    """With the lock held: restore the read_ahead_kb a dead runner left changed (from the workdir's copy when
    the state in /run was lost)."""
    state = _load(_state_path())
    if state is None:
        return _repair_from_workdir_locked()
    done = {"from_run": state.get("run_id"), "from_pid": state.get("pid")}
    if state.get("read_ahead"):
        done["read_ahead_kb_restored"] = _restore_read_ahead(state)
        done["read_ahead_kb_path"] = state["read_ahead"]["path"]
    _forget_state()
    return done


def _repair_from_workdir_locked():
    """With the lock held, when /run lost its copy: restore read_ahead_kb from the workdir's, and say what the
    device had (the emulated value, or after a reboot the kernel's default) and what was restored."""
    path = _durable_path()
    state = _load(path) if path and os.path.exists(path) else None
    if not state or not state.get("read_ahead") or _owner_alive(state):
        return None
    found = read(state["read_ahead"]["path"])
    restored = _restore_read_ahead(state)
    os.remove(path)
    return {"from_run": state.get("run_id"), "from_pid": state.get("pid"), "source": "workdir",
            "read_ahead_kb_path": state["read_ahead"]["path"], "read_ahead_kb_found": to_int(found),
            "read_ahead_kb_restored": to_int(restored),
            "note": "the state in %s was lost (reboot, or removed); read_ahead_kb was %s (the emulated value, or "
                    "the kernel's default after a reboot) and is restored to the original %s kept in the workdir"
                    % (state_dir(), found, restored)}


def _repair_dead_runs():
    """Remove the cgroups of runners that died (their run-PID.json stays behind)."""
    done = []
    try:
        names = sorted(n for n in os.listdir(state_dir()) if n.startswith("run-") and n.endswith(".json"))
    except OSError:
        return done
    for name in names:
        path = os.path.join(state_dir(), name)
        state = _load(path)
        if state is None or _owner_alive(state):
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
        runs = _repair_dead_runs()
        if runs:
            out["cgroups"] = runs
        durable = _durable_path()
        if os.path.exists(_state_path()) or (durable and os.path.exists(durable)):
            fd = _lock(blocking=False)
            if fd is not None:
                try:
                    restored = _repair_locked()
                finally:
                    _unlock(fd)
                if restored:
                    out["read_ahead"] = restored
    except OSError as exc:  # not root, or a sysfs write refused: recorded; the state stays for another try
        out["error"] = "repair failed: %s" % exc
    return out or None


# ---------------------------------------------------------------------- one run
class Emulation:
    """The emulation of one run: setup before the step, ``enter`` in each step process, teardown after."""

    def __init__(self, spec, run_id, device):
        self.spec = spec or {}
        self.wanted = _requested(self.spec)
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
            self.lock_fd = _lock(blocking=True)
            self.record["lock_wait_s"] = round(time.monotonic() - started, 3)
            leftover = _repair_locked()  # a runner that died before us
            if leftover:
                self.record["repaired"] = leftover
            started = time.monotonic()
        found = cgroup.detect()
        plan = dict((resource, found[resource]) for resource in _resources(self.wanted))
        for resource, (version, hierarchy) in plan.items():
            # the pid keeps two live runs of the same run id (two sets on one machine) apart
            name = "%s.%d" % (self.run_id, os.getpid())
            self.dirs[resource] = os.path.join(cgroup.parent_dir(version, hierarchy, resource), name)
        # written before anything changes, so a runner killed from here on can be repaired
        self.state = {"pid": os.getpid(), "run_id": self.run_id, "cgroups": sorted(set(self.dirs.values()))}
        _save_state(self.state, _run_state_path(os.getpid()))
        if "read_ahead_kb" in self.wanted:
            path = _block(self.device, "queue/read_ahead_kb")
            self.state["read_ahead"] = {"path": path, "original": read(path)}
            _save_state(dict(self.state, cgroups=[]), _state_path())
            if _durable_path():
                _save_state(dict(self.state, cgroups=[]), _durable_path())
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
            majmin = read(_block(self.device, "dev"))
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
        _unlock(self.lock_fd)
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
            os.remove(_run_state_path(os.getpid()))
        if self.state.get("read_ahead"):
            try:
                self.record["read_ahead_kb_restored"] = to_int(_restore_read_ahead(self.state))
                _forget_state()
            except OSError as exc:
                errors.append("read_ahead_kb not restored: %s" % exc)


def main(argv=None):
    """``python3 -m runner.emulate check --emulate JSON [--block-device D] [--file F]...``: the
    controller's preflight; prints one line and exits 1 when the machine cannot emulate.
    ``python3 -m runner.emulate repair``: the controller's clean-up after a runner died."""
    import argparse

    parser = argparse.ArgumentParser(prog="runner.emulate")
    sub = parser.add_subparsers(dest="command", required=True)
    check_p = sub.add_parser("check")
    check_p.add_argument("--emulate", required=True, help="JSON: which of %s are wanted" % ", ".join(KEYS))
    check_p.add_argument("--block-device", default="auto")
    check_p.add_argument("--file", action="append", default=[])
    sub.add_parser("repair", help="undo what a runner that died mid-run left changed; prints what (or null)")
    args = parser.parse_args(argv)
    if args.command == "repair":
        print(json.dumps(repair()))
        return 0
    wanted = json.loads(args.emulate)
    # files to be created later: their nearest existing directory tells the disk
    device = probe.resolve_block_device(args.block_device, [_nearest_existing(p) for p in args.file])
    missing = check(wanted, device)
    if missing:
        print(refusal(missing))
        return 1
    print(json.dumps({"ok": True, "device": device, "backends": dict((k, v[0]) for k, v in cgroup.detect().items())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
