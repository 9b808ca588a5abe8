"""Board emulation on the target: a memory and I/O budget per run (cgroups) and read_ahead_kb.

``spec["emulate"]`` (from the controller) holds ``memory_bytes``, ``read_bytes_per_s``, ``read_iops``
and ``read_ahead_kb``, each optional. For one run:

- a fresh cgroup ``.../harness/<run_id>`` gets the limits: cgroup v2 ``memory.max`` / ``io.max``
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
  finally-block, which also runs on SIGTERM). A runner killed outright leaves the state file; the
  next runner restores from it before doing anything else (``repair``). The state lives in /run
  (cleared at reboot, exactly when the kernel resets the setting), not in one workdir: any runner on
  the machine must be able to repair it.
- What the machine does not allow is a refusal (EmulationError naming what is missing), never a
  silently unemulated run.

Paths go through ``HARNESS_CGROUP_ROOT`` (default /sys/fs/cgroup) so a test can point it at an empty
directory to play a machine without the controllers.
"""

import errno
import fcntl
import json
import os
import signal
import sys
import tempfile
import time

from runner import probe

KEYS = ("memory_bytes", "read_bytes_per_s", "read_iops", "read_ahead_kb")
PARENT = "harness"
LOCK_WAIT_S = 3600.0  # another emulated run on this machine: wait for it rather than disturb it
GRACE_S = 2.0  # after the agent stopped the step's process groups, before SIGKILL of what is left
KILL_WAIT_S = 10.0


class EmulationError(Exception):
    """The machine does not allow the requested emulation; the run is refused."""


def cgroup_root():
    return os.environ.get("HARNESS_CGROUP_ROOT", "/sys/fs/cgroup")


def state_dir():
    configured = os.environ.get("HARNESS_EMULATE_STATE")
    if configured:
        return configured
    return "/run/harness" if os.path.isdir("/run") else os.path.join(tempfile.gettempdir(), "harness-state")


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _write(path, value):
    # one write() per value: cgroup and sysfs files take a whole value per write call
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _keyed(text, sep=" "):
    """'key value' lines (memory.stat, memory.events, oom_control) -> dict of ints."""
    out = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(sep)
        if _int(value.strip()) is not None:
            out[key.strip()] = int(value.strip())
    return out


def own_cgroup(controller):
    """This process's cgroup path in the v1 hierarchy holding ``controller`` (e.g. '/process_api/x')."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2].rstrip("/")
    return ""


def _v2_roots(root):
    """Mount points of the unified hierarchy: pure v2 at the root, hybrid at root/unified."""
    return [path for path in (root, os.path.join(root, "unified"))
            if os.path.exists(os.path.join(path, "cgroup.controllers"))]


def detect(root=None):
    """Where each resource can be limited: {'memory': ('v2'|'v1', hierarchy dir), 'io': (...)}."""
    root = root or cgroup_root()
    found = {}
    for v2 in _v2_roots(root):
        controllers = (_read(os.path.join(v2, "cgroup.controllers")) or "").split()
        for name in ("memory", "io"):
            if name in controllers and name not in found:
                found[name] = ("v2", v2)
    if "memory" not in found and os.path.exists(os.path.join(root, "memory", "memory.limit_in_bytes")):
        found["memory"] = ("v1", os.path.join(root, "memory"))
    if "io" not in found and os.path.exists(os.path.join(root, "blkio", "blkio.throttle.read_bps_device")):
        found["io"] = ("v1", os.path.join(root, "blkio"))
    return found


def _parent_dir(version, hierarchy, resource):
    """Where the per-run cgroups are made.

    v1: under the runner's own cgroup, so limits set on whatever started the runner still bound the
    step (nesting is free in v1). v2: at the root of the hierarchy, because a v2 cgroup that holds
    processes (a login session, a service) cannot hand controllers to children.
    """
    if version == "v2":
        return os.path.join(hierarchy, PARENT)
    own = own_cgroup("memory" if resource == "memory" else "blkio")
    return hierarchy + own + "/" + PARENT


def _block(device, rel):
    return probe.ROOT + "/sys/block/%s/%s" % (device, rel)


def _requested(spec):
    return dict((k, spec.get(k)) for k in KEYS if spec.get(k) is not None)


def check(spec, device):
    """What is missing for ``spec`` on this machine, as short phrases (empty: all is possible)."""
    wanted = _requested(spec or {})
    missing = []
    found = detect()
    root = cgroup_root()
    needs = [("memory", "memory_bytes" in wanted), ("io", "read_bytes_per_s" in wanted or "read_iops" in wanted)]
    for resource, needed in needs:
        if not needed:
            continue
        if resource not in found:
            what = ("memory controller (no v2 memory.max, no v1 memory.limit_in_bytes)" if resource == "memory"
                    else "blkio/io controller (no v2 io.max, no v1 blkio.throttle.read_bps_device)")
            missing.append("no cgroup %s under %s" % (what, root))
            continue
        version, hierarchy = found[resource]
        parent = _parent_dir(version, hierarchy, resource)
        existing = parent if os.path.isdir(parent) else os.path.dirname(parent)
        if not os.access(existing, os.W_OK):
            missing.append("cannot create cgroups in %s (needs root)" % existing)
    if ("io" in [n for n, needed in needs if needed] or "read_ahead_kb" in wanted) and not device:
        missing.append("no block device known for the run's files (set block_device in the target)")
    elif device:
        if "io" in [n for n, needed in needs if needed] and _read(_block(device, "dev")) is None:
            missing.append("no %s (block device %s unknown)" % (_block(device, "dev"), device))
        if "read_ahead_kb" in wanted:
            path = _block(device, "queue/read_ahead_kb")
            if _read(path) is None:
                missing.append("no %s" % path)
            elif not os.access(path, os.W_OK):
                missing.append("cannot write %s (needs root)" % path)
    if wanted:
        state = state_dir()
        existing = state if os.path.isdir(state) else os.path.dirname(state)
        if not os.access(existing, os.W_OK):
            missing.append("cannot write the emulation state directory %s" % state)
    return missing


def refusal(missing):
    return "emulation refused, this machine cannot do it: " + "; ".join(missing)


# ---------------------------------------------------------------------- machine-wide lock and state
def _lock(blocking):
    """An exclusive flock on the state dir's lock file; None when busy and not ``blocking``."""
    os.makedirs(state_dir(), exist_ok=True)
    fd = os.open(os.path.join(state_dir(), "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
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
    return os.path.join(state_dir(), "state.json")


def _save_state(state):
    tmp = _state_path() + ".tmp"
    with open(tmp, "w") as out:
        json.dump(state, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, _state_path())


def _procs(cgroup_dir):
    return [int(p) for p in (_read(os.path.join(cgroup_dir, "cgroup.procs")) or "").split() if p.isdigit()]


def _drain(cgroup_dir, grace_s):
    """Wait for the cgroup to empty; after ``grace_s`` SIGKILL by pid whatever is still in it.

    Only the run's processes are ever put in it, so anything left there is the run's: a child that
    left the step's process group, or one whose parent died. Returns (killed pids, problem or None).
    """
    start = time.monotonic()
    killed = []
    while True:
        pids = _procs(cgroup_dir)
        if not pids:
            return killed, None
        waited = time.monotonic() - start
        if waited > grace_s + KILL_WAIT_S:
            return killed, "cgroup %s still holds pids %s" % (cgroup_dir, pids)
        if waited > grace_s:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                if pid not in killed:
                    killed.append(pid)
        time.sleep(0.05)


def _empty_and_remove(cgroup_dir, grace_s=GRACE_S):
    """Drain the cgroup and rmdir it (and harness/ when that is empty); a problem as text, or None."""
    if not os.path.isdir(cgroup_dir):
        return None
    killed, problem = _drain(cgroup_dir, grace_s)
    if problem:
        return problem
    for _attempt in range(50):
        try:
            os.rmdir(cgroup_dir)
            _remove_parent_if_empty(cgroup_dir)
            return "killed leftover pids %s" % killed if killed else None
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            if exc.errno != errno.EBUSY:
                return "cannot remove %s: %s" % (cgroup_dir, exc.strerror)
        time.sleep(0.1)
    return "cannot remove %s: still busy" % cgroup_dir


def _remove_parent_if_empty(cgroup_dir):
    """harness/ goes too once its last run is gone: nothing of ours stays in someone else's cgroup."""
    parent = os.path.dirname(cgroup_dir)
    if os.path.basename(parent) == PARENT:
        try:
            os.rmdir(parent)
        except OSError:
            pass  # another run's cgroup is still in it


def _restore_read_ahead(state):
    saved = state.get("read_ahead")
    if not saved:
        return None
    _write(saved["path"], saved["original"])
    now = _read(saved["path"])
    if now != str(saved["original"]):
        raise OSError("read_ahead_kb reads %s after restoring %s" % (now, saved["original"]))
    return now


def _repair_locked():
    """With the lock held: undo what the state file says a dead runner left changed."""
    state_text = _read(_state_path())
    if state_text is None:
        return None
    try:
        state = json.loads(state_text)
    except ValueError:
        os.remove(_state_path())
        return {"error": "unreadable state file removed"}
    done = {"from_run": state.get("run_id"), "from_pid": state.get("pid")}
    if state.get("read_ahead"):
        done["read_ahead_kb_restored"] = _restore_read_ahead(state)
        done["read_ahead_kb_path"] = state["read_ahead"]["path"]
    problems = [p for p in (_empty_and_remove(d, grace_s=0.0) for d in state.get("cgroups", [])) if p]
    if problems:
        done["cgroup_problems"] = problems
    done["cgroups_removed"] = state.get("cgroups", [])
    os.remove(_state_path())
    return done


def repair():
    """At runner start: restore what a runner that died mid-run left changed (None: nothing to do).

    Skipped while a live emulated run holds the lock: its state is not leftover.
    """
    if not os.path.exists(_state_path()):
        return None
    try:
        fd = _lock(blocking=False)
    except OSError:
        return None  # not allowed to (not root): it could not undo the settings anyway
    if fd is None:
        return None
    try:
        return _repair_locked()
    finally:
        _unlock(fd)


# ---------------------------------------------------------------------- one run
class Emulation:
    """The emulation of one run: setup before the step, ``enter`` in each step process, teardown after."""

    def __init__(self, spec, run_id, device):
        self.spec = spec or {}
        self.wanted = _requested(self.spec)
        self.active = bool(self.wanted)
        self.run_id, self.device = run_id, device
        self.dirs = {}  # resource -> cgroup dir
        self.lock_fd = None
        self.state = None
        self.record = {"requested": dict(self.spec.get("requested") or {}), "settings": dict(self.wanted)}

    # -- setup
    def setup(self):
        if not self.active:
            return None
        missing = check(self.spec, self.device)
        if missing:
            raise EmulationError(refusal(missing))
        waited = time.monotonic()
        self.lock_fd = _lock(blocking=True)
        self.record["lock_wait_s"] = round(time.monotonic() - waited, 3)
        leftover = _repair_locked()  # a runner that died while we waited for its lock
        if leftover:
            self.record["repaired"] = leftover
        found = detect()
        plan = {}
        if "memory_bytes" in self.wanted:
            plan["memory"] = found["memory"]
        if "read_bytes_per_s" in self.wanted or "read_iops" in self.wanted:
            plan["io"] = found["io"]
        for resource, (version, hierarchy) in plan.items():
            self.dirs[resource] = os.path.join(_parent_dir(version, hierarchy, resource), self.run_id)
        # written before anything changes, so a runner killed from here on can be repaired
        self.state = {"pid": os.getpid(), "run_id": self.run_id, "cgroups": sorted(set(self.dirs.values()))}
        if "read_ahead_kb" in self.wanted:
            path = _block(self.device, "queue/read_ahead_kb")
            self.state["read_ahead"] = {"path": path, "original": _read(path)}
        _save_state(self.state)
        self.record["backend"] = dict((r, v) for r, (v, _h) in plan.items())
        self.record["cgroups"] = dict(self.dirs)
        effective = {}
        try:
            for resource, (version, hierarchy) in plan.items():
                self._make(version, hierarchy, resource)
                effective.update(self._limit(version, resource))
            if "read_ahead_kb" in self.wanted:
                path = self.state["read_ahead"]["path"]
                self.record["read_ahead_kb_original"] = _int(self.state["read_ahead"]["original"])
                _write(path, self.wanted["read_ahead_kb"])
                effective["read_ahead_kb"] = _int(_read(path))
        except OSError as exc:
            raise EmulationError("emulation setup failed: %s" % exc) from None
        self.record["effective"] = effective
        return self.record

    def _make(self, version, hierarchy, resource):
        parent = os.path.dirname(self.dirs[resource])
        if not os.path.isdir(parent):
            os.makedirs(parent)
        if version == "v2":
            control = "+memory" if resource == "memory" else "+io"
            for where in (hierarchy, parent):  # the root and harness/ pass the controller down
                current = (_read(os.path.join(where, "cgroup.subtree_control")) or "").split()
                if control[1:] not in current:
                    _write(os.path.join(where, "cgroup.subtree_control"), control)
        if os.path.isdir(self.dirs[resource]):
            problem = _empty_and_remove(self.dirs[resource], grace_s=0.0)
            if problem:
                raise OSError(problem)
        if not os.path.isdir(self.dirs[resource]):  # one dir serves memory and io on v2
            os.mkdir(self.dirs[resource])

    def _limit(self, version, resource):
        """Write the limits, return the values the kernel reports back (rounded, as enforced)."""
        cg = self.dirs[resource]
        out = {}
        if resource == "memory":
            limit = int(self.wanted["memory_bytes"])
            if version == "v1":
                _write(os.path.join(cg, "memory.limit_in_bytes"), limit)  # before memsw: memsw >= limit
                out["memory_bytes"] = _int(_read(os.path.join(cg, "memory.limit_in_bytes")))
                memsw = os.path.join(cg, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):
                    _write(memsw, limit)
                    out["memory_swap_bytes"] = _int(_read(memsw)) - out["memory_bytes"]
            else:
                _write(os.path.join(cg, "memory.max"), limit)
                out["memory_bytes"] = _int(_read(os.path.join(cg, "memory.max")))
                if os.path.exists(os.path.join(cg, "memory.swap.max")):
                    _write(os.path.join(cg, "memory.swap.max"), 0)
                    out["memory_swap_bytes"] = _int(_read(os.path.join(cg, "memory.swap.max")))
            return out
        majmin = _read(_block(self.device, "dev"))
        self.record["device"] = {"name": self.device, "majmin": majmin}
        bps, iops = self.wanted.get("read_bytes_per_s"), self.wanted.get("read_iops")
        if version == "v1":
            for key, value, name in (("read_bytes_per_s", bps, "read_bps_device"),
                                     ("read_iops", iops, "read_iops_device")):
                if value is not None:
                    path = os.path.join(cg, "blkio.throttle." + name)
                    _write(path, "%s %d" % (majmin, int(value)))
                    out[key] = _keyed(_read(path)).get(majmin)
        else:
            parts = [majmin] + (["rbps=%d" % int(bps)] if bps is not None else []) + \
                    (["riops=%d" % int(iops)] if iops is not None else [])
            _write(os.path.join(cg, "io.max"), " ".join(parts))
            for line in (_read(os.path.join(cg, "io.max")) or "").splitlines():
                fields = line.split()
                if fields and fields[0] == majmin:
                    values = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
                    if bps is not None:
                        out["read_bytes_per_s"] = _int(values.get("rbps"))
                    if iops is not None:
                        out["read_iops"] = _int(values.get("riops"))
        return out

    # -- in the child, between fork and exec
    def enter(self):
        """Popen preexec_fn: move this (child) process into the run's cgroups before it execs."""
        pid = str(os.getpid()).encode()
        for cgroup_dir in sorted(set(self.dirs.values())):
            fd = os.open(os.path.join(cgroup_dir, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def note_before_step(self):
        """What the step really got: read back just before it starts."""
        if "read_ahead_kb" in self.wanted and self.state:
            self.record["read_ahead_kb_seen"] = _int(_read(self.state["read_ahead"]["path"]))

    # -- teardown
    def stats(self):
        out = {}
        memory = self.dirs.get("memory")
        if memory and os.path.isdir(memory):
            if os.path.exists(os.path.join(memory, "memory.limit_in_bytes")):  # v1
                out["memory_peak_bytes"] = _int(_read(os.path.join(memory, "memory.max_usage_in_bytes")))
                out["memory_failcnt"] = _int(_read(os.path.join(memory, "memory.failcnt")))
                stat = _keyed(_read(os.path.join(memory, "memory.stat")))
                out["pgmajfault"] = stat.get("total_pgmajfault", stat.get("pgmajfault"))
                out["cache_bytes"] = stat.get("total_cache", stat.get("cache"))
                out["rss_bytes"] = stat.get("total_rss", stat.get("rss"))
                out["oom_kill"] = _keyed(_read(os.path.join(memory, "memory.oom_control"))).get("oom_kill")
            else:  # v2
                out["memory_peak_bytes"] = _int(_read(os.path.join(memory, "memory.peak")))
                events = _keyed(_read(os.path.join(memory, "memory.events")))
                out["memory_failcnt"] = events.get("max")
                out["oom_kill"] = events.get("oom_kill")
                stat = _keyed(_read(os.path.join(memory, "memory.stat")))
                out["pgmajfault"], out["cache_bytes"], out["rss_bytes"] = (stat.get("pgmajfault"), stat.get("file"),
                                                                           stat.get("anon"))
        io = self.dirs.get("io")
        majmin = (self.record.get("device") or {}).get("majmin")
        if io and os.path.isdir(io) and majmin:
            if os.path.exists(os.path.join(io, "blkio.throttle.io_service_bytes")):  # v1
                for key, name in (("io_read_bytes", "io_service_bytes"), ("io_read_ios", "io_serviced")):
                    for line in (_read(os.path.join(io, "blkio.throttle." + name)) or "").splitlines():
                        fields = line.split()
                        if len(fields) == 3 and fields[0] == majmin and fields[1] == "Read":
                            out[key] = _int(fields[2])
            else:
                for line in (_read(os.path.join(io, "io.stat")) or "").splitlines():
                    fields = line.split()
                    if fields and fields[0] == majmin:
                        values = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
                        out["io_read_bytes"], out["io_read_ios"] = _int(values.get("rbytes")), _int(values.get("rios"))
        return out

    def teardown(self):
        """After the step's processes were stopped: stats, remove the cgroups, restore read_ahead_kb.

        Never raises: problems are recorded, and anything not undone stays in the state file for
        the next runner to repair.
        """
        if not self.active:
            return None
        errors = []
        try:
            self._undo(errors)
        except Exception as exc:  # noqa: BLE001 - run.json must still be written; the state file stays
            errors.append("teardown: %r" % exc)
        _unlock(self.lock_fd)
        self.lock_fd = None
        if errors:
            self.record["teardown_errors"] = errors
        return self.record

    def _undo(self, errors):
        if self.state is not None:
            for cgroup_dir in sorted(set(self.dirs.values())):
                killed, problem = _drain(cgroup_dir, GRACE_S)  # stats once every process is gone
                if killed:
                    errors.append("killed pids %s left in %s after the step" % (killed, cgroup_dir))
            try:
                self.record["stats"] = self.stats()
            except Exception as exc:  # noqa: BLE001 - the cgroups must go even if a stat file is odd
                errors.append("stats: %r" % exc)
            removed = True
            for cgroup_dir in sorted(set(self.dirs.values())):
                problem = _empty_and_remove(cgroup_dir)
                if problem:
                    errors.append(problem)
                removed = removed and not os.path.isdir(cgroup_dir)
            self.record["cgroups_removed"] = removed
            restored = True
            if self.state.get("read_ahead"):
                try:
                    self.record["read_ahead_kb_restored"] = _int(_restore_read_ahead(self.state))
                except OSError as exc:
                    restored = False
                    errors.append("read_ahead_kb not restored: %s" % exc)
            if removed and restored:
                try:
                    os.remove(_state_path())
                except OSError as exc:
                    errors.append("state file: %s" % exc)


def main(argv=None):
    """``python3 -m runner.emulate check --emulate JSON [--block-device D] [--file F]...``: the
    controller's preflight. Prints one line and exits 1 when the machine cannot emulate."""
    import argparse

    parser = argparse.ArgumentParser(prog="runner.emulate")
    sub = parser.add_subparsers(dest="command", required=True)
    check_p = sub.add_parser("check")
    check_p.add_argument("--emulate", required=True, help="JSON: which of %s are wanted" % ", ".join(KEYS))
    check_p.add_argument("--block-device", default="auto")
    check_p.add_argument("--file", action="append", default=[])
    args = parser.parse_args(argv)
    wanted = json.loads(args.emulate)
    paths = []
    for path in args.file:  # files to be created later: their nearest existing directory tells the disk
        while path and not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        paths.append(path)
    device = probe.resolve_block_device(args.block_device, paths)
    missing = check(wanted, device)
    if missing:
        print(refusal(missing))
        return 1
    print(json.dumps({"ok": True, "device": device, "backends": dict((k, v[0]) for k, v in detect().items())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
