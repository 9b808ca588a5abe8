"""The native sampler (runner/native/sampler) as a collector: block stats of the run's device, and the
threads of the step's process and its descendants."""

import signal
import subprocess

from runner.collectors.base import CollectorError


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
