"""The step's process tree, as runner/native/proctree.h finds it, for the Python readers (the counters collector's
fallback reader): the step's process and its descendants, found by a scan of /proc for new pids whose parent is
followed; a pid seen before and outside the tree is not read again (an orphan is reparented to init or a
subreaper, never into the tree). Why the ppid scan and not /proc/PID/task/TID/children: proctree.h says.

The tree is recorded in the lines the native tools write::

    # proc t_ns=T pid=P ppid=Q<TAB>comm=COMM<TAB>cmd=ARGS     (at the first read that lists a thread of it,
                                                             again when its comm changed: an exec, and again
                                                             once a cmd read empty can be read: mid-exec)
    # proc_end pid=P first_ns=F last_ns=L gone=0|1           (gone; gone=0: still there at the end)
"""

import os

CMD_BYTES = 128  # the head of the command line recorded
CMD_RETRIES = 200  # reads of a cmd that read empty (a process read mid-exec, or a zombie): proctree.h says why


def _stat(proc, pid):
    """(ppid, comm) of a process from its stat, control characters as '?'; None once it is gone."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    left, right = text.find("("), text.rfind(")")
    rest = text[right + 2:].split()
    if left < 0 or right < left or len(rest) < 2:
        return None
    comm = "".join("?" if ord(c) < 0x20 or c == "\x7f" else c for c in text[left + 1:right])
    return int(rest[1]), comm


def _cmdline(proc, pid):
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read(CMD_BYTES).rstrip(b"\0").replace(b"\0", b" ")
    except OSError:
        return ""
    return "".join("?" if ord(c) < 0x20 or c == "\x7f" else c for c in raw.decode("utf-8", "replace"))


class ProcessTree:
    """``read(t_ns)`` at every read: new descendants found, each followed process's threads listed; a process that
    lists none has gone. ``lines`` collects the ``# proc`` / ``# proc_end`` lines to write with that read."""

    def __init__(self, pid, follow=True, proc="/proc"):
        self.proc, self.follow, self.lines = proc, follow, []
        found = _stat(proc, pid)
        self.followed = {pid: {"ppid": found[0] if found else 0, "comm": found[1] if found else "", "first": None,
                               "last": None, "retries": 0}}
        self.outside = set()

    def _scan(self):
        fresh = {}
        seen = set()
        for name in os.listdir(self.proc):
            if not name.isdigit() or int(name) in self.followed:
                continue
            pid = int(name)
            if pid in self.outside:
                seen.add(pid)
                continue
            found = _stat(self.proc, pid)
            if found is not None:
                fresh[pid] = found
        added = True
        while added:  # a child and its grandchild that appeared together are both taken
            added = False
            for pid, (ppid, comm) in list(fresh.items()):
                if ppid in self.followed:
                    self.followed[pid] = {"ppid": ppid, "comm": comm, "first": None, "last": None, "retries": 0}
                    del fresh[pid]
                    added = True
        self.outside = seen | set(fresh)

    def _tids(self, pid):
        try:
            return sorted(int(name) for name in os.listdir(os.path.join(self.proc, str(pid), "task")))
        except OSError:
            return []

    def read(self, t_ns):
        """{pid: [tid, ...]} of the processes there now; their tree lines appended to ``lines``."""
        if self.follow:
            self._scan()
        listed = {}
        for pid, entry in list(self.followed.items()):
            tids = self._tids(pid)
            if tids:
                now = _stat(self.proc, pid) if entry["first"] is not None else None
                renamed = now is not None and now[1] != entry["comm"]  # an exec since it was found
                cmd = _cmdline(self.proc, pid) if entry["first"] is None or renamed or entry["retries"] else ""
                if entry["first"] is None or renamed or cmd:
                    entry["first"] = t_ns if entry["first"] is None else entry["first"]
                    entry["comm"] = now[1] if renamed else entry["comm"]
                    entry["retries"] = 0 if cmd else CMD_RETRIES
                    self.lines.append("# proc t_ns=%d pid=%d ppid=%d\tcomm=%s\tcmd=%s\n" % (
                        t_ns, pid, max(entry["ppid"], 0), entry["comm"], cmd))
                elif entry["retries"]:
                    entry["retries"] -= 1
                entry["last"] = t_ns
                listed[pid] = tids
                continue
            if entry["first"] is not None:
                self.lines.append(self._end(pid, entry, 1))
            del self.followed[pid]
        return listed

    def _end(self, pid, entry, gone):
        return "# proc_end pid=%d first_ns=%d last_ns=%d gone=%d\n" % (pid, entry["first"], entry["last"], gone)

    def finish(self):
        """The end lines of the processes still there."""
        self.lines += [self._end(pid, entry, 0) for pid, entry in self.followed.items() if entry["first"] is not None]
