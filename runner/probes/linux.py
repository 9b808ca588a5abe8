"""Linux facts (every platform but macOS): cpufreq policies, NVMe links, swap and zram, thermal zones, power
supplies, PSI."""

import glob
import os
import re

from runner import sysroot
from runner.sysroot import integer, integers, text
from runner.util import read_text


def cpufreq_policies():
    """Per cpufreq policy: the table, the hardware max and the cap in effect (scaling_max_freq)."""
    policies = {}
    for path in sorted(glob.glob(sysroot.path("/sys/devices/system/cpu/cpufreq/policy*"))):
        rel = sysroot.machine_path(path)
        policies[os.path.basename(path)] = {
            "cpus": text(rel + "/related_cpus"),
            "governor": text(rel + "/scaling_governor"),
            "available_khz": integers(rel + "/scaling_available_frequencies"),
            "cpuinfo_max_khz": integer(rel + "/cpuinfo_max_freq"),
            "scaling_max_khz": integer(rel + "/scaling_max_freq"),
            "scaling_min_khz": integer(rel + "/scaling_min_freq"),
            "cur_khz": integer(rel + "/scaling_cur_freq"),
        }
    return policies


def nvme_links():
    """PCIe link of every NVMe controller: what it runs at and what it could run at."""
    links = {}
    for path in sorted(glob.glob(sysroot.path("/sys/class/nvme/nvme*"))):
        rel = sysroot.machine_path(path) + "/device/"
        speed, max_speed = text(rel + "current_link_speed"), text(rel + "max_link_speed")
        links[os.path.basename(path)] = {
            "speed": speed, "gts": _gts(speed), "width": integer(rel + "current_link_width"),
            "max_gts": _gts(max_speed), "max_width": integer(rel + "max_link_width"),
            "model": text("/sys/class/nvme/%s/model" % os.path.basename(path)),
        }
    return links


def _gts(value):
    match = re.match(r"\s*([\d.]+)\s*GT/s", value or "")
    return float(match.group(1)) if match else None


def swaps():
    """Swap devices from /proc/swaps, with zram sizes (the seed board had 3.7 GiB of zram)."""
    devices = []
    for line in (read_text(sysroot.path("/proc/swaps"), "") or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 4:
            devices.append({"name": parts[0], "type": parts[1], "size_bytes": int(parts[2]) * 1024,
                            "used_bytes": int(parts[3]) * 1024})
    zram = 0
    for path in glob.glob(sysroot.path("/sys/block/zram*")):
        zram += integer(sysroot.machine_path(path) + "/disksize") or 0
    return devices, zram


def thermal_zones():
    """Every thermal zone in degrees C, by its type (``tj-thermal``, ``cpu-thermal``...)."""
    zones = {}
    for zone in sorted(glob.glob(sysroot.path("/sys/class/thermal/thermal_zone*"))):
        rel = sysroot.machine_path(zone)
        name = text(rel + "/type") or os.path.basename(zone)
        raw = integer(rel + "/temp")
        if raw is not None:
            zones[name] = raw / 1000.0
    return zones


def power_supplies():
    """Battery/charger readings: current in uA and voltage in uV, as the kernel reports them."""
    out = {}
    for path in sorted(glob.glob(sysroot.path("/sys/class/power_supply/*"))):
        rel = sysroot.machine_path(path)
        entry = {key: integer(rel + "/" + key) for key in ("current_now", "voltage_now", "capacity", "temp")}
        entry["type"], entry["status"] = text(rel + "/type"), text(rel + "/status")
        if any(v is not None for v in entry.values()):
            out[os.path.basename(path)] = entry
    return out


def linux_facts():
    devices, zram = swaps()
    return {
        "cpufreq": cpufreq_policies(),
        "nvme_links": nvme_links(),
        "swap_devices": devices,
        "zram_bytes": zram,
        "thermal_c": thermal_zones(),
        "psi_available": os.access(sysroot.path("/proc/pressure/memory"), os.R_OK),
    }
