"""Jetson facts: L4T release, nvpmodel, GPU devfreq and EMC clocks, jetson_clocks, boot target, display managers.

Tool output is returned raw (``*_raw`` keys): the controller's parsers read it, so one parser per format exists,
tested on real captures.
"""

import glob
import os
import re
import shutil

from runner import sysroot
from runner.sysroot import integer, integers, text
from runner.util import read_text, run_tool

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


def gpu_devfreq():
    """The first GPU devfreq directory that exists, with its table, cap and current clock (Hz)."""
    candidates = list(GPU_DEVFREQ_DIRS)
    for pattern in ("/sys/class/devfreq/*gpu*", "/sys/class/devfreq/*ga10b*", "/sys/class/devfreq/*gv11b*"):
        candidates += [sysroot.machine_path(p) for p in sorted(glob.glob(sysroot.path(pattern)))]
    for rel in candidates:
        table = integers(rel + "/available_frequencies")
        if table is None and integer(rel + "/max_freq") is None:
            continue
        return {"gpu_devfreq_path": rel, "gpu_available_hz": table,
                "gpu_table_max_hz": max(table) if table else None,
                "gpu_max_freq_hz": integer(rel + "/max_freq"), "gpu_min_freq_hz": integer(rel + "/min_freq"),
                "gpu_cur_freq_hz": integer(rel + "/cur_freq")}
    return {"gpu_devfreq_path": None, "gpu_devfreq_error": "no GPU devfreq directory under %s"
            % ", ".join(GPU_DEVFREQ_DIRS[:4])}


def emc():
    """EMC (memory controller) clock; debugfs needs root, so it may be unreadable."""
    base = "/sys/kernel/debug/bpmp/debug/clk/emc/"
    return {"emc_rate_hz": integer(base + "rate"), "emc_max_rate_hz": integer(base + "max_rate"),
            "emc_min_rate_hz": integer(base + "min_rate")}


def default_target():
    """multi-user.target or graphical.target, from the symlink (no systemctl needed)."""
    for rel in ("/etc/systemd/system/default.target", "/lib/systemd/system/default.target"):
        path = sysroot.path(rel)
        if os.path.islink(path):
            return os.path.basename(os.readlink(path))
    if not sysroot.ROOT:
        out, _err = run_tool(["systemctl", "get-default"])
        if out:
            return out.strip()
    return None


def display_managers():
    """Names of running display-manager/X processes (a GUI costs memory on an 8 GB board)."""
    found = set()
    for comm in glob.glob(sysroot.path("/proc/[0-9]*/comm")):
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
    release = text("/etc/nv_tegra_release")
    facts = {"l4t_release_raw": release.splitlines()[0] if release else None, "l4t_release": None,
             "board_model": (text("/proc/device-tree/model") or "").strip("\x00") or None}
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
