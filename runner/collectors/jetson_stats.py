"""jetson-stats as a collector: the jtop service samples the board, its client reads each sample.

The service listens on a socket (root:jtop srw-rw----); the user must be in group jtop. A service that is down,
of another version or refuses the user is ``Unavailable`` before the step, like a missing tool.
"""

import json
import os
import threading
import time

from runner import sysroot
from runner.collectors.base import Unavailable
from runner.collectors.snapshots import Snapshotter

# jetson-stats' socket (its module constant jtop.service.JTOP_PIPE): the jtop service listens there,
# root:jtop srw-rw----, and the client connects there. Tests put it under sysroot.ROOT.
JTOP_SOCKET = "/run/jtop.sock"
JTOP_CONNECT_TIMEOUT_S = 15.0


def jtop_socket(service):
    """Where the client connects: jetson-stats' own path on a board, the same path under a test root."""
    return sysroot.path(JTOP_SOCKET) if sysroot.ROOT else service.JTOP_PIPE


def jtop_reason():
    """None when the jtop service can be used here, else a one-line reason."""
    try:
        from jtop import service  # jetson-stats
    except ImportError:
        return "jetson-stats is not installed (sudo pip3 install -U jetson-stats, then reboot)"
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
        return "jetson-stats cannot be imported: %r" % exc
    sock = jtop_socket(service)
    if not os.path.exists(sock):
        return "the jtop service is not running: no %s (sudo systemctl restart jtop.service)" % sock
    if not os.access(sock, os.R_OK | os.W_OK):
        return ("no permission to connect to %s: the user must be in group jtop "
                "(sudo usermod -aG jtop $USER, then log in again)" % sock)
    return None


def jtop_message(exc):
    """One line from the jetson-stats client's errors (its messages span lines: 'Please run:\\nsudo ...')."""
    import queue

    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if type(exc).__name__ == "JtopException":
        return "jtop service: " + text
    if isinstance(exc, queue.Empty):
        return "jtop service: no answer to the client's request (is jtop.service hung?)"
    if isinstance(exc, (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        # the service went away: depending on which of the client's calls noticed first this is the client's
        # own JtopException or the socket's error; one message either way
        return "jtop service: Lost connection with jtop server"
    if isinstance(exc, OSError):
        return "jtop service: connection error (%s%s)" % (type(exc).__name__, ": " + text if text else "")
    return "jtop client: %s%s" % (type(exc).__name__, ": " + text if text else "")


class JtopSampler(Snapshotter):
    """jetson-stats: one JSON line per sample of the jtop service (it does the sampling at our period):
    ``{"t_ns", "interval_s", "stats": jetson.stats, "memory": RAM/SWAP/EMC in kB and kHz, "cpu_freq_khz": [...],
    "gpu_freq_khz": {name: kHz}, "power": jetson.power}`` — the structured parts give the tegrastats
    columns (MB, MHz, average power) that ``stats`` reduces to fractions.

    ``start`` connects in the caller's thread, so a service that is down, of another version or refuses
    the user is ``Unavailable`` before the step, like a missing tool."""

    def __init__(self, period_ms, out_path):
        Snapshotter.__init__(self, "jtop", period_ms, out_path, None)
        self.jetson = None

    def start(self):
        from jtop import jtop, service

        # the client reads this module constant when it is constructed (jetson-stats 7.x: no other knob)
        service.JTOP_PIPE = jtop_socket(service)
        self.jetson = jtop(interval=self.period_s)
        outcome = []

        def connect():
            try:
                self.jetson.start()  # connect, version check, first sample
                outcome.append(None)
            except Exception as exc:  # noqa: BLE001 - every client error becomes the reason
                outcome.append(exc)

        # the client has no timeout of its own: a stopped or wedged service that still accepts on its
        # socket would hold the run here forever, and every later run too
        connecting = threading.Thread(target=connect, name="collector-jtop-connect", daemon=True)
        connecting.start()
        connecting.join(JTOP_CONNECT_TIMEOUT_S)
        if not outcome:
            raise Unavailable("jtop service: no answer within %.0f s (is jtop.service hung? "
                              "sudo systemctl restart jtop.service)" % JTOP_CONNECT_TIMEOUT_S)
        if outcome[0] is not None:
            self._close()
            raise Unavailable(jtop_message(outcome[0])) from None
        open(self.out_path, "w").close()
        self.thread = threading.Thread(target=self._loop, name="collector-jtop", daemon=True)
        self.thread.start()

    def _close(self):
        try:
            self.jetson.close()
        except Exception:  # noqa: BLE001 - closing a broken client must not hide the first error
            pass

    def _line(self):
        jetson = self.jetson
        memory = {name: {k: v for k, v in part.items() if k != "table"} for name, part in jetson.memory.items()}
        cpus = jetson.cpu.get("cpu", [])
        # interval_s: the service's period, which is the first client's, not ours, when another client runs
        return {"t_ns": time.monotonic_ns(), "interval_s": jetson.interval, "stats": dict(jetson.stats),
                "memory": memory,
                "cpu_freq_khz": [(c.get("freq") or {}).get("cur") if c.get("online") else None for c in cpus],
                "gpu_freq_khz": {name: (gpu.get("freq") or {}).get("cur") for name, gpu in jetson.gpu.items()},
                "power": jetson.power}

    def _loop(self):
        try:
            with open(self.out_path, "a") as out:
                # the first sample is there when start() returns; one more after the stop (the last one)
                while True:
                    if not self.jetson.ok():  # blocks until the next sample, at most 3 periods
                        if not self.stop_event.is_set():
                            self.error = ("jtop service: no sample for %.1f s, the jtop collector stopped early "
                                          "(is jtop.service alive?)" % (3 * self.period_s))
                        break
                    out.write(json.dumps(self._line(), default=str) + "\n")
                    out.flush()
                    if self.stop_event.is_set():
                        break
        except Exception as exc:  # noqa: BLE001 - reported in the run record, never kills the run
            self.error = jtop_message(exc)
        finally:
            self._close()

    def stop(self, timeout=None):
        # the loop notices the stop after the next sample: up to 3 periods when the service is slow
        return Snapshotter.stop(self, timeout or max(5.0, 3 * self.period_s + 1))
