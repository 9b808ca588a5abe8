"""Platform facts read on the target: Jetson sysfs and tools, Android properties, macOS sysctl.

Stdlib only (Python >= 3.8). Every path goes through ``probe.ROOT`` (HARNESS_SYSROOT) and every
tool is looked up on PATH, so tests replay real captures from a fake tree and fake executables.
Tool output is returned raw (``*_raw`` keys): the controller's parsers read it, so one parser per
format exists, tested on real captures.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

from runner import probe
from runner.util import read_text

# The GPU devfreq directory moved between kernels and JetPack releases (issue 5 lists them).
GPU_DEVFREQ_DIRS = (
    "/sys/class/devfreq/17000000.gpu",
    "/sys/devices/platform/17000000.gpu/devfreq_dev",
    "/sys/devices/17000000.ga10b/devfreq/17000000.ga10b",
    "/sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu",
    "/sys/devices/gpu.0/devfreq/17000000.gv11b",
    "/sys/devices/17000000.gv11b/devfreq/17000000.gv11b",
    "/sys/devices/57000000.gpu/devfreq/57000000.gpu",
)
DISPLAY_MANAGERS = ("gdm3", "gdm", "lightdm", "sddm", "Xorg", "Xwayland", "gnome-shell", "nvargus-daemon-x")
TOOL_TIMEOUT_S = 15


def _p(path):
    return probe.ROOT + path


def _text(path):
    value = read_text(_p(path))
    return value.strip() if value is not None else None


def _int(path):
    value = _text(path)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _ints(path):
    value = _text(path)
    if not value:
        return None
    try:
        return sorted(int(v) for v in value.split())
    except ValueError:
        return None


def run_tool(argv, timeout=TOOL_TIMEOUT_S):
    """(stdout, error): error is a one-line reason when the tool is missing, fails or hangs."""
    if not shutil.which(argv[0]):
        return None, "%s not found on PATH" % argv[0]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "%s: %s" % (" ".join(argv), exc)
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        err = (done.stderr.decode(errors="replace").strip() or out.strip()).splitlines()[-1:] or [""]
        return out or None, "%s exited %d: %s" % (" ".join(argv), done.returncode, err[0][:200])
    return out, None


def detect():
    """Which platform this machine is: jetson, android, macos or linux."""
    if sys.platform == "darwin":
        return "macos"
    compatible = (_text("/proc/device-tree/compatible") or "").lower()
    if os.path.exists(_p("/etc/nv_tegra_release")) or ("nvidia" in compatible and "tegra" in compatible):
        return "jetson"
    if os.path.exists(_p("/system/build.prop")) or "ANDROID_ROOT" in os.environ:
        return "android"
    return "linux"


# ---------------------------------------------------------------------------------------- Linux
def cpufreq_policies():
    """Per cpufreq policy: the table, the hardware max and the cap in effect (scaling_max_freq)."""
    policies = {}
    for path in sorted(glob.glob(_p("/sys/devices/system/cpu/cpufreq/policy*"))):
        rel = path[len(probe.ROOT):]
        policies[os.path.basename(path)] = {
            "cpus": _text(rel + "/related_cpus"),
            "governor": _text(rel + "/scaling_governor"),
            "available_khz": _ints(rel + "/scaling_available_frequencies"),
            "cpuinfo_max_khz": _int(rel + "/cpuinfo_max_freq"),
            "scaling_max_khz": _int(rel + "/scaling_max_freq"),
            "scaling_min_khz": _int(rel + "/scaling_min_freq"),
            "cur_khz": _int(rel + "/scaling_cur_freq"),
        }
    return policies


def nvme_links():
    """PCIe link of every NVMe controller: what it runs at and what it could run at."""
    links = {}
    for path in sorted(glob.glob(_p("/sys/class/nvme/nvme*"))):
        rel = path[len(probe.ROOT):] + "/device/"
        speed, max_speed = _text(rel + "current_link_speed"), _text(rel + "max_link_speed")
        links[os.path.basename(path)] = {
            "speed": speed, "gts": _gts(speed), "width": _int(rel + "current_link_width"),
            "max_gts": _gts(max_speed), "max_width": _int(rel + "max_link_width"),
            "model": _text("/sys/class/nvme/%s/model" % os.path.basename(path)),
        }
    return links


def _gts(text):
    match = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


def swaps():
    """Swap devices from /proc/swaps, with zram sizes (the seed board had 3.7 GiB of zram)."""
    devices = []
    for line in (read_text(_p("/proc/swaps"), "") or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 4:
            devices.append({"name": parts[0], "type": parts[1], "size_bytes": int(parts[2]) * 1024,
                            "used_bytes": int(parts[3]) * 1024})
    zram = 0
    for path in glob.glob(_p("/sys/block/zram*")):
        zram += _int(path[len(probe.ROOT):] + "/disksize") or 0
    return devices, zram


def thermal_zones():
    """Every thermal zone in degrees C, by its type (``tj-thermal``, ``cpu-thermal``...)."""
    zones = {}
    for zone in sorted(glob.glob(_p("/sys/class/thermal/thermal_zone*"))):
        rel = zone[len(probe.ROOT):]
        name = _text(rel + "/type") or os.path.basename(zone)
        raw = _int(rel + "/temp")
        if raw is not None:
            zones[name] = raw / 1000.0
    return zones


def power_supplies():
    """Battery/charger readings: current in uA and voltage in uV, as the kernel reports them."""
    out = {}
    for path in sorted(glob.glob(_p("/sys/class/power_supply/*"))):
        rel = path[len(probe.ROOT):]
        entry = {key: _int(rel + "/" + key) for key in ("current_now", "voltage_now", "capacity", "temp")}
        entry["type"], entry["status"] = _text(rel + "/type"), _text(rel + "/status")
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
        "psi_available": os.access(_p("/proc/pressure/memory"), os.R_OK),
    }


# ---------------------------------------------------------------------------------------- Jetson
def gpu_devfreq():
    """The first GPU devfreq directory that exists, with its table, cap and current clock (Hz)."""
    candidates = list(GPU_DEVFREQ_DIRS)
    for pattern in ("/sys/class/devfreq/*gpu*", "/sys/class/devfreq/*ga10b*", "/sys/class/devfreq/*gv11b*"):
        candidates += [p[len(probe.ROOT):] for p in sorted(glob.glob(_p(pattern)))]
    for rel in candidates:
        table = _ints(rel + "/available_frequencies")
        if table is None and _int(rel + "/max_freq") is None:
            continue
        return {"gpu_devfreq_path": rel, "gpu_available_hz": table,
                "gpu_table_max_hz": max(table) if table else None,
                "gpu_max_freq_hz": _int(rel + "/max_freq"), "gpu_min_freq_hz": _int(rel + "/min_freq"),
                "gpu_cur_freq_hz": _int(rel + "/cur_freq")}
    return {"gpu_devfreq_path": None, "gpu_devfreq_error": "no GPU devfreq directory under %s"
            % ", ".join(GPU_DEVFREQ_DIRS[:4])}


def emc():
    """EMC (memory controller) clock; debugfs needs root, so it may be unreadable."""
    base = "/sys/kernel/debug/bpmp/debug/clk/emc/"
    return {"emc_rate_hz": _int(base + "rate"), "emc_max_rate_hz": _int(base + "max_rate"),
            "emc_min_rate_hz": _int(base + "min_rate")}


def default_target():
    """multi-user.target or graphical.target, from the symlink (no systemctl needed)."""
    for rel in ("/etc/systemd/system/default.target", "/lib/systemd/system/default.target"):
        path = _p(rel)
        if os.path.islink(path):
            return os.path.basename(os.readlink(path))
    if not probe.ROOT:
        out, _err = run_tool(["systemctl", "get-default"])
        if out:
            return out.strip()
    return None


def display_managers():
    """Names of running display-manager/X processes (a GUI costs memory on an 8 GB board)."""
    found = set()
    for comm in glob.glob(_p("/proc/[0-9]*/comm")):
        name = (read_text(comm, "") or "").strip()
        if name in DISPLAY_MANAGERS:
            found.add(name)
    return sorted(found)


def _sudo_argv(argv):
    # jetson_clocks --show needs root; never prompt for a password (sudo -n fails instead)
    if os.geteuid() == 0 or not shutil.which("sudo"):
        return argv
    return ["sudo", "-n"] + argv


def jetson_facts():
    release = _text("/etc/nv_tegra_release")
    facts = {"l4t_release_raw": release.splitlines()[0] if release else None, "l4t_release": None,
             "board_model": (_text("/proc/device-tree/model") or "").strip("\x00") or None}
    if release:
        match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", release)
        if match:
            facts["l4t_release"] = "%s.%s" % (match.group(1), match.group(2))
    facts["nvpmodel_q_raw"], facts["nvpmodel_error"] = run_tool(["nvpmodel", "-q"])
    facts.update(gpu_devfreq())
    facts.update(emc())
    if shutil.which("jetson_clocks"):
        facts["jetson_clocks_raw"], facts["jetson_clocks_error"] = run_tool(
            _sudo_argv([shutil.which("jetson_clocks"), "--show"]))
    else:
        facts["jetson_clocks_raw"], facts["jetson_clocks_error"] = None, "jetson_clocks not found on PATH"
    facts["default_target"] = default_target()
    facts["display_managers"] = display_managers()
    facts["tegrastats_path"] = shutil.which("tegrastats")
    return facts


def entry_clocks():
    """GPU clock and cap (Jetson devfreq) and the highest CPU cap, for every run's entry state."""
    out = {}
    gpu = gpu_devfreq()
    if gpu.get("gpu_devfreq_path"):
        out["gpu_cur_freq_hz"], out["gpu_max_freq_hz"] = gpu["gpu_cur_freq_hz"], gpu["gpu_max_freq_hz"]
    caps = [p["scaling_max_khz"] for p in cpufreq_policies().values() if p.get("scaling_max_khz")]
    if caps:
        out["cpu_max_khz"] = max(caps)
    return out


# ---------------------------------------------------------------------------------------- Android
ANDROID_PROPS = ("ro.product.model", "ro.product.manufacturer", "ro.build.version.release", "ro.build.version.sdk",
                 "ro.soc.model", "ro.soc.manufacturer", "ro.board.platform", "ro.hardware")


def android_facts():
    out, err = run_tool(["getprop"])
    facts = {"getprop_raw": out, "getprop_error": err, "block_devices": []}
    for path in sorted(glob.glob(_p("/sys/block/*"))):
        name = os.path.basename(path)
        if name.startswith(("sd", "mmcblk", "nvme")):  # UFS shows as sdX, eMMC as mmcblkN
            facts["block_devices"].append(name)
    facts["power_supply"] = power_supplies()
    return facts


# ---------------------------------------------------------------------------------------- macOS
MACOS_SYSCTL = ("hw.model", "hw.memsize", "hw.ncpu", "hw.pagesize", "machdep.cpu.brand_string",
                "hw.perflevel0.physicalcpu", "hw.perflevel1.physicalcpu", "hw.perflevel0.name",
                "hw.perflevel1.name", "kern.osproductversion")


def macos_facts():
    facts = {}
    facts["sysctl_raw"], facts["sysctl_error"] = run_tool(["sysctl"] + list(MACOS_SYSCTL))
    facts["sw_vers_raw"], facts["sw_vers_error"] = run_tool(["sw_vers"])
    facts["diskutil_raw"], facts["diskutil_error"] = run_tool(["diskutil", "info", "/"])
    facts["cache_drop"], facts["cache_drop_error"] = cache_drop_method()
    return facts


def cache_drop_method():
    """("purge", None) when the page cache can be dropped here without a password, else (None, reason).

    Asks sudo whether purge would be allowed (``sudo -n -l``) instead of running it: a probe must
    not empty the cache."""
    purge = shutil.which("purge")
    if not purge:
        return None, "purge not found on PATH"
    if os.geteuid() == 0:
        return "purge", None
    out, err = run_tool(["sudo", "-n", "-l", purge], timeout=10)
    if err:
        return None, "sudo -n purge is not allowed (add a NOPASSWD sudoers rule for %s): %s" % (purge, err)
    return "purge", None


def drop_page_cache_macos():
    """Drop the whole page cache with purge; the record says plainly when the cache was NOT cleared."""
    method, reason = cache_drop_method()
    if method is None:
        return {"method": None, "cleared": False, "reason": reason}
    argv = [shutil.which("purge")] if os.geteuid() == 0 else ["sudo", "-n", shutil.which("purge")]
    _out, err = run_tool(argv, timeout=300)
    if err:
        return {"method": "purge", "cleared": False, "reason": err}
    return {"method": "purge", "cleared": True, "reason": None}


def facts(platform=None):
    platform = platform or detect()
    from runner import platform_collectors

    out = {"platform_detected": platform,
           "collectors_unavailable": {k: v for k, v in platform_collectors.availability().items() if v}}
    if platform != "macos":
        out.update(linux_facts())
    if platform == "jetson":
        out.update(jetson_facts())
    elif platform == "android":
        out.update(android_facts())
    elif platform == "macos":
        out.update(macos_facts())
    return out
