"""Collectors that are tools run as processes: tegrastats, iostat (macOS), powermetrics (macOS).

Each writes its own log (tegrastats --logfile) or its stdout into the run directory.
"""

import json
import os
import shutil
import signal
import subprocess
import time


class ToolProcess:
    """A tool writing its own log (tegrastats --logfile) or stdout into the run directory."""

    def __init__(self, kind, argv, out_path, to_stdout, stop_signal=signal.SIGTERM):
        self.argv, self.kind, self.out_path, self.to_stdout = argv, kind, out_path, to_stdout
        self.stop_signal, self.proc = stop_signal, None

    def start(self):
        # the clock pair lets the controller put the tool's wall-clock lines on the run's monotonic axis
        with open(self.out_path + ".clock", "w") as clock:
            json.dump({"wall_s": time.time(), "mono_ns": time.monotonic_ns(),
                       "utc_offset_s": time.localtime().tm_gmtoff}, clock)
        out = open(self.out_path, "ab") if self.to_stdout else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE,
                                         start_new_session=True)
        finally:
            if self.to_stdout:
                out.close()

    def stop(self, timeout=5.0):
        """Signal its process group (SIGTERM; SIGINT for powermetrics, which finishes its sample on it)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, self.stop_signal)
            except ProcessLookupError:
                pass
        try:
            _out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            _out, err = self.proc.communicate()
        code, self.proc = self.proc.returncode, None
        if code not in (0, -self.stop_signal, 128 + self.stop_signal):
            return "%s exited %s: %s" % (self.kind, code, (err or b"").decode(errors="replace").strip()[-300:])
        return None


def tool_process(kind, spec, run_dir):
    period = int(spec.get("period_ms", 1000))
    if kind == "tegrastats":
        # Foreground with --logfile, stopped by SIGTERM to its own process group. Not --start/--stop:
        # --stop stops every tegrastats on the board, including one jtop or a user is running.
        path = os.path.join(run_dir, "tegrastats.log")
        return ToolProcess(kind, [shutil.which("tegrastats"), "--interval", str(period), "--logfile", path],
                           path, False)
    if kind == "iostat":
        # -d disks only, -w wait seconds (integer, >= 1); the first line block is since boot
        wait = str(max(1, period // 1000))
        return ToolProcess(kind, ["iostat", "-d", "-w", wait], os.path.join(run_dir, "iostat.txt"), True)
    argv = ["powermetrics", "-i", str(period), "--samplers", "cpu_power,gpu_power,thermal"]
    if os.geteuid() != 0:
        argv = ["sudo", "-n"] + argv
    return ToolProcess(kind, argv, os.path.join(run_dir, "powermetrics.txt"), True, signal.SIGINT)
