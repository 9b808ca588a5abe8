"""The ``counters`` collector: the kernel's cumulative per-thread counters of the step's process and of its
descendants (found at every read, runner/native/proctree.h; ``tree: false``: the step's process only), read when
the step spawns it, every ``period_ms`` (default 100) and at the end -- what tells where a thread's wall time went
(harness/analysis/waits.py turns two reads into run, runqueue, io_wait, thrashing, reclaim, other_sleep).

Per thread and read:

- ``/proc/PID/task/TID/schedstat``: on-CPU ns, runqueue-wait ns, timeslices (always, no root needed);
- ``/proc/PID/task/TID/stat``: utime, stime, delayacct_blkio_ticks (field 42: block I/O delay in clock ticks,
  the non-root view of delay accounting);
- taskstats over generic netlink (root): cpu/blkio/swapin/thrashing/freepages/compact delay totals (ns) and the
  voluntary/involuntary context switches; where taskstats cannot be used, the context switches come from
  ``/proc/PID/task/TID/status`` instead;
- once per read, PSI ``total=`` (us) of memory and io: the step's cgroup's ``memory.pressure``/``io.pressure``
  where cgroup v2 offers them, else /proc/pressure/*.

Delay accounting (``kernel.task_delayacct``) is turned on for the run where it is off and may be (root), and
restored after (runner/delayacct.py; a killed runner is repaired like read_ahead_kb).

The file (``counters.txt``; parsed by harness/parsers/counters.py)::

    # harness-counters v2 pid=123 period_ms=100 clock=monotonic clock_ticks_per_s=100 schedstat=yes taskstats=v16 \
delayacct=on delayacct_switched=yes psi=system reader=native tree=ppid
    # unavailable taskstats: <why>            (one such line per counter source the kernel did not offer)
    # proc t_ns=T pid=P ppid=Q<TAB>comm=COMM<TAB>cmd=ARGS          (a process of the tree, at its first read)
    t<TAB>t_ns<TAB>pid<TAB>tid<TAB>run_ns<TAB>runqueue_ns<TAB>timeslices<TAB>utime_ticks<TAB>stime_ticks<TAB>blkio_ticks\
<TAB>nvcsw<TAB>nivcsw<TAB>cpu_delay_ns<TAB>blkio_delay_ns<TAB>swapin_delay_ns<TAB>thrashing_delay_ns\
<TAB>freepages_delay_ns<TAB>compact_delay_ns<TAB>comm
    p<TAB>t_ns<TAB>memory_some_us<TAB>memory_full_us<TAB>io_some_us<TAB>io_full_us
    # proc_end pid=P first_ns=F last_ns=L gone=0|1                  (it has gone; gone=0: still there at the end)
    # stop t_ns=... reads=... overruns=... cpu_s=... delayacct_restored=... [sched_taskstats=N sched_proc=N]

``-`` marks a value the kernel did not give. Files are kept open and re-read with pread (a /proc read is a few
microseconds then). The native reader with taskstats takes run/runqueue/timeslices from the taskstats answer
(cpu_run_virtual_total, cpu_delay_total, cpu_count: the very fields schedstat prints) and reads schedstat only for
a thread whose answer lacks them (delay accounting off); the stop line counts the thread reads of each source.

Two readers write the same lines: ``native`` (the default where runner/native/bin/counters is built: the periodic
reads in C, taskstats included; this module writes the header and the ``# stop`` line) and ``python`` (this
module's own thread; the fallback, and the old mode bench/counters_overhead.py compares against). The header says
which (``reader=``).
"""

import os
import signal
import subprocess
import threading
import time

from runner import delayacct
from runner.collectors.taskstats import open_taskstats
from runner.proctree import ProcessTree

VERSION = "v2"  # v2: every process of the step's tree, a pid field in every thread line
STATS = ("cpu_delay_total", "blkio_delay_total", "swapin_delay_total", "thrashing_delay_total",
         "freepages_delay_total", "compact_delay_total")
PSI_FILES = (("memory", "memory.pressure"), ("io", "io.pressure"))


def _pread(fd):
    try:
        return os.pread(fd, 4096, 0).decode("ascii", "replace")
    except OSError:
        return None  # the thread exited between the listing and the read


def _psi_totals(text):
    """(some total us, full total us) of a PSI file's text; '-' where missing."""
    some = full = "-"
    for line in (text or "").splitlines():
        kind, _, rest = line.partition(" ")
        total = rest.rpartition("total=")[2].strip() if "total=" in rest else "-"
        if kind == "some":
            some = total
        elif kind == "full":
            full = total
    return some, full


def psi_sources(pid):
    """[(resource, path)] of the step's cgroup v2 pressure files, else /proc/pressure; and the source's name."""
    for line in (_read_text("/proc/%d/cgroup" % pid) or "").splitlines():
        if line.startswith("0::") and line[3:].strip() not in ("", "/"):
            base = os.path.join(os.environ.get("HARNESS_CGROUP_ROOT", "/sys/fs/cgroup"), line[3:].strip().lstrip("/"))
            found = [(res, os.path.join(base, name)) for res, name in PSI_FILES]
            if all(os.access(p, os.R_OK) for _r, p in found):
                return found, "cgroup:" + line[3:].strip()
    found = [(res, "/proc/pressure/" + res) for res, _n in PSI_FILES]
    return [(r, p) for r, p in found if os.access(p, os.R_OK)], "system" if os.access(found[0][1], os.R_OK) else "none"


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


class ThreadFiles:
    """The open /proc files of one thread."""

    def __init__(self, task_dir, tid, with_status):
        base = os.path.join(task_dir, str(tid))
        self.fds = [os.open(os.path.join(base, name), os.O_RDONLY)
                    for name in (("schedstat", "stat", "status") if with_status else ("schedstat", "stat"))]

    def close(self):
        for fd in self.fds:
            os.close(fd)

    def read(self):
        """(schedstat fields, stat fields after comm, comm, status text or None); None once the thread is gone."""
        texts = [_pread(fd) for fd in self.fds]
        if any(not t for t in texts):  # status too: a thread gone between its stat and its status is gone
            return None
        stat = texts[1]
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        return texts[0].split(), stat[stat.rindex(")") + 2:].split(), comm, texts[2] if len(texts) > 2 else None


def _switches(status):
    found = {}
    for line in (status or "").splitlines():
        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
            key, _, value = line.partition(":")
            found[key] = value.strip()
    return found.get("voluntary_ctxt_switches", "-"), found.get("nonvoluntary_ctxt_switches", "-")


class Counters:
    """Reads the counters of the step's process tree on its own thread; ``start_global`` at the run's start,
    ``follow(pid)`` when the step spawns, ``stop`` at the end."""

    def __init__(self, period_ms, out_path, native=None, tree=True):
        self.argv = ["counters"]  # the shape Collectors looks at
        self.period_s, self.out_path, self.native, self.follow_tree = period_ms / 1000.0, out_path, native, tree
        self.stop_event, self.thread, self.error, self.proc, self.out = threading.Event(), None, None, None, None
        self.taskstats, self.switch, self.files, self.psi = None, None, {}, []
        self.reads = self.overruns = 0

    def prepare(self):
        """Before the step: delay accounting on, taskstats opened (what the kernel offers is found out here)."""
        self.switch = delayacct.switch_on()
        self.taskstats, self.taskstats_note = open_taskstats()

    def follow(self, pid):
        """The step's process is there: write the header, read now, then every period on a thread."""
        self.pid = pid
        self.psi, psi_name = psi_sources(pid)
        self.with_status = self.taskstats is None
        self.out = open(self.out_path, "w")
        self.out.write(self._header(psi_name))
        if self.native:
            self._start_native()
            return
        self.tree = ProcessTree(pid, self.follow_tree)
        self.thread = threading.Thread(target=self._loop, name="collector-counters", daemon=True)
        self.thread.start()

    def _start_native(self):
        """runner/native/bin/counters appends the data lines; this process keeps the header and the stop line."""
        self.out.close()
        argv = [self.native, "--pid", str(self.pid), "--period-ms", str(round(self.period_s * 1000)),
                "--out", self.out_path] + (["--taskstats"] if self.taskstats is not None else []) \
            + ([] if self.follow_tree else ["--no-tree"])
        for _resource, path in self.psi:
            argv += ["--psi", path]
        if self.taskstats is not None:
            self.taskstats.close()  # the native reader opens its own socket
            self.taskstats = None
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
        except OSError as exc:
            self.error = "counters collector: cannot start %s: %s" % (self.native, exc)
            self.out = open(self.out_path, "a")  # the stop line still closes the file
            return
        self.out = None

    def _header(self, psi_name):
        switch = self.switch or {}
        fields = ["# harness-counters %s" % VERSION, "pid=%d" % self.pid, "period_ms=%d" % round(self.period_s * 1000),
                  "clock=monotonic", "clock_ticks_per_s=%d" % os.sysconf("SC_CLK_TCK"),
                  "schedstat=%s" % ("yes" if os.path.exists("/proc/self/schedstat") else "no"),
                  "taskstats=%s" % (("v%d" % self._taskstats_version()) if self.taskstats else "no"),
                  "delayacct=%s" % (switch.get("delayacct") or "unknown"),
                  "delayacct_switched=%s" % ("yes" if switch.get("switched_by_harness") else "no"),
                  "psi=%s" % psi_name, "reader=%s" % ("native" if self.native else "python"),
                  "tree=%s" % ("ppid" if self.follow_tree else "none")]
        lines = [" ".join(fields)]
        if self.taskstats is None:
            lines.append("# unavailable taskstats: %s" % self.taskstats_note)
        if switch.get("note"):
            lines.append("# unavailable delayacct: %s" % switch["note"])
        return "\n".join(lines) + "\n"

    def _taskstats_version(self):
        return self.taskstats.read([os.getpid()]).get(os.getpid(), {}).get("version", 0)

    def _files(self, listed):
        """The open files of the threads listed ({pid: tids}): gone ones closed, new ones opened; [(pid, tid)]."""
        current = {tid: pid for pid, tids in listed.items() for tid in tids}
        for gone in set(self.files) - set(current):
            self.files.pop(gone).close()
        for tid, pid in current.items():
            if tid not in self.files:
                try:
                    self.files[tid] = ThreadFiles("/proc/%d/task" % pid, tid, self.with_status)
                except OSError:
                    continue  # exited since the listing
        return [(current[tid], tid) for tid in sorted(current) if tid in self.files]

    def read_once(self):
        """One read of every thread (and PSI): lines appended to the file."""
        threads = self._files(self.tree.read(time.monotonic_ns()))
        tids = [tid for _pid, tid in threads]
        stats = self.taskstats.read(tids) if self.taskstats and tids else {}
        lines, self.tree.lines = self.tree.lines, []  # the processes found and gone
        for pid, tid in threads:
            got = self.files[tid].read()
            if got is None:
                continue
            sched, stat, comm, status = got
            t_ns = time.monotonic_ns()
            task = stats.get(tid)
            if task:
                switches = (task["nvcsw"], task["nivcsw"])
                delays = ["-" if task.get(name) is None else task[name] for name in STATS]
            else:
                switches, delays = _switches(status), ["-"] * len(STATS)
            # stat after comm: field 3 is index 0, so utime (14) is 11, stime (15) 12, blkio ticks (42) 39
            blkio_ticks = stat[39] if len(stat) > 39 else "-"
            lines.append("t\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
                (t_ns, pid, tid) + tuple(sched[:3]) + (stat[11], stat[12], blkio_ticks) + tuple(switches)
                + tuple(delays) + (comm.replace("\t", " "),)))
        if self.psi:
            totals = []
            for _resource, path in self.psi:
                totals += _psi_totals(_read_text(path))
            lines.append("p\t%d\t%s\n" % (time.monotonic_ns(), "\t".join(totals)))
        self.out.write("".join(lines))
        self.reads += 1

    def _loop(self):
        started_cpu = time.thread_time()
        try:
            due = time.monotonic()
            while True:
                self.read_once()
                self.out.flush()
                due += self.period_s
                if time.monotonic() > due:  # a read took longer than the period: skip, never catch up in bursts
                    self.overruns += 1
                    due = time.monotonic()
                if self.stop_event.wait(max(0.0, due - time.monotonic())):
                    break
            self.read_once()  # the end: deltas cover the whole step
            self.tree.finish()
            self.out.write("".join(self.tree.lines))
        except Exception as exc:  # noqa: BLE001 - reported in the run record, never kills the run
            self.error = "counters collector: %r" % exc
        self.cpu_s = time.thread_time() - started_cpu

    def _stop_native(self, timeout):
        """SIGTERM: the native reader reads once more and says how many reads it made and its CPU time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            said, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            said, err = self.proc.communicate()
        fields = dict(word.split("=", 1) for word in said.decode(errors="replace").split() if "=" in word)
        self.reads, self.overruns = int(fields.get("reads", 0)), int(fields.get("overruns", 0))
        self.cpu_s = float(fields.get("cpu_s", 0.0))
        # thread reads whose run/runqueue/timeslices came from taskstats or from schedstat (same kernel fields)
        self.sched_sources = " ".join("%s=%s" % (key, fields[key]) for key in ("sched_taskstats", "sched_proc")
                                      if key in fields)
        if self.proc.returncode != 0:
            self.error = self.error or "counters reader exited %s: %s" % (
                self.proc.returncode, err.decode(errors="replace").strip()[-300:])
        self.out = open(self.out_path, "a")

    def stop(self, timeout=5.0):
        self.stop_event.set()
        if self.proc is not None:
            self._stop_native(timeout)
        if self.thread is not None:
            self.thread.join(timeout)
        for files in self.files.values():
            files.close()
        self.files = {}
        if self.taskstats is not None:
            self.taskstats.close()
        if self.switch is not None:
            self.switch = delayacct.switch_back(self.switch)
        if self.out is not None:
            switch = self.switch or {}
            restored = switch.get("restored", "shared" if switch.get("left_on_for_others") else "-")
            self.out.write("# stop t_ns=%d reads=%d overruns=%d cpu_s=%.6f delayacct_restored=%s%s\n"
                           % (time.monotonic_ns(), self.reads, self.overruns, getattr(self, "cpu_s", 0.0), restored,
                              (" " + self.sched_sources) if getattr(self, "sched_sources", "") else ""))
            self.out.close()
            self.out = None
        return (self.switch or {}).get("restore_error") or self.error
