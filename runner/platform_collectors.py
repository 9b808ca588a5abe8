"""Platform collectors on the target: tools run as processes (tegrastats, iostat, powermetrics) and
files sampled by a Python thread (/proc/vmstat, /proc/pressure/*, thermal zones, power supplies,
macOS vm_stat, jetson-stats).

Every collector writes a raw file into the run directory; the controller's parsers read it.
Sampled files use one snapshot format, so the raw bytes stay the kernel's own::

    # harness-snapshots v1 kind=vmstat period_ms=100
    @ <monotonic ns> <wall s>
    <verbatim lines of the source, prefixed with the source name where there are several>

A collector that cannot run here is reported with the reason: optional ones are skipped (the run
record says why), required ones fail the run before the step starts.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from runner import platform_probes, probe
from runner.util import read_text

PROCESS_KINDS = ("tegrastats", "iostat", "powermetrics")
THREAD_KINDS = ("vmstat", "psi", "thermal", "power", "vm_stat", "jtop")
KINDS = PROCESS_KINDS + THREAD_KINDS


class Unavailable(Exception):
    """This collector cannot run on this machine; the message says why."""


def _p(path):
    return probe.ROOT + path


def _can_sudo():
    if os.geteuid() == 0:
        return True
    if not shutil.which("sudo"):
        return False
    return subprocess.run(["sudo", "-n", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode == 0


# jetson-stats' socket (its module constant jtop.service.JTOP_PIPE): the jtop service listens there,
# root:jtop srw-rw----, and the client connects there. Tests put it under probe.ROOT.
JTOP_SOCKET = "/run/jtop.sock"


def _jtop_socket(service):
    """Where the client connects: jetson-stats' own path on a board, the same path under a test root."""
    return _p(JTOP_SOCKET) if probe.ROOT else service.JTOP_PIPE


def _jtop_reason():
    try:
        from jtop import service  # jetson-stats
    except ImportError:
        return "jetson-stats is not installed (sudo pip3 install -U jetson-stats, then reboot)"
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
        return "jetson-stats cannot be imported: %r" % exc
    sock = _jtop_socket(service)
    if not os.path.exists(sock):
        return "the jtop service is not running: no %s (sudo systemctl restart jtop.service)" % sock
    if not os.access(sock, os.R_OK | os.W_OK):
        return ("no permission to connect to %s: the user must be in group jtop "
                "(sudo usermod -aG jtop $USER, then log in again)" % sock)
    return None


def _jtop_message(exc):
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


def unavailable_reason(kind):
    """None when ``kind`` can run here, else a one-line reason."""
    if kind in ("tegrastats", "iostat", "vm_stat"):
        return None if shutil.which(kind) else "%s not found on PATH" % kind
    if kind == "powermetrics":
        if not shutil.which("powermetrics"):
            return "powermetrics not found on PATH (macOS only)"
        return None if _can_sudo() else "powermetrics needs root: allow passwordless sudo for it or run as root"
    if kind == "vmstat":
        return None if os.access(_p("/proc/vmstat"), os.R_OK) else "/proc/vmstat is not readable"
    if kind == "psi":
        readable = [r for r in ("memory", "io", "cpu") if os.access(_p("/proc/pressure/" + r), os.R_OK)]
        return None if readable else "/proc/pressure/* is not readable (kernel without PSI, or needs root on Android)"
    if kind == "thermal":
        return None if glob.glob(_p("/sys/class/thermal/thermal_zone*/temp")) else "no thermal zones"
    if kind == "power":
        found = glob.glob(_p("/sys/class/power_supply/*/current_now"))
        return None if found else "no power_supply with current_now"
    if kind == "jtop":
        return _jtop_reason()
    return "unknown collector %s" % kind


def blockstat_reason():
    """The native sampler reads /sys/block: macOS has none (its disks are sampled by iostat)."""
    if os.path.isdir(_p("/sys/block")):
        return None
    return "no /sys/block here (on macOS collect iostat instead)"


def availability():
    out = {kind: unavailable_reason(kind) for kind in KINDS}
    out["blockstat"] = blockstat_reason()  # started by runner.collectors, but refused by the same preflight
    return out


# ------------------------------------------------------------------------------------- processes
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


def _process(kind, spec, run_dir):
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


# ------------------------------------------------------------------------------------- sampled files
def _snapshot_vmstat():
    return read_text(_p("/proc/vmstat"), "")


def _snapshot_psi():
    lines = []
    for res in ("memory", "io", "cpu"):
        for line in (read_text(_p("/proc/pressure/" + res), "") or "").splitlines():
            lines.append("%s %s" % (res, line))
    return "\n".join(lines) + "\n"


def _snapshot_thermal():
    lines = []
    for zone in sorted(glob.glob(_p("/sys/class/thermal/thermal_zone*"))):
        name = (read_text(zone + "/type", "") or os.path.basename(zone)).strip().replace(" ", "_")
        temp = (read_text(zone + "/temp", "") or "").strip()
        if temp:
            lines.append("%s %s" % (name, temp))
    return "\n".join(lines) + "\n"


def _snapshot_power():
    lines = []
    for path in sorted(glob.glob(_p("/sys/class/power_supply/*"))):
        current = (read_text(path + "/current_now", "") or "").strip()
        voltage = (read_text(path + "/voltage_now", "") or "").strip()
        if current:
            lines.append("%s %s %s" % (os.path.basename(path), current, voltage or "-"))
    return "\n".join(lines) + "\n"


def _snapshot_vm_stat():
    out, _err = platform_probes.run_tool(["vm_stat"], timeout=5)
    return out or ""


SNAPSHOTS = {"vmstat": _snapshot_vmstat, "psi": _snapshot_psi, "thermal": _snapshot_thermal,
             "power": _snapshot_power, "vm_stat": _snapshot_vm_stat}


class Snapshotter:
    """A thread that appends a timestamped snapshot every period (drift-free schedule)."""

    def __init__(self, kind, period_ms, out_path, take):
        self.argv = ["snapshot", kind]  # the shape Collectors.on_spawn looks at
        self.kind, self.period_s, self.out_path, self.take = kind, period_ms / 1000.0, out_path, take
        self.stop_event, self.thread, self.error = threading.Event(), None, None

    def start(self):
        with open(self.out_path, "w") as out:
            out.write("# harness-snapshots v1 kind=%s period_ms=%d\n" % (self.kind, round(self.period_s * 1000)))
        self.thread = threading.Thread(target=self._loop, name="collector-" + self.kind, daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            with open(self.out_path, "a") as out:
                due = time.monotonic()
                while True:
                    out.write("@ %d %.6f\n%s" % (time.monotonic_ns(), time.time(), self.take()))
                    out.flush()
                    due += self.period_s
                    if self.stop_event.wait(max(0.0, due - time.monotonic())):
                        break
                # one last snapshot at the stop, so deltas cover the whole step
                out.write("@ %d %.6f\n%s" % (time.monotonic_ns(), time.time(), self.take()))
        except Exception as exc:  # noqa: BLE001 - reported in the run record, never kills the run
            self.error = "%s sampler: %r" % (self.kind, exc)

    def stop(self, timeout=5.0):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout)
        return self.error


JTOP_CONNECT_TIMEOUT_S = 15.0


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
        service.JTOP_PIPE = _jtop_socket(service)
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
            raise Unavailable(_jtop_message(outcome[0])) from None
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
            self.error = _jtop_message(exc)
        finally:
            self._close()

    def stop(self, timeout=None):
        # the loop notices the stop after the next sample: up to 3 periods when the service is slow
        return Snapshotter.stop(self, timeout or max(5.0, 3 * self.period_s + 1))


def start(specs, run_dir):
    """Start every platform collector in ``specs`` (kind -> spec); return (running, skipped reasons)."""
    running, skipped = [], {}
    for kind, spec in specs.items():
        if kind not in KINDS:
            continue
        period = int(spec.get("period_ms", 1000))
        try:
            reason = unavailable_reason(kind)
            if reason:
                raise Unavailable(reason)
            if kind in PROCESS_KINDS:
                item = _process(kind, spec, run_dir)
            elif kind == "jtop":
                item = JtopSampler(period, os.path.join(run_dir, "jtop.jsonl"))
            else:
                item = Snapshotter(kind, period, os.path.join(run_dir, kind + ".txt"), SNAPSHOTS[kind])
            item.start()
        except Unavailable as exc:
            if spec.get("optional"):
                skipped[kind] = str(exc)
                continue
            for item in running:
                item.stop()
            raise Unavailable("collector %s: %s" % (kind, exc)) from None
        running.append(item)
    return running, skipped


if __name__ == "__main__":  # a quick look on a board: python3 -m runner.platform_collectors
    json.dump(availability(), sys.stdout, indent=1)
    sys.stdout.write("\n")
