"""How much of the machine the step had: other processes' CPU, the hypervisor's steal, the step's own wait in the
runqueue, and throttling. The controller marks a run beyond the experiment's limits ``perturbed``
(harness/results/validity.py); this module only measures, into run.json ``interference``.

What is measured, between the step's start and end:

- **Machine CPU** (``/proc/stat``, the aggregate ``cpu`` line, in USER_HZ jiffies): busy = user + nice + system;
  steal and irq + softirq apart. Interrupt time is left out of "busy" on purpose: the completions of the step's own
  I/O are accounted there (to no process), and a fio run at high IOPS must not count as perturbed by itself.
- **Own CPU**: everything the runner's process tree used (the step's processes, the runner itself, the native
  sampler and tool collectors, which are the harness's own overhead, not interference): the runner's
  ``getrusage`` (SELF and CHILDREN: reaped descendants) plus every live descendant's ``/proc/PID/stat`` utime +
  stime + cutime + cstime, at the start and at the end. A descendant that double-forked away (reparented to init)
  would be missed; the harness's steps and collectors do not.
- **Foreign CPU** = (machine busy - own) / (wall x online CPUs): the share of the machine other processes held.
- **Runqueue share** of the step = its tasks' run_delay / (run_delay + exec_runtime), from
  ``/proc/PID/task/TID/schedstat`` (ns; needs CONFIG_SCHED_INFO, else None). ``/proc/PID/schedstat`` is the thread
  group leader alone and a thread's counts vanish with it, so the step's process groups are walked every
  ``PERIOD_S`` (a thread of a tracked process, and their children) and each task's last values are kept. Every
  tracked task was born during the step, so its counts are the step's. Limit: the last ``PERIOD_S`` of a task's
  life (and a task that lived less than that) is not seen; as both counts are cut at the same instants, the
  share stays a fair estimate.
- **Throttling**: a cpufreq cap (``scaling_max_freq``) lowered during the step (thermal cooling devices act
  through it), x86 ``thermal_throttle`` event counts that rose, the hottest thermal zone at the end. None where
  none of these files exists.

The machine-wide counters tick in jiffies: over a step of ``wall`` seconds a percentage is known to about
``resolution_pct`` = 2 jiffies / wall (each end of the window is cut to a jiffy); the controller's limits allow it.
"""

import glob
import os
import resource
import threading
import time

from runner import sysroot
from runner.util import read_text

PERIOD_S = 0.2  # how often the step's tasks are read: ~1 % of one core for 17 tasks (bench/interference_overhead.py)
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine_cpu():
    """The aggregate /proc/stat cpu line as jiffies by field name, plus ``ncpu`` (online CPUs), or None."""
    text = read_text(sysroot.path("/proc/stat"), "") or ""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    if not head or head[0] != "cpu":
        return None
    values = [int(v) for v in head[1:1 + len(_STAT_FIELDS)]]
    out = {name: values[i] if i < len(values) else 0 for i, name in enumerate(_STAT_FIELDS)}  # old kernels: fewer
    out["ncpu"] = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return out


def _children(pid):
    """Direct children of ``pid`` (every thread's ``children`` file; a scan of /proc where the kernel lacks it)."""
    found, readable = [], False
    for path in glob.glob("/proc/%d/task/*/children" % pid):
        text = read_text(path)
        if text is not None:
            readable = True
            found += [int(v) for v in text.split()]
    if readable or not os.path.exists("/proc/%d" % pid):
        return found
    return [other for other, parent in _parents().items() if parent == pid]


def _parents():
    """pid -> parent pid of every process (the fallback of ``_children``)."""
    out = {}
    for name in os.listdir("/proc"):
        stat = read_text("/proc/%s/stat" % name) if name.isdigit() else None
        if stat:
            out[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(pids):
    """Every live descendant of ``pids`` (not the pids themselves)."""
    seen, todo = set(), list(pids)
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def _process_cpu_s(pid):
    """utime + stime + cutime + cstime of a live process (its reaped children included), in seconds; 0 when gone."""
    stat = read_text("/proc/%d/stat" % pid)
    if not stat:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / float(CLK_TCK)  # fields 14-17 of proc(5)


def tree_cpu_s():
    """CPU seconds this runner's whole process tree has used so far (reaped and live descendants included)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total + sum(_process_cpu_s(pid) for pid in descendants([os.getpid()]))


def _schedstat(pid, tid):
    text = read_text("/proc/%d/task/%d/schedstat" % (pid, tid))
    parts = text.split() if text else []
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else None


def throttle_state():
    """What shows throttling now: cpufreq caps by policy, x86 throttle event count, hottest zone (None: unknown)."""
    caps = {}
    for path in glob.glob(sysroot.path("/sys/devices/system/cpu/cpufreq/policy*/scaling_max_freq")):
        value = (read_text(path, "") or "").strip()
        if value.isdigit():
            caps[path] = int(value)
    events = None
    for path in glob.glob(sysroot.path("/sys/devices/system/cpu/cpu*/thermal_throttle/core_throttle_count")):
        value = (read_text(path, "") or "").strip()
        if value.isdigit():
            events = (events or 0) + int(value)
    temps = []
    for path in glob.glob(sysroot.path("/sys/class/thermal/thermal_zone*/temp")):
        try:
            temps.append(int((read_text(path, "") or "").strip()) / 1000.0)
        except ValueError:
            continue  # a zone that cannot be read right now
    return {"caps": caps, "events": events, "temp_max_c": max(temps) if temps else None}


def throttling(before, after):
    """The throttle part of the record from two ``throttle_state`` readings."""
    drops = [before["caps"][p] - after["caps"].get(p, before["caps"][p]) for p in before["caps"]]
    cap_drop = max(drops) if drops else None
    events = after["events"] - before["events"] if None not in (before["events"], after["events"]) else None
    known = cap_drop is not None or events is not None
    throttled = bool((cap_drop or 0) > 0 or (events or 0) > 0) if known else None
    return {"throttled": throttled, "cpu_cap_drop_khz": cap_drop, "throttle_events": events,
            "temp_max_c": after["temp_max_c"]}


class InterferenceMeter:
    """Started just before the step, told of every process the step spawns, stopped just after the step."""

    def __init__(self, period_s=PERIOD_S):
        self.period_s = period_s
        self.leaders = []  # the step's processes (each leads its own process group)
        self.tasks = {}  # tid -> (exec_runtime ns, run_delay ns), the last values seen
        self.lock = threading.Lock()
        self.stop_event, self.thread, self.error = threading.Event(), None, None
        self.start_state = None

    def track(self, pid):
        with self.lock:
            self.leaders.append(pid)
        self.sample()  # its first threads, before they could end

    def start(self):
        self.start_state = (time.monotonic(), machine_cpu(), tree_cpu_s(), throttle_state())
        self.thread = threading.Thread(target=self._loop, name="interference", daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            while not self.stop_event.wait(self.period_s):
                self.sample()
        except Exception as exc:  # noqa: BLE001 - reported in the record, never kills the run
            self.error = "interference sampler: %r" % exc

    def sample(self):
        """Read every live task of the step's processes and their descendants."""
        with self.lock:
            leaders = list(self.leaders)
        pids = set(leaders) | descendants(leaders)
        for pid in pids:
            for name in os.listdir("/proc/%d/task" % pid) if os.path.isdir("/proc/%d/task" % pid) else ():
                found = _schedstat(pid, int(name))
                if found is not None:
                    with self.lock:
                        self.tasks[int(name)] = found

    def stop(self):
        """The ``interference`` record of run.json (None when the meter never started)."""
        if self.start_state is None or self.thread is None:
            return None
        self.sample()  # whatever is still alive: its latest counts
        self.stop_event.set()
        self.thread.join(5.0)
        self.thread = None
        t0, cpu0, own0, throttle0 = self.start_state
        wall_s = time.monotonic() - t0
        record = measure(cpu0, machine_cpu(), tree_cpu_s() - own0, wall_s, list(self.tasks.values()))
        record.update(throttling(throttle0, throttle_state()))
        if self.error:
            record["error"] = self.error
        return record


def _pct(part, whole):
    return round(100.0 * part / whole, 2) if whole > 0 else None


def measure(cpu0, cpu1, own_s, wall_s, tasks):
    """The record's numbers from two /proc/stat readings, the tree's CPU and the step's tasks' schedstats."""
    out = {"wall_s": round(wall_s, 4), "own_cpu_s": round(own_s, 3), "period_s": PERIOD_S, "tasks_seen": len(tasks)}
    if cpu0 and cpu1:
        delta = {key: cpu1[key] - cpu0[key] for key in _STAT_FIELDS}
        ncpu = cpu1["ncpu"] or 1
        busy_s = (delta["user"] + delta["nice"] + delta["system"]) / float(CLK_TCK)
        total = sum(delta.values())
        out.update(ncpu=ncpu, machine_busy_s=round(busy_s, 3), steal_s=round(delta["steal"] / float(CLK_TCK), 3),
                   steal_pct=_pct(delta["steal"], total), irq_pct=_pct(delta["irq"] + delta["softirq"], total),
                   foreign_cpu_pct=_pct(max(0.0, busy_s - own_s), wall_s * ncpu),
                   resolution_pct=_pct(2.0 / CLK_TCK, wall_s))
    if tasks:
        run_ns, delay_ns = sum(t[0] for t in tasks), sum(t[1] for t in tasks)
        out.update(run_s=round(run_ns / 1e9, 4), run_delay_s=round(delay_ns / 1e9, 4),
                   runqueue_pct=_pct(delay_ns, run_ns + delay_ns))
    else:
        out["runqueue_pct"] = None
    return out
