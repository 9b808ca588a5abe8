"""Which collectors can run on this machine: None, or a one-line reason why not.

The controller's preflight asks (through the probe's ``collectors_unavailable``) before a campaign starts;
``python3 -m runner.collectors.availability`` gives a quick look on a board.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

from runner import sysroot
from runner.collectors.base import KINDS
from runner.collectors.jetson_stats import jtop_reason
from runner.collectors.offcpu import unavailable_reason as offcpu_reason


def _can_sudo():
    if os.geteuid() == 0:
        return True
    if not shutil.which("sudo"):
        return False
    return subprocess.run(["sudo", "-n", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode == 0


def unavailable_reason(kind):
    """None when ``kind`` can run here, else a one-line reason."""
    if kind in ("tegrastats", "iostat", "vm_stat"):
        return None if shutil.which(kind) else "%s not found on PATH" % kind
    if kind == "powermetrics":
        if not shutil.which("powermetrics"):
            return "powermetrics not found on PATH (macOS only)"
        return None if _can_sudo() else "powermetrics needs root: allow passwordless sudo for it or run as root"
    if kind == "vmstat":
        return None if os.access(sysroot.path("/proc/vmstat"), os.R_OK) else "/proc/vmstat is not readable"
    if kind == "psi":
        readable = [r for r in ("memory", "io", "cpu") if os.access(sysroot.path("/proc/pressure/" + r), os.R_OK)]
        return None if readable else "/proc/pressure/* is not readable (kernel without PSI, or needs root on Android)"
    if kind == "thermal":
        return None if glob.glob(sysroot.path("/sys/class/thermal/thermal_zone*/temp")) else "no thermal zones"
    if kind == "power":
        found = glob.glob(sysroot.path("/sys/class/power_supply/*/current_now"))
        return None if found else "no power_supply with current_now"
    if kind == "rapl":
        zones = glob.glob(sysroot.path("/sys/class/powercap/intel-rapl:*/energy_uj"))
        if not zones:
            return "no power sensor: no /sys/class/powercap/intel-rapl:*/energy_uj (no RAPL on this machine)"
        readable = [z for z in zones if os.access(z, os.R_OK)]
        return None if readable else "RAPL energy_uj is readable by root only (Linux >= 5.10): run the runner as root"
    if kind == "hwmon":
        found = glob.glob(sysroot.path("/sys/class/hwmon/hwmon*/power*_input"))
        return None if found else "no power sensor: no /sys/class/hwmon/hwmon*/power*_input on this machine"
    if kind == "jtop":
        return jtop_reason()
    return "unknown collector %s" % kind


def blockstat_reason():
    """The native sampler reads /sys/block: macOS has none (its disks are sampled by iostat)."""
    if os.path.isdir(sysroot.path("/sys/block")):
        return None
    return "no /sys/block here (on macOS collect iostat instead)"


def availability():
    out = {kind: unavailable_reason(kind) for kind in KINDS}
    out["blockstat"] = blockstat_reason()  # started by runner.collectors.run, but refused by the same preflight
    out["offcpu"] = offcpu_reason()  # likewise (bpftrace, root, tracefs)
    return out


if __name__ == "__main__":  # a quick look on a board: python3 -m runner.collectors.availability
    json.dump(availability(), sys.stdout, indent=1)
    sys.stdout.write("\n")
