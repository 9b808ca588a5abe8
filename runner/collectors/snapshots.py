"""Files sampled by a Python thread: /proc/vmstat, /proc/pressure/*, thermal zones, power supplies, RAPL energy
counters, hwmon power channels, macOS vm_stat.

Sampled files use one snapshot format, so the raw bytes stay the kernel's own::

    # harness-snapshots v1 kind=vmstat period_ms=100
    @ <monotonic ns> <wall s>
    <verbatim lines of the source, prefixed with the source name where there are several>
"""

import glob
import os
import threading
import time

from runner import sysroot
from runner.util import read_text, run_tool


def _snapshot_vmstat():
    return read_text(sysroot.path("/proc/vmstat"), "")


def _snapshot_psi():
    lines = []
    for res in ("memory", "io", "cpu", "irq"):  # irq: kernel 6.1+ with CONFIG_IRQ_TIME_ACCOUNTING, else absent
        for line in (read_text(sysroot.path("/proc/pressure/" + res), "") or "").splitlines():
            lines.append("%s %s" % (res, line))
    return "\n".join(lines) + "\n"


def _snapshot_thermal():
    lines = []
    for zone in sorted(glob.glob(sysroot.path("/sys/class/thermal/thermal_zone*"))):
        name = (read_text(zone + "/type", "") or os.path.basename(zone)).strip().replace(" ", "_")
        temp = (read_text(zone + "/temp", "") or "").strip()
        if temp:
            lines.append("%s %s" % (name, temp))
    return "\n".join(lines) + "\n"


def _word(path):
    """A sysfs word as one token ("Not charging" -> "Not_charging"), "-" where the file is absent or empty."""
    return "_".join((read_text(path, "") or "").split()) or "-"


def _snapshot_power():
    # type and status say whether a reading is the board's draw (a discharging battery): the sign of current_now
    # is not to be trusted for it (vendors differ), the status is
    lines = []
    for path in sorted(glob.glob(sysroot.path("/sys/class/power_supply/*"))):
        current = (read_text(path + "/current_now", "") or "").strip()
        voltage = (read_text(path + "/voltage_now", "") or "").strip()
        if current:
            lines.append("%s %s %s %s %s" % (os.path.basename(path), current, voltage or "-", _word(path + "/type"),
                                             _word(path + "/status")))
    return "\n".join(lines) + "\n"


def _snapshot_rapl():
    # every zone (package-N, psys, and their core/uncore/dram subzones), its counter and where it wraps: the
    # controller picks the total and unwraps (harness/analysis/energy.py)
    lines = []
    for zone in sorted(glob.glob(sysroot.path("/sys/class/powercap/intel-rapl:*"))):
        energy = (read_text(zone + "/energy_uj", "") or "").strip()
        if energy:
            lines.append("%s %s %s %s" % (os.path.basename(zone), _word(zone + "/name"), energy,
                                          _word(zone + "/max_energy_range_uj")))
    return "\n".join(lines) + "\n"


def _snapshot_hwmon():
    # power*_input in uW (the hwmon ABI), with the chip's name and the channel's label where it has one
    lines = []
    for found in sorted(glob.glob(sysroot.path("/sys/class/hwmon/hwmon*/power*_input"))):
        chip, channel = os.path.dirname(found), os.path.basename(found)[:-len("_input")]
        value = (read_text(found, "") or "").strip()
        if value:
            lines.append("%s %s %s %s %s" % (os.path.basename(chip), _word(chip + "/name"), channel, value,
                                             _word(os.path.join(chip, channel + "_label"))))
    return "\n".join(lines) + "\n"


def _snapshot_vm_stat():
    out, _err = run_tool(["vm_stat"], timeout=5)
    return out or ""


SNAPSHOTS = {"vmstat": _snapshot_vmstat, "psi": _snapshot_psi, "thermal": _snapshot_thermal,
             "power": _snapshot_power, "vm_stat": _snapshot_vm_stat, "rapl": _snapshot_rapl,
             "hwmon": _snapshot_hwmon}


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
