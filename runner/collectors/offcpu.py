"""The ``offcpu`` collector: exact off-CPU time per thread of the step's process tree, from the scheduler's own
tracepoints through bpftrace -- the ground truth the counters and the sampler's classes are checked against, and
an optional collector on boards whose kernel allows eBPF.

bpftrace starts before the step, its probes attached before the step is spawned (it compiles first: 1-2 s idle, 8 s
seen on a loaded machine), and follows every process the runner forks from then on (``sched_process_fork`` of the
runner's pid, and of every process forked from those: ``@parent`` maps each child to its parent); the threads of the
step's process and of its descendants (the processes whose parent chain in ``@parent`` reaches the step's) are
written, each line with its process's pid, and each process once in a ``# proc`` line when it first shows (bpftrace
does not trace exits here: there is no ``# proc_end`` line, and ``cmd`` is empty). At ``sched_switch`` a thread
leaving the CPU is stamped with the time, its state (prev_state: D = uninterruptible, S = interruptible, neither =
preempted, still runnable) and the syscall it is in, read from its saved user registers (what /proc/PID/syscall
reads; the fd of an ioctl from its first argument); ``sched_wakeup`` stamps when it became runnable again; when it
is switched back in, the time blocked (switch out to wake-up) and the time then spent waiting for a CPU are added to
its key (process, thread, syscall, state, ioctl fd), and at its next switch out the interval is made exact from its
se.sum_exec_runtime (what its CPU clock reads; see the comment above SCRIPT). Every snapshot also adds the time of
the threads off CPU at that moment. Everything is summed in kernel maps; every ``period_ms`` and at the end,
bpftrace prints the cumulative maps (JSON), never a line per event; this module classifies each key into the
sampler's classes and writes them (``offcpu.txt``, parsed by harness/parsers/offcpu.py)::

    # harness-offcpu v2 pid=123 period_ms=1000 clock=monotonic arch=x86_64 bpftrace=v0.17.0 tracefs=mounted
    # proc t_ns=T pid=P ppid=Q<TAB>comm=COMM<TAB>cmd=               (a process of the step's tree, first seen)
    s<TAB>t_ns<TAB>pid<TAB>tid<TAB>class<TAB>state<TAB>syscall<TAB>device<TAB>blocked_ns<TAB>runqueue_ns<TAB>count<TAB>comm
    # stop t_ns=... snapshots=... cpu_s=... tracefs_restored=... lost=N noregs=N unseen=N unwoken=N

Classes: ``fault_io`` (D outside any syscall: a page fault waiting for its page; D in mmap, madvise, mlock*: a
mapping faulted in before the call returns, as with MAP_POPULATE), ``read_io`` (pread64, preadv,
preadv2, io_uring_enter; read/readv in D -- a read/readv asleep in S waits for a pipe or socket: ``idle``), ``futex``,
``gpu`` (ioctl on /dev/nvgpu*, /dev/nvmap, /dev/nvidia*, /dev/dri/*: the fd resolved once), ``idle`` (epoll, poll,
select, nanosleep, clock_nanosleep), ``other``; and ``runqueue`` (preempted: runnable the whole time, state R; the
syscall column says where: ``none`` = user code or a page fault's handler). A switch whose registers were not found
(``noregs``: no candidate stack layout matched) has syscall ``unknown``, class ``other``. Times are cumulative since
the attach, so analyses take differences between snapshots, like the counters'.

What bpftrace missed is counted in the ``# stop`` line and, when anything was, said in one line on the runner's
stderr: ``unwoken``, the wake-ups not seen (the kernel skips a tracepoint program that fires while another BPF
program -- or a map read from user space, bpftrace's own snapshot -- holds that CPU's BPF slot; that sleep's wait
for a CPU is then counted as blocked); ``unseen``, switches in or out not seen (no time is lost: the next switch
out gives the interval back from the CPU time; after a missed switch out, under the earlier interval's key); ``noregs``;
``lost``, events bpftrace's perf buffer dropped (only the snapshots' marks go through it). There used to be
thousands of misses beside a syscall-heavy neighbour (issue 13): raw_syscalls programs ran on every syscall of the
machine and held the CPU's BPF slot when a wake-up interrupt came; now nothing runs per syscall, and a few remain
(tests/test_offcpu.py asserts they stay under 1 % of the switches traced).

tracefs (/sys/kernel/tracing) is mounted for the run when it is not, and unmounted after only if this collector
mounted it (on every way out: stop, a bpftrace that fails, an exception). A runner killed outright leaves it
mounted, which is the distributions' default state anyway.
"""

import fnmatch
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from runner.util import run_tool

VERSION = "v2"  # v2: the step's process tree, a pid field in every line
TRACEFS = "/sys/kernel/tracing"
ATTACH_TIMEOUT_S = 60  # bpftrace compiles and loads first: 1-2 s on an idle machine, 8 s seen on a loaded one
GPU_DEVICES = ("/dev/nvgpu*", "/dev/nvgpu/*", "/dev/nvmap", "/dev/nvidia*", "/dev/dri/*")
# syscall numbers of the classes (asm/unistd_64.h, asm-generic/unistd.h); futex_wake/wait/requeue (454-456, Linux
# 6.7) and io_uring_enter, futex_waitv, epoll_pwait2 have one number on every architecture
_COMMON = {"io_uring_enter": 426, "futex_waitv": 449, "epoll_pwait2": 441, "futex_wake": 454, "futex_wait": 455,
           "futex_requeue": 456, "clone3": 435}
SYSCALLS = {
    "x86_64": dict(_COMMON, read=0, pread64=17, readv=19, preadv=295, preadv2=327, futex=202, ioctl=16, poll=7,
                   select=23, nanosleep=35, epoll_wait=232, clock_nanosleep=230, epoll_pwait=281, ppoll=271,
                   pselect6=270, write=1, openat=257, close=3, mmap=9, munmap=11, madvise=28, fadvise64=221,
                   sched_yield=24, wait4=61, exit=60, exit_group=231, recvfrom=45, sendto=44, recvmsg=47,
                   sendmsg=46, accept4=288, fsync=74, msync=26, mlock=149, mlockall=151, mlock2=325, execve=59,
                   clock_gettime=228),
    "aarch64": dict(_COMMON, read=63, pread64=67, readv=65, preadv=69, preadv2=286, futex=98, ioctl=29,
                    nanosleep=101, clock_nanosleep=115, epoll_pwait=22, ppoll=73, pselect6=72, write=64, openat=56,
                    close=57, mmap=222, munmap=215, madvise=233, fadvise64=223, sched_yield=124, wait4=260, exit=93,
                    exit_group=94, recvfrom=207, sendto=206, recvmsg=212, sendmsg=211, accept4=242, fsync=82,
                    msync=227, mlock=228, mlockall=230, mlock2=284, execve=221, clock_gettime=113),
}  # the rest of the table only names what a thread was in (class other): a number not named here is nrN
ARCH_ALIASES = {"arm64": "aarch64", "amd64": "x86_64"}
READS = ("pread64", "preadv", "preadv2", "io_uring_enter")  # file reads in any state
# asleep in D in these, a thread waits for the pages a mapping is being faulted in with (mmap MAP_POPULATE, as
# llama.cpp maps its model; mlock; madvise MADV_POPULATE_READ) -- or for the mmap lock: the sampler's fault_io too
POPULATES = ("mmap", "madvise", "mlock", "mlock2", "mlockall")
STREAM_READS = ("read", "readv")  # a file in D, a pipe or a socket in S
FUTEXES = ("futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue")
IDLE = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "nanosleep",
        "clock_nanosleep")
CLASSES = ("fault_io", "read_io", "futex", "gpu", "idle", "other", "runqueue")
# bpftrace's keys: the syscall -1 = none, -2 = not known yet; the state 1 = D, 0 = S, 2 = other, 3 = preempted
NO_SYSCALL, UNKNOWN = -1, -2
STATES = {0: "S", 1: "D", 2: "other", 3: "R"}
# what the ``# stop`` line counts as missed: sleeps whose wake-up was not seen, switches not seen, switches out
# whose registers were not found (syscall ``unknown``), events bpftrace's perf buffer dropped
MISSED = ("unwoken", "unseen", "noregs", "lost")

# Where a thread's user registers sit: struct pt_regs at the top of its kernel stack (task_pt_regs), below a
# padding. THREAD_SIZE and the padding depend on the kernel's configuration (KASAN doubles the stack, x86's FRED
# pads 16 bytes), so the program tries each candidate (stack size, padding) and takes the first whose frame looks
# like a user frame: x86_64 its cs and ss are the user segments (0x33, 0x2b), arm64 its pstate is EL0t.
# ``syscall`` is the field /proc/PID/syscall reads (-1 outside a syscall: an interrupt's or exception's entry sets
# it), ``arg0`` the first argument (an ioctl's fd).
REGS = {
    "x86_64": {"stacks": ((16384, 0), (16384, 16), (32768, 0), (32768, 16)), "syscall": "orig_ax", "arg0": "di",
               "user": "($r->cs & 0xffff) == 0x33 && ($r->ss & 0xffff) == 0x2b"},
    "aarch64": {"stacks": ((16384, 0), (32768, 0), (65536, 0)), "syscall": "syscallno", "arg0": "orig_x0",
                "user": "($r->pstate & 0x1f) == 0"},
}

# An interval off CPU is counted when the thread is switched back in (switch-out to wake-up blocked, then waiting
# for a CPU) and made exact at its next switch out, in the kernel's own terms: the wall time since the last switch
# out minus the CPU time it got meanwhile (se.sum_exec_runtime, what its CPU clock and schedstat read), less what
# the switch in counted, goes to the interval's waiting part. The kernel charges a thread's CPU from the start of
# the schedule() that picks it, microseconds before this tracepoint fires: stamps alone counted those microseconds
# of every switch as off CPU, 4-5 points of the wall time of a page-faulting thread that switches ten thousand
# times a second. So the shares add up with the thread's clock, and a missed switch in loses nothing. Each
# snapshot also prints the threads off CPU right now (@since and their keys): their time so far is added to the
# snapshot's rows, so a sleep still open at a snapshot counts up to it instead of all at once where it ends (a
# 2 s wait across the end of a window had been left out of the window).
# Everything is summed in kernel maps; bpftrace prints them (cumulative) every PERIOD_MS and at the end, never a
# line per event: events cannot be lost in the perf buffer, and nothing runs per syscall (the syscall is read from
# the thread's registers when it leaves the CPU), so a neighbour's millions of syscalls cost this program nothing
# and cannot hold the CPU's BPF slot when a sched_switch or sched_wakeup of the step's threads fires. Neighbours'
# context switches cost two map lookups each (@traced, @since).
SCRIPT = r"""
BEGIN { printf("attached\n"); }
tracepoint:sched:sched_process_fork /pid == RUNNER || @traced[pid]/ {
  @traced[args->child_pid] = 1;
  @parent[args->child_pid] = pid;
}
tracepoint:sched:sched_switch {
  $ts = nsecs;
  if (@traced[pid]) {
    $prev = args->prev_pid;
    $state = args->prev_state;
    $rt = curtask->se.sum_exec_runtime;
    if (@since[$prev] > 0) { @unseen = count(); }
    if (@outt[$prev] > 0) {
      // what the kernel's CPU time says the thread spent off CPU since its last switch out, less what the switch in
      // counted: a few microseconds per switch (the whole interval when that switch in was missed)
      $fix = (int64)($ts - @outt[$prev]) - (int64)($rt - @outrt[$prev]) - @counted[$prev];
      if (@since[$prev] > 0) {
        if ($fix > 0) {
          $blk = $fix;
          $wk = @woke[$prev];
          if ($wk > 0 && (int64)($wk - @since[$prev]) < $fix) { $blk = (int64)($wk - @since[$prev]); }
          @blocked[pid, $prev, @why[$prev], @d[$prev], @fd[$prev]] = sum($blk);
          @waited[pid, $prev, @why[$prev], @d[$prev], @fd[$prev]] = sum($fix - $blk);
          @n[pid, $prev, @why[$prev], @d[$prev], @fd[$prev]] = count();
        }
      } else {
        if ($fix != 0) { @waited[pid, $prev, @why[$prev], @d[$prev], @fd[$prev]] = sum($fix); }
      }
    }
    @outt[$prev] = $ts;
    @outrt[$prev] = $rt;
    @counted[$prev] = 0;
    @since[$prev] = $ts;
    @tgid[$prev] = pid;
    @comm[$prev] = comm;
    @woke[$prev] = (uint64)0;
    $base = (uint64)curtask->stack;
    $why = (int64)-2;
    $fd = (int64)-1;
    FIND_REGS
    if (USER) {
      $why = (int64)$r->SYSCALL;
      if ($why == IOCTL) { $fd = (int64)$r->ARG0; }
    } else { @noregs = count(); }
    @why[$prev] = $why;
    @fd[$prev] = $fd;
    if (($state & 3) == 0) { @woke[$prev] = $ts; @d[$prev] = 3; }
    else { if ($state & 2) { @d[$prev] = 1; } else { @d[$prev] = 0; } }
  }
  $next = args->next_pid;
  $t0 = @since[$next];
  if ($t0 == 0 && @tgid[$next] > 0) { @unseen = count(); }
  if ($t0 > 0) {
    $w = $ts;
    if (@woke[$next] > 0) { $w = @woke[$next]; } else { @unwoken = count(); }
    // the waker stamps @woke on its own CPU and can do so after this program took $ts (it read @since before the
    // switch in cleared it): unclamped, $ts - $w wrapped to 2^64 ns and one interval claimed 584 years
    if ($w > $ts) { $w = $ts; }
    if ($w < $t0) { $w = $t0; }
    @blocked[@tgid[$next], $next, @why[$next], @d[$next], @fd[$next]] = sum($w - $t0);
    @waited[@tgid[$next], $next, @why[$next], @d[$next], @fd[$next]] = sum($ts - $w);
    @n[@tgid[$next], $next, @why[$next], @d[$next], @fd[$next]] = count();
    @counted[$next] = (int64)($ts - $t0);
    @since[$next] = 0;  // not delete: a snapshot printing @since aborts bpftrace 0.17 when a key it listed is gone
  }
}
tracepoint:sched:sched_wakeup /@since[args->pid] > 0/ {
  if (@woke[args->pid] == 0) { @woke[args->pid] = nsecs; }
}
interval:ms:PERIOD_MS {
  printf("t %lld\n", nsecs); print(@blocked); print(@waited); print(@n); print(@comm);
  print(@since); print(@woke); print(@why); print(@d); print(@fd); print(@tgid); print(@parent);
}
END {
  printf("t %lld\n", nsecs); print(@blocked); print(@waited); print(@n); print(@comm); print(@parent); print(@unwoken);
  print(@unseen); print(@noregs); clear(@unseen); clear(@unwoken); clear(@noregs); clear(@blocked);
  clear(@waited); clear(@n); clear(@comm); clear(@fd); clear(@since); clear(@woke); clear(@why); clear(@d);
  clear(@tgid); clear(@traced); clear(@outt); clear(@outrt); clear(@counted); clear(@parent);
}
"""




def program(runner_pid, period_ms, machine):
    """The bpftrace program for this runner, period and architecture (a key of REGS and SYSCALLS)."""
    regs = REGS[machine]
    frame = "(struct pt_regs *)($base + %d - %d - sizeof(struct pt_regs))"
    (size, pad), rest = regs["stacks"][0], regs["stacks"][1:]
    find = ["$r = %s;" % (frame % (size, pad))]
    find += ["if (!(%s)) { $r = %s; }" % (regs["user"], frame % candidate) for candidate in rest]
    return (SCRIPT.replace("FIND_REGS", "\n    ".join(find)).replace("USER", regs["user"])
            .replace("SYSCALL", regs["syscall"]).replace("ARG0", regs["arg0"])
            .replace("PERIOD_MS", str(period_ms)).replace("IOCTL", str(SYSCALLS[machine]["ioctl"]))
            .replace("RUNNER", str(runner_pid)))


def open_intervals(t_ns, maps):
    """{key: (blocked ns, waiting ns)} of the threads off CPU at a snapshot taken at ``t_ns``, from the snapshot's
    @since (when each left the CPU), @woke (when it became runnable again) and its key maps; a thread that left
    after ``t_ns`` (the maps are read a moment after the stamp) counts nothing yet."""
    since, woke = maps.get("@since") or {}, maps.get("@woke") or {}
    why, state, fd, tgid = (maps.get(name) or {} for name in ("@why", "@d", "@fd", "@tgid"))
    found = {}
    for tid, left in since.items():
        left, woken = int(left), int(woke.get(tid) or 0)
        if left <= 0 or left >= t_ns or tid not in tgid or tid not in why:
            continue
        key = "%s,%s,%s,%s,%s" % (tgid[tid], tid, why[tid], state.get(tid, 2), fd.get(tid, -1))
        if 0 < woken < t_ns:
            asleep, waiting = max(woken - left, 0), t_ns - max(woken, left)
        else:
            asleep, waiting = t_ns - left, 0
        before = found.get(key, (0, 0))
        found[key] = (before[0] + asleep, before[1] + waiting)
    return found


def tree_of(pid, parents):
    """The step's process and its descendants: {pid} and every pid whose chain of parents (bpftrace's @parent,
    child -> parent, thread ids among them) reaches it."""
    tree, parents = {pid}, {int(child): int(parent) for child, parent in (parents or {}).items()}
    grown = True
    while grown:
        found = {child for child, parent in parents.items() if parent in tree and child not in tree}
        tree |= found
        grown = bool(found)
    return tree


def missed_warning(missed):
    """One line naming what bpftrace missed (MISSED), or None when it missed nothing."""
    lost = ["%s=%d" % (name, missed[name]) for name in MISSED if missed.get(name)]
    if not lost:
        return None
    return "offcpu: warning: bpftrace missed events (%s; see the # stop line of offcpu.txt)" % " ".join(lost)


def arch():
    machine = os.uname().machine
    return ARCH_ALIASES.get(machine, machine)


def _tracefs_events():
    """The tracefs events directory already there (tracefs or debugfs's tracing), else None."""
    for base in (TRACEFS, "/sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(base, "events", "sched")):
            return base
    return None


def unavailable_reason():
    """None when offcpu can run here, else one line saying why not."""
    if os.uname().sysname != "Linux":
        return "offcpu needs Linux eBPF (bpftrace)"
    if not shutil.which("bpftrace"):
        return "bpftrace not found on PATH (apt install bpftrace)"
    if os.geteuid() != 0:
        return "offcpu needs root (bpftrace loads eBPF programs)"
    if arch() not in SYSCALLS:
        return "offcpu has no syscall table for %s (known: %s)" % (arch(), ", ".join(sorted(SYSCALLS)))
    if _tracefs_events() is None and not os.path.isdir(TRACEFS):
        return "no tracefs: %s is missing (kernel without CONFIG_FTRACE)" % TRACEFS
    if not os.path.exists("/sys/kernel/btf/vmlinux") and not glob.glob("/lib/modules/%s/build" % os.uname().release):
        return "no kernel BTF (/sys/kernel/btf/vmlinux) nor headers: bpftrace cannot read tracepoint arguments"
    return None


def classify(syscall, state, device):
    """The class of one key: syscall name (or 'none', 'unknown'), state D/S/R/other, ioctl's device."""
    if state == "R":
        return "runqueue"
    if syscall == "none" or syscall in POPULATES:
        return "fault_io" if state == "D" else "other"
    if syscall in READS or (syscall in STREAM_READS and state == "D"):
        return "read_io"
    if syscall in FUTEXES:
        return "futex"
    if syscall in IDLE or syscall in STREAM_READS:
        return "idle"
    if syscall == "ioctl" and device and any(fnmatch.fnmatch(device, p) for p in GPU_DEVICES):
        return "gpu"
    return "other"


class Offcpu:
    """bpftrace following the runner's children: ``start`` before the step (waits until its probes are attached),
    ``follow(pid)`` when the step spawns (its threads and its descendants' are the ones written), ``stop`` at the
    end."""

    def __init__(self, period_ms, out_path, attach_timeout_s=ATTACH_TIMEOUT_S):
        self.argv = ["offcpu"]  # the shape Collectors looks at
        self.period_ms, self.out_path, self.attach_timeout_s = period_ms, out_path, attach_timeout_s
        self.proc = self.reader = self.out = self.err = self.pid = None
        self.attached, self.ready = threading.Event(), False
        self.mounted = False
        self.error = None
        self.snapshots = 0
        self.missed = dict.fromkeys(MISSED, 0)
        self.names = {number: name for name, number in SYSCALLS[arch()].items()}
        self.devices = {}
        self.shown = set()  # the processes whose '# proc' line is written

    def _mount(self):
        if _tracefs_events() is not None:
            return
        _out, error = run_tool(["mount", "-t", "tracefs", "nodev", TRACEFS])
        if error:
            raise OSError("cannot mount tracefs at %s: %s" % (TRACEFS, error))
        self.mounted = True

    def _unmount(self):
        if not self.mounted:
            return "-"
        _out, error = run_tool(["umount", TRACEFS])
        if error:
            self.error = self.error or "offcpu: tracefs left mounted: %s" % error
            return "no"
        self.mounted = False
        return "yes"

    def start(self):
        """Mount tracefs if needed and start bpftrace on the runner's future children; returns once its probes are
        attached (the step starts after), or with ``error`` set (then the run goes on without it)."""
        script = program(os.getpid(), self.period_ms, arch())
        try:
            self._mount()
            self.err = open(self.out_path + ".stderr", "wb")
            self.proc = subprocess.Popen(["bpftrace", "-f", "json", "-e", script], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=self.err)
        except OSError as exc:
            self.error = "offcpu: %s" % exc
            self._unmount()
            return
        self.reader = threading.Thread(target=self._read, name="collector-offcpu", daemon=True)
        self.reader.start()
        self.attached.wait(self.attach_timeout_s)
        if not self.ready:
            self._end_bpftrace()
            self.error = self.error or ("offcpu: bpftrace did not attach its probes (waited up to %d s): %s"
                                        % (self.attach_timeout_s, self._stderr_tail()))
            self._unmount()  # at once: a caller that gives up here (a bench, a test) leaves tracefs as it was

    def follow(self, pid):
        """The step's process: from the next snapshot on, its threads and its descendants' are written."""
        version = (run_tool(["bpftrace", "--version"])[0] or "").split()
        self.out = open(self.out_path, "w")
        self.out.write("# harness-offcpu %s pid=%d period_ms=%d clock=monotonic arch=%s bpftrace=%s tracefs=%s\n"
                       % (VERSION, pid, self.period_ms, arch(), version[-1] if version else "unknown",
                          "mounted" if self.mounted else "present"))
        self.out.flush()
        self.pid = pid

    def _device(self, tgid, fd):
        if (tgid, fd) not in self.devices:  # each process of the tree has its own fds
            try:
                self.devices[tgid, fd] = os.readlink("/proc/%d/fd/%d" % (tgid, fd))
            except OSError:
                self.devices[tgid, fd] = "?"
        return self.devices[tgid, fd]

    def _key(self, text):
        """'tgid,tid,syscall,state,fd' -> (tgid, tid, syscall name, state, device)."""
        tgid, tid, why, state, fd = (int(part) for part in text.split(","))
        syscall = {NO_SYSCALL: "none", UNKNOWN: "unknown"}.get(why) or self.names.get(why, "nr%d" % why)
        return tgid, tid, syscall, STATES.get(state, "other"), self._device(tgid, fd) if fd >= 0 else "-"

    def _write(self, t_ns, maps):
        pid, out = self.pid, self.out
        if pid is None or out is None:
            return  # before the step: nothing of its own yet
        lines = []
        comms = maps.get("@comm") or {}
        blocked_by, waited = dict(maps.get("@blocked") or {}), dict(maps.get("@waited") or {})
        counts = maps.get("@n") or {}
        for key, (asleep, waiting) in open_intervals(t_ns, maps).items():
            blocked_by[key] = blocked_by.get(key, 0) + asleep
            waited[key] = waited.get(key, 0) + waiting
        parents = maps.get("@parent") or {}
        tree = tree_of(pid, parents)
        for key, blocked in sorted(blocked_by.items()):
            tgid, tid, syscall, state, device = self._key(key)
            if tgid not in tree:
                continue  # another child of the runner (a sampler, a tool)
            if tgid not in self.shown:
                self.shown.add(tgid)
                lines.append("# proc t_ns=%d pid=%d ppid=%s\tcomm=%s\tcmd=\n" % (
                    t_ns, tgid, parents.get(str(tgid), 0), str(comms.get(str(tgid), "?")).replace("\t", " ")))
            lines.append("s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n" % (
                t_ns, tgid, tid, classify(syscall, state, device), state, syscall, device.replace("\t", " "), blocked,
                waited.get(key, 0), counts.get(key, 0), str(comms.get(str(tid), "?")).replace("\t", " ")))
        out.write("".join(lines))
        out.flush()
        self.snapshots += 1

    def _read(self):
        started_cpu = time.thread_time()
        t_ns, maps = None, {}
        try:
            for raw in self.proc.stdout:
                item = json.loads(raw) if raw.strip().startswith(b"{") else {}
                kind = item.get("type")
                if kind == "printf" and item["data"] == "attached\n":
                    self.ready = True  # BEGIN runs once every probe is attached ("attached_probes" comes before)
                    self.attached.set()
                elif kind == "printf" and item["data"].startswith("t "):
                    if t_ns is not None:
                        self._write(t_ns, maps)
                    t_ns, maps = int(item["data"].split()[1]), {}
                elif kind == "map":
                    maps.update(item["data"])
                    for name in ("unwoken", "unseen", "noregs"):
                        self.missed[name] = int(maps.get("@" + name) or self.missed[name])
                elif kind == "lost_events":  # bpftrace's perf buffer overflowed: a snapshot's print was lost
                    self.missed["lost"] += int(item["data"]["events"])
            if t_ns is not None:
                self._write(t_ns, maps)
        except (ValueError, OSError) as exc:  # reported in the run record, never kills the run
            self.error = "offcpu: %r" % exc
        self.attached.set()  # bpftrace is gone: start() need not wait any longer
        self.cpu_s = time.thread_time() - started_cpu

    def _end_bpftrace(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # END prints the last snapshot
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout)

    def stop(self):
        if self.proc is not None:
            self._end_bpftrace()
            if self.proc.returncode not in (0, -signal.SIGINT) and not self.error:
                self.error = "offcpu: bpftrace exited %s: %s" % (self.proc.returncode, self._stderr_tail())
            self.err.close()
            self.proc = None
        restored = self._unmount()
        if self.out is not None:
            self.out.write("# stop t_ns=%d snapshots=%d cpu_s=%.6f tracefs_restored=%s %s\n"
                           % (time.monotonic_ns(), self.snapshots, getattr(self, "cpu_s", 0.0), restored,
                              " ".join("%s=%d" % item for item in sorted(self.missed.items()))))
            self.out.close()
            self.out = None
            warning = missed_warning(self.missed)
            if warning:  # not an error (the run's numbers stand, the loss is recorded), but never silent
                sys.stderr.write(warning + "\n")
        return self.error

    def _stderr_tail(self):
        """bpftrace's last ERROR line (its messages end with the source line and a ~~~ marker), else its last line."""
        with open(self.out_path + ".stderr", "rb") as err:
            lines = [line.strip() for line in err.read().decode(errors="replace").splitlines()
                     if line.strip() and "RLIMIT_MEMLOCK" not in line]
        errors = [line for line in lines if "ERROR" in line]
        return ((errors or lines or ["no message"])[-1])[:300]
