"""Collectors on the target: the native sampler for block stats and for a process's threads."""

import os
import signal
import subprocess


class CollectorError(Exception):
    pass


class Sampler:
    """One ``sampler`` process writing to a raw file in the run directory."""

    def __init__(self, argv, out_path):
        self.argv, self.out_path, self.proc = argv, out_path, None

    def start(self):
        try:
            self.proc = subprocess.Popen(self.argv + ["--out", self.out_path], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            raise CollectorError("cannot start %s: %s (build it with make -C runner/native)"
                                 % (self.argv[0], exc)) from None

    def stop(self, timeout=5.0):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate()
        code, self.proc = self.proc.returncode, None
        if code not in (0, -signal.SIGTERM):
            return "sampler exited %s: %s" % (code, (err or b"").decode(errors="replace").strip()[-300:])
        return None


class Collectors:
    """Starts block-level samplers before the step and per-process ones when the step spawns."""

    def __init__(self, specs, native_bin, run_dir, device):
        self.specs = {spec["kind"]: spec for spec in specs}
        self.native_bin, self.run_dir, self.device = native_bin, run_dir, device
        self.running = []
        self.errors = []

    def _sampler(self, mode, subject, period_ms, name):
        return Sampler([os.path.join(self.native_bin, "sampler"), mode, str(subject), "--period-ms",
                        str(period_ms)], os.path.join(self.run_dir, name))

    def start_global(self):
        # platform collectors (tegrastats, vmstat, psi, thermal, power, iostat, vm_stat, powermetrics, jtop);
        # an optional one that cannot run here is skipped and the run record says why
        from runner import platform_collectors

        try:
            started, skipped = platform_collectors.start(self.specs, self.run_dir)
        except platform_collectors.Unavailable as exc:
            raise CollectorError(str(exc)) from None
        self.running += started
        self.errors += ["%s skipped (optional): %s" % item for item in sorted(skipped.items())]
        spec = self.specs.get("blockstat")
        if spec is None:
            return
        if not self.device:
            raise CollectorError("blockstat: no block device found for the run's files; set block_device "
                                 "in the target")
        sampler = self._sampler("block", self.device, spec["period_ms"], "blockstat.txt")
        sampler.start()
        self.running.append(sampler)

    def on_spawn(self, pid):
        spec = self.specs.get("threads")
        if spec is None or any(s.argv[1] == "threads" for s in self.running):
            return  # thread sampling follows the step's first (main) process
        sampler = self._sampler("threads", pid, spec["period_ms"], "threads.txt")
        sampler.start()
        self.running.append(sampler)

    def stop_all(self):
        while self.running:
            error = self.running.pop().stop()
            if error:
                self.errors.append(error)
        return self.errors
