"""Facts about this machine (``python3 -m runner probe``) and the state it is in at the start of a run.

Paths go through ``sysroot`` so tests can point the probe at a fake tree.
"""

import glob
import os
import platform
import shutil
import socket
import subprocess

from runner import sysroot
from runner.probes import blockdev, jetson, linux, platforms
from runner.util import read_text


def meminfo():
    out = {}
    for line in (read_text(sysroot.path("/proc/meminfo"), "") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            value = int(parts[0])
            out[key] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def thermal():
    temps = {}
    for zone in sorted(glob.glob(sysroot.path("/sys/class/thermal/thermal_zone*"))):
        name = (read_text(zone + "/type", "") or os.path.basename(zone)).strip()
        raw = (read_text(zone + "/temp", "") or "").strip()
        try:
            temps["temp_%s_c" % name.lower()] = int(raw) / 1000.0
        except ValueError:
            continue
    return temps


def entry_clocks():
    """GPU clock and cap (Jetson devfreq) and the highest CPU cap, for every run's entry state."""
    out = {}
    gpu = jetson.gpu_devfreq()
    if gpu.get("gpu_devfreq_path"):
        out["gpu_cur_freq_hz"], out["gpu_max_freq_hz"] = gpu["gpu_cur_freq_hz"], gpu["gpu_max_freq_hz"]
    caps = [p["scaling_max_khz"] for p in linux.cpufreq_policies().values() if p.get("scaling_max_khz")]
    if caps:
        out["cpu_max_khz"] = max(caps)
    return out


def entry_state():
    """What a BigMoeOnEdge-style benchmark logs before every cell: memory, load, heat, clocks."""
    mem = meminfo()
    load = (read_text(sysroot.path("/proc/loadavg"), "") or "").split()
    state = {
        "mem_available_bytes": mem.get("MemAvailable"),
        "mem_total_bytes": mem.get("MemTotal"),
        "swap_free_bytes": mem.get("SwapFree"),
        "cached_bytes": mem.get("Cached"),
        "load1": float(load[0]) if load else None,
    }
    freq = (read_text(sysroot.path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"), "") or "").strip()
    state["cpu0_cur_khz"] = int(freq) if freq.isdigit() else None
    state.update(thermal())
    # clocks in effect at the start of the run (a throttled GPU or a lowered cap shows here)
    state.update(entry_clocks())
    return state


def _version(argv):
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).decode(errors="replace").strip().splitlines()
    return text[0] if text else None


def facts(files=(), block_device="auto", tools=()):
    mem = meminfo()
    os_release = {}
    for line in (read_text(sysroot.path("/etc/os-release"), "") or "").splitlines():
        key, _, value = line.partition("=")
        os_release[key] = value.strip('"')
    cpu_model = None
    for line in (read_text(sysroot.path("/proc/cpuinfo"), "") or "").splitlines():
        if line.lower().startswith(("model name", "hardware")):
            cpu_model = line.split(":", 1)[1].strip()
            break
    out = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "os": os_release.get("PRETTY_NAME"),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "mem_total_bytes": mem.get("MemTotal"),
        "swap_total_bytes": mem.get("SwapTotal"),
        "python": platform.python_version(),
        "fio_version": _version(["fio", "--version"]),
        "cgroup_v2": os.path.exists(sysroot.path("/sys/fs/cgroup/cgroup.controllers")),
    }
    for tool in tools:
        out["tool_" + tool] = shutil.which(tool)
    dev = blockdev.resolve_block_device(block_device, files)
    if dev:
        out.update(blockdev.block_facts(dev))
    # platform-specific facts (Jetson clocks, Android properties, macOS sysctl), auto-detected
    out.update(platforms.facts())
    return out
