"""Facts about this machine and the state it is in at the start of a run.

Paths go through ``ROOT`` (like psutil's PROCFS_PATH) so tests can point the probe at a fake tree.
"""

import glob
import os
import platform
import shutil
import socket
import subprocess

from runner.util import read_text

ROOT = os.environ.get("HARNESS_SYSROOT", "")


def _p(path):
    return ROOT + path


def meminfo():
    out = {}
    for line in (read_text(_p("/proc/meminfo"), "") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            value = int(parts[0])
            out[key] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def thermal():
    temps = {}
    for zone in sorted(glob.glob(_p("/sys/class/thermal/thermal_zone*"))):
        name = (read_text(zone + "/type", "") or os.path.basename(zone)).strip()
        raw = (read_text(zone + "/temp", "") or "").strip()
        try:
            temps["temp_%s_c" % name.lower()] = int(raw) / 1000.0
        except ValueError:
            continue
    return temps


def entry_state():
    """What a BigMoeOnEdge-style benchmark logs before every cell: memory, load, heat, clocks."""
    mem = meminfo()
    load = (read_text(_p("/proc/loadavg"), "") or "").split()
    state = {
        "mem_available_bytes": mem.get("MemAvailable"),
        "mem_total_bytes": mem.get("MemTotal"),
        "swap_free_bytes": mem.get("SwapFree"),
        "cached_bytes": mem.get("Cached"),
        "load1": float(load[0]) if load else None,
    }
    freq = (read_text(_p("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"), "") or "").strip()
    state["cpu0_cur_khz"] = int(freq) if freq.isdigit() else None
    state.update(thermal())
    # clocks in effect at the start of the run (a throttled GPU or a lowered cap shows here)
    from runner import platform_probes

    state.update(platform_probes.entry_clocks())
    return state


def block_device_of(path):
    """The whole-disk block device (e.g. 'nvme0n1', 'vda') holding ``path``, or None."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    link = _p("/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev)))
    if not os.path.exists(link):
        return None
    real = os.path.realpath(link)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real)


def resolve_block_device(configured, files):
    if configured and configured != "auto":
        return configured
    for path in files:
        dev = block_device_of(path)
        if dev:
            return dev
    return None


def _block_facts(dev):
    base = _p("/sys/block/%s" % dev)
    facts = {"block_device": dev}
    for key, rel in (("read_ahead_kb", "queue/read_ahead_kb"), ("rotational", "queue/rotational"),
                     ("scheduler", "queue/scheduler"), ("logical_block_size", "queue/logical_block_size"),
                     ("device_model", "device/model"), ("size_sectors", "size")):
        value = read_text(os.path.join(base, rel))
        if value is not None:
            facts["block_" + key] = value.strip()
    return facts


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
    for line in (read_text(_p("/etc/os-release"), "") or "").splitlines():
        key, _, value = line.partition("=")
        os_release[key] = value.strip('"')
    cpu_model = None
    for line in (read_text(_p("/proc/cpuinfo"), "") or "").splitlines():
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
        "cgroup_v2": os.path.exists(_p("/sys/fs/cgroup/cgroup.controllers")),
    }
    for tool in tools:
        out["tool_" + tool] = shutil.which(tool)
    dev = resolve_block_device(block_device, files)
    if dev:
        out.update(_block_facts(dev))
    # platform-specific facts (Jetson clocks, Android properties, macOS sysctl), auto-detected
    from runner import platform_probes

    out.update(platform_probes.facts())
    return out


def blockstat_line(device):
    """The raw /sys/block/DEV/stat line of ``device`` right now, or None."""
    if not device:
        return None
    line = read_text(_p("/sys/block/%s/stat" % device))
    return line.strip() if line else None
