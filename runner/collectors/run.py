"""The collectors of one run: platform collectors and the block sampler start before the step, the thread
sampler when the step spawns its first process (it, the counters and offcpu follow that process and its
descendants); all stop after the step.

A collector that cannot run here is reported with the reason: optional ones are skipped (the run record says
why), required ones fail the run before the step starts.
"""

import os

from runner.collectors.availability import unavailable_reason
from runner.collectors.base import KINDS, PROCESS_KINDS, CollectorError, Unavailable
from runner.collectors.counters import Counters
from runner.collectors.jetson_stats import JtopSampler
from runner.collectors.offcpu import Offcpu
from runner.collectors.offcpu import unavailable_reason as offcpu_reason
from runner.collectors.sampler import Sampler
from runner.collectors.snapshots import SNAPSHOTS, Snapshotter
from runner.collectors.tools import tool_process


def _platform_collector(kind, spec, run_dir):
    """A started platform collector of ``kind`` (Unavailable when it cannot run here)."""
    period = int(spec.get("period_ms", 1000))
    reason = unavailable_reason(kind)
    if reason:
        raise Unavailable(reason)
    if kind in PROCESS_KINDS:
        item = tool_process(kind, spec, run_dir)
    elif kind == "jtop":
        item = JtopSampler(period, os.path.join(run_dir, "jtop.jsonl"))
    else:
        item = Snapshotter(kind, period, os.path.join(run_dir, kind + ".txt"), SNAPSHOTS[kind])
    item.start()
    return item


def start_platform(specs, run_dir):
    """Start every platform collector in ``specs`` (kind -> spec); return (running, skipped reasons)."""
    running, skipped = [], {}
    for kind, spec in specs.items():
        if kind not in KINDS:
            continue
        try:
            item = _platform_collector(kind, spec, run_dir)
        except Unavailable as exc:
            if spec.get("optional"):
                skipped[kind] = str(exc)
                continue
            for item in running:
                item.stop()
            raise Unavailable("collector %s: %s" % (kind, exc)) from None
        running.append(item)
    return running, skipped


def threads_options(spec):
    """The thread sampler's options beyond the period (a spec from an older controller has neither key)."""
    options = ["--stat-ms", str(int(spec.get("stat_ms", 100)))]
    if spec.get("wchan"):
        options.append("--wchan")
    if not spec.get("gate", True):
        options.append("--no-gate")
    if not spec.get("tree", True):
        options.append("--no-tree")  # the step's process only, as before the process tree
    return options


class Collectors:
    """Starts block-level samplers before the step and per-process ones when the step spawns."""

    def __init__(self, specs, native_bin, run_dir, device):
        self.specs = {spec["kind"]: spec for spec in specs}
        self.native_bin, self.run_dir, self.device = native_bin, run_dir, device
        self.running = []
        self.errors = []
        self.counters = self.offcpu = self.threads = None

    def _sampler(self, mode, subject, period_ms, name, options=()):
        return Sampler([os.path.join(self.native_bin, "sampler"), mode, str(subject), "--period-ms",
                        str(period_ms)] + list(options), os.path.join(self.run_dir, name))

    def start_global(self):
        # platform collectors (tegrastats, vmstat, psi, thermal, power, iostat, vm_stat, powermetrics, jtop);
        # an optional one that cannot run here is skipped and the run record says why
        try:
            started, skipped = start_platform(self.specs, self.run_dir)
        except Unavailable as exc:
            raise CollectorError(str(exc)) from None
        self.running += started
        self.errors += ["%s skipped (optional): %s" % item for item in sorted(skipped.items())]
        counters = self.specs.get("counters")
        if counters is not None:  # delay accounting on before the step's threads exist
            native = os.path.join(self.native_bin, "counters")  # the C reader where built (Linux), else Python
            use_native = counters.get("reader", "native") == "native" and os.access(native, os.X_OK)
            self.counters = Counters(int(counters.get("period_ms", 100)), os.path.join(self.run_dir, "counters.txt"),
                                     native if use_native else None, bool(counters.get("tree", True)))
            self.counters.prepare()
            self.running.append(self.counters)
        self._prepare_offcpu()
        spec = self.specs.get("blockstat")
        if spec is None:
            return
        if not self.device:
            raise CollectorError("blockstat: no block device found for the run's files; set block_device "
                                 "in the target")
        sampler = self._sampler("block", self.device, spec["period_ms"], "blockstat.txt")
        sampler.start()
        self.running.append(sampler)

    def _prepare_offcpu(self):
        """bpftrace attached before the step (it then follows the step's process); optional by default: where it
        cannot run, one line in the run's record says why."""
        spec = self.specs.get("offcpu")
        if spec is None:
            return
        reason = offcpu_reason()
        if reason is None:
            offcpu = Offcpu(int(spec.get("period_ms", 1000)), os.path.join(self.run_dir, "offcpu.txt"))
            offcpu.start()
            reason = offcpu.stop() if offcpu.error else None
            if reason is None:
                self.offcpu = offcpu
                self.running.append(offcpu)
                return
        if not spec.get("optional", True):
            raise CollectorError("collector offcpu: %s" % reason)
        self.errors.append("offcpu skipped (optional): %s" % reason)

    def on_spawn(self, pid):
        # each follows the step's first process and its descendants (the processes it starts, found as they appear)
        if self.counters is not None and getattr(self.counters, "pid", None) is None:
            self.counters.follow(pid)
        if self.offcpu is not None and self.offcpu.pid is None:
            self.offcpu.follow(pid)
        spec = self.specs.get("threads")
        if spec is None or self.threads is not None:
            return  # thread sampling follows the step's first process and its tree, like the two above
        self.threads = self._sampler("threads", pid, spec["period_ms"], "threads.txt", threads_options(spec))
        self.threads.start()
        self.running.append(self.threads)

    def stop_all(self):
        while self.running:
            error = self.running.pop().stop()
            if error:
                self.errors.append(error)
        return self.errors
