"""cgroup v1 and v2 primitives for board emulation: find the controllers, make a cgroup, set memory
and read limits, read the stats back, drain and remove it.

Paths go through ``HARNESS_CGROUP_ROOT`` (default /sys/fs/cgroup) so a test can play a machine without
the controllers (an empty directory) or with v2 ones (a fake tree).
"""

import errno
import os
import signal
import time

from runner.util import read_value as read
from runner.util import write_value as write

PARENT = "harness"
KILL_WAIT_S = 10.0


def cgroup_root():
    return os.environ.get("HARNESS_CGROUP_ROOT", "/sys/fs/cgroup")


def to_int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def keyed(text):
    """'key value' lines (memory.stat, memory.events, oom_control) -> dict of ints."""
    out = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if to_int(value.strip()) is not None:
            out[key.strip()] = int(value.strip())
    return out


def _device_line(text, majmin):
    """The 'k=v' fields of ``majmin``'s line in io.max / io.stat."""
    for line in (text or "").splitlines():
        fields = line.split()
        if fields and fields[0] == majmin:
            return dict(f.split("=", 1) for f in fields[1:] if "=" in f)
    return {}


def own_cgroup(controller):
    """This process's cgroup path in the v1 hierarchy holding ``controller`` (e.g. '/process_api/x')."""
    for line in (read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2].rstrip("/")
    return ""


def detect(root=None):
    """Where each resource can be limited: {'memory': ('v2'|'v1', hierarchy dir), 'io': (...)}.

    v2 wins where its hierarchy (pure at the root, or hybrid at root/unified) offers the controller.
    """
    root = root or cgroup_root()
    found = {}
    for v2 in (root, os.path.join(root, "unified")):
        controllers = (read(os.path.join(v2, "cgroup.controllers")) or "").split()
        for name in ("memory", "io"):
            if name in controllers and name not in found:
                found[name] = ("v2", v2)
    if "memory" not in found and os.path.exists(os.path.join(root, "memory", "memory.limit_in_bytes")):
        found["memory"] = ("v1", os.path.join(root, "memory"))
    if "io" not in found and os.path.exists(os.path.join(root, "blkio", "blkio.throttle.read_bps_device")):
        found["io"] = ("v1", os.path.join(root, "blkio"))
    return found


def parent_dir(version, hierarchy, resource):
    """Where the per-run cgroups are made.

    v1: under the runner's own cgroup, so limits set on whatever started the runner still bound the
    step (nesting is free in v1). v2: at the root of the hierarchy, because a v2 cgroup that holds
    processes (a login session, a service) cannot hand controllers to children.
    """
    if version == "v2":
        return os.path.join(hierarchy, PARENT)
    return hierarchy + own_cgroup("memory" if resource == "memory" else "blkio") + "/" + PARENT


def procs(path):
    return [int(p) for p in (read(os.path.join(path, "cgroup.procs")) or "").split() if p.isdigit()]


def drain(path, grace_s):
    """Wait for the cgroup to empty; after ``grace_s`` SIGKILL by pid whatever is still in it.

    Only a run's processes are ever put in its cgroup, so anything left there is the run's: a child
    that left the step's process group, or one whose parent died. Returns (killed pids, problem).
    """
    start = time.monotonic()
    killed = []
    while True:
        pids = procs(path)
        if not pids:
            return killed, None
        waited = time.monotonic() - start
        if waited > grace_s + KILL_WAIT_S:
            return killed, "cgroup %s still holds pids %s" % (path, pids)
        if waited > grace_s:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                if pid not in killed:
                    killed.append(pid)
        time.sleep(0.05)


def remove(path, grace_s):
    """Drain the cgroup and rmdir it (and harness/ once empty); a problem as text, or None."""
    if not os.path.isdir(path):
        return None
    killed, problem = drain(path, grace_s)
    if problem:
        return problem
    for _attempt in range(50):
        try:
            os.rmdir(path)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            if exc.errno != errno.EBUSY:
                return "cannot remove %s: %s" % (path, exc.strerror)
            time.sleep(0.1)
            continue
        parent = os.path.dirname(path)
        if os.path.basename(parent) == PARENT:
            try:
                os.rmdir(parent)  # nothing of ours stays, e.g. inside the cgroup that started the runner
            except OSError:
                pass  # another run's cgroup is still in it
        return "killed leftover pids %s" % killed if killed else None
    return "cannot remove %s: still busy" % path


def make(version, hierarchy, path, controllers):
    """A fresh, empty cgroup at ``path`` (a leftover of the same name is drained and removed first)."""
    parent = os.path.dirname(path)
    if os.path.isdir(path):
        problem = remove(path, grace_s=0.0)
        if problem:
            raise OSError(problem)
    for attempt in range(3):
        try:
            if not os.path.isdir(parent):
                os.makedirs(parent)
            if version == "v2":
                for where in (hierarchy, parent):  # the root and harness/ pass the controllers down
                    current = (read(os.path.join(where, "cgroup.subtree_control")) or "").split()
                    for name in controllers:
                        if name not in current:
                            write(os.path.join(where, "cgroup.subtree_control"), "+" + name)
            os.mkdir(path)
            return
        except FileNotFoundError:  # another run's teardown removed the empty harness/ just now
            if attempt == 2:
                raise


def set_memory(path, limit):
    """Memory budget, swap closed; returns the values the kernel reports back (page-rounded)."""
    out = {}
    if os.path.exists(os.path.join(path, "memory.limit_in_bytes")):  # v1
        write(os.path.join(path, "memory.limit_in_bytes"), limit)  # before memsw, which must stay >= it
        out["memory_bytes"] = to_int(read(os.path.join(path, "memory.limit_in_bytes")))
        memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            write(memsw, limit)
            out["memory_swap_bytes"] = to_int(read(memsw)) - out["memory_bytes"]
        return out
    write(os.path.join(path, "memory.max"), limit)
    out["memory_bytes"] = to_int(read(os.path.join(path, "memory.max")))
    if os.path.exists(os.path.join(path, "memory.swap.max")):
        write(os.path.join(path, "memory.swap.max"), 0)
        out["memory_swap_bytes"] = to_int(read(os.path.join(path, "memory.swap.max")))
    return out


def set_io(path, majmin, bps, iops):
    """Read throttle on one device; returns the values read back."""
    out = {}
    if os.path.exists(os.path.join(path, "blkio.throttle.read_bps_device")):  # v1
        for key, value, name in (("read_bytes_per_s", bps, "read_bps_device"), ("read_iops", iops, "read_iops_device")):
            if value is not None:
                control = os.path.join(path, "blkio.throttle." + name)
                write(control, "%s %d" % (majmin, int(value)))
                out[key] = keyed(read(control)).get(majmin)
        return out
    parts = [majmin] + (["rbps=%d" % int(bps)] if bps is not None else []) + \
        (["riops=%d" % int(iops)] if iops is not None else [])
    write(os.path.join(path, "io.max"), " ".join(parts))
    seen = _device_line(read(os.path.join(path, "io.max")), majmin)
    if bps is not None:
        out["read_bytes_per_s"] = to_int(seen.get("rbps"))
    if iops is not None:
        out["read_iops"] = to_int(seen.get("riops"))
    return out


def memory_stats(path):
    """Peak (page cache included), limit hits, OOM kills, major faults, and the page cache still
    charged once the processes are gone (their anonymous memory is freed by then: not reported)."""
    if os.path.exists(os.path.join(path, "memory.limit_in_bytes")):  # v1
        stat = keyed(read(os.path.join(path, "memory.stat")))
        return {"memory_peak_bytes": to_int(read(os.path.join(path, "memory.max_usage_in_bytes"))),
                "memory_failcnt": to_int(read(os.path.join(path, "memory.failcnt"))),
                "oom_kill": keyed(read(os.path.join(path, "memory.oom_control"))).get("oom_kill"),
                "pgmajfault": stat.get("total_pgmajfault", stat.get("pgmajfault")),
                "cache_bytes": stat.get("total_cache", stat.get("cache"))}
    stat, events = keyed(read(os.path.join(path, "memory.stat"))), keyed(read(os.path.join(path, "memory.events")))
    return {"memory_peak_bytes": to_int(read(os.path.join(path, "memory.peak"))),  # kernel >= 5.19
            "memory_failcnt": events.get("max"), "oom_kill": events.get("oom_kill"),
            "pgmajfault": stat.get("pgmajfault"), "cache_bytes": stat.get("file")}


def io_stats(path, majmin):
    """Bytes and I/Os the cgroup read from the device (what went through the throttle)."""
    if os.path.exists(os.path.join(path, "blkio.throttle.io_service_bytes")):  # v1
        out = {}
        for key, name in (("io_read_bytes", "io_service_bytes"), ("io_read_ios", "io_serviced")):
            for line in (read(os.path.join(path, "blkio.throttle." + name)) or "").splitlines():
                fields = line.split()
                if len(fields) == 3 and fields[0] == majmin and fields[1] == "Read":
                    out[key] = to_int(fields[2])
        return out
    seen = _device_line(read(os.path.join(path, "io.stat")), majmin)
    return {"io_read_bytes": to_int(seen.get("rbytes")), "io_read_ios": to_int(seen.get("rios"))}


def enter(paths):
    """Move the calling process into each cgroup (used between fork and exec)."""
    pid = str(os.getpid()).encode()
    for path in paths:
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)
