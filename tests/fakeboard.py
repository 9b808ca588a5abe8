"""Fake boards for platform tests: a sysfs/procfs tree (read through HARNESS_SYSROOT) and a bin/ of
fake tools (nvpmodel, jetson_clocks, tegrastats) that replay real captured output.

The numbers are the seed board's (docs/methodology.md section 1) and the captures' (tests/data/jetson/SOURCE.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.helpers import DATA

FIXTURES = DATA
SUPER_GPU_TABLE = [306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000, 1020000000]
NON_SUPER_GPU_TABLE = [306000000, 408000000, 510000000, 624750000]
CPU_TABLE_SUPER = [729600, 960000, 1190400, 1344000, 1510400, 1728000]
GPU_DIR = "/sys/class/devfreq/17000000.gpu"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def tool(bindir: Path, name: str, body: str) -> None:
    """An executable Python script on the fake PATH."""
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


def jetson_tree(root: Path, *, gpu_table: list[int] = SUPER_GPU_TABLE, gpu_dir: str = GPU_DIR,
                cpu_max_khz: int = 1728000, default_target: str = "multi-user.target", gui_process: bool = False,
                link: tuple[str, int] = ("8.0 GT/s PCIe", 4), tj_millic: int = 47000) -> Path:
    write(root, "/etc/nv_tegra_release", (DATA / "jetson" / "nv_tegra_release-r36.4.7-orin-nano-super.txt").read_text())
    write(root, "/proc/device-tree/model", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super\0")
    write(root, "/proc/meminfo", "MemTotal:        7802832 kB\nMemFree:          523412 kB\n"
                                 "MemAvailable:    4012345 kB\nSwapTotal:       3901436 kB\n")
    write(root, "/proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                               "/dev/zram0                              partition\t3901436\t\t0\t\t5\n")
    write(root, "/sys/block/zram0/disksize", str(3901436 * 1024))
    write(root, gpu_dir + "/available_frequencies", " ".join(map(str, gpu_table)) + "\n")
    write(root, gpu_dir + "/max_freq", f"{max(gpu_table)}\n")
    write(root, gpu_dir + "/min_freq", f"{min(gpu_table)}\n")
    write(root, gpu_dir + "/cur_freq", f"{min(gpu_table)}\n")
    policy = "/sys/devices/system/cpu/cpufreq/policy0/"
    table = [f for f in CPU_TABLE_SUPER if f <= cpu_max_khz]
    write(root, policy + "scaling_available_frequencies", " ".join(map(str, table)) + " \n")
    write(root, policy + "cpuinfo_max_freq", f"{max(table)}\n")
    write(root, policy + "scaling_max_freq", f"{cpu_max_khz}\n")
    write(root, policy + "scaling_min_freq", "729600\n")
    write(root, policy + "scaling_cur_freq", "960000\n")
    write(root, policy + "related_cpus", "0 1 2 3 4 5\n")
    write(root, policy + "scaling_governor", "schedutil\n")
    write(root, "/sys/class/nvme/nvme0/model", "Samsung SSD 980 PRO 1TB                 \n")
    write(root, "/sys/class/nvme/nvme0/device/current_link_speed", link[0] + "\n")
    write(root, "/sys/class/nvme/nvme0/device/current_link_width", f"{link[1]}\n")
    write(root, "/sys/class/nvme/nvme0/device/max_link_speed", "8.0 GT/s PCIe\n")
    write(root, "/sys/class/nvme/nvme0/device/max_link_width", "4\n")
    write(root, "/sys/class/thermal/thermal_zone0/type", "cpu-thermal\n")
    write(root, "/sys/class/thermal/thermal_zone0/temp", "46000\n")
    write(root, "/sys/class/thermal/thermal_zone8/type", "tj-thermal\n")
    write(root, "/sys/class/thermal/thermal_zone8/temp", f"{tj_millic}\n")
    target = root / "etc/systemd/system/default.target"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(f"/lib/systemd/system/{default_target}")
    write(root, "/proc/1/comm", "systemd\n")
    write(root, "/proc/vmstat", (DATA / "linux" / "proc-vmstat-debian12-6.18.txt").read_text())
    if gui_process:
        write(root, "/proc/1234/comm", "gdm3\n")
    return root


def jetson_tools(bindir: Path, *, mode: str = "maxn-super") -> Path:
    nvp = FIXTURES / "nvpmodel" / f"q-{mode}.txt"
    tool(bindir, "nvpmodel", f"import sys\nsys.stdout.write(open({str(nvp)!r}).read())\n")
    clocks = DATA / "jetson" / "jetson-clocks-show-orin-nano-super-25w-jp7.txt"
    tool(bindir, "jetson_clocks", "import sys\nif '--show' not in sys.argv: sys.exit('fake: only --show')\n"
                                  f"sys.stdout.write(open({str(clocks)!r}).read())\n")
    log = FIXTURES / "tegrastats" / "orin-nano-super-jp6.log"
    # Like the real tool: --interval MS --logfile FILE, a line per interval, stops on SIGTERM/SIGINT.
    tool(bindir, "tegrastats", f"""import signal, sys, time
args = sys.argv[1:]
if '--stop' in args: sys.exit(0)
interval = int(args[args.index('--interval') + 1]) / 1000 if '--interval' in args else 1.0
out = open(args[args.index('--logfile') + 1], 'a') if '--logfile' in args else sys.stdout
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
lines = open({str(log)!r}).read().splitlines()
i = 0
while True:
    words = lines[i % len(lines)].split(' ')
    if words[0].count('-') == 2:  # the real tool stamps local time; so does the replay
        words[:2] = time.strftime('%m-%d-%Y %H:%M:%S').split(' ')
    out.write(' '.join(words) + '\\n'); out.flush(); i += 1
    time.sleep(interval)
""")
    return bindir


def jetson_env(root: Path, bindir: Path) -> dict[str, str]:
    return {"HARNESS_SYSROOT": str(root), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def target_dir(base: Path, name: str, platform: str) -> Path:
    targets = base / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    (targets / f"{name}.yaml").write_text(f"platform: {platform}\ntransport: local\nworkdir: {base / 'work'}\n")
    return targets


def android_tree(root: Path, *, zone_millic: int = 38000) -> Path:
    """A phone: /system/build.prop marks Android; UFS shows as sda; battery in power_supply."""
    write(root, "/system/build.prop", "ro.build.version.release=13\n")
    write(root, "/proc/meminfo", "MemTotal:       11615536 kB\nMemAvailable:    4312200 kB\n")
    write(root, "/proc/vmstat", (DATA / "linux" / "proc-vmstat-debian12-6.18.txt").read_text())
    write(root, "/sys/block/sda/size", "488554496\n")
    write(root, "/sys/block/zram0/disksize", str(6 << 30))
    write(root, "/sys/class/thermal/thermal_zone0/type", "cpu-0-0-usr\n")
    write(root, "/sys/class/thermal/thermal_zone0/temp", f"{zone_millic}\n")
    write(root, "/sys/class/thermal/thermal_zone1/type", "battery\n")
    write(root, "/sys/class/thermal/thermal_zone1/temp", "31000\n")
    write(root, "/sys/class/power_supply/battery/type", "Battery\n")
    write(root, "/sys/class/power_supply/battery/status", "Discharging\n")
    write(root, "/sys/class/power_supply/battery/current_now", "-512000\n")
    write(root, "/sys/class/power_supply/battery/voltage_now", "3851000\n")
    write(root, "/sys/class/power_supply/battery/capacity", "83\n")
    policy = "/sys/devices/system/cpu/cpufreq/policy7/"
    write(root, policy + "scaling_available_frequencies", "1000000 2000000 3050000\n")
    write(root, policy + "scaling_max_freq", "3050000\n")
    write(root, policy + "cpuinfo_max_freq", "3050000\n")
    return root


def android_tools(bindir: Path, getprop: str = "getprop-redmi-m2101k9c-mt6893.txt") -> Path:
    capture = DATA / "android" / getprop
    tool(bindir, "getprop", f"import sys\nsys.stdout.write(open({str(capture)!r}).read())\n")
    return bindir


def replay(bindir: Path, name: str, capture: Path, exit_code: int = 0) -> None:
    """A fake ``name`` that prints a real capture (macOS sysctl, sw_vers, diskutil...)."""
    tool(bindir, name, f"import sys\nsys.stdout.write(open({str(capture)!r}).read())\nsys.exit({exit_code})\n")
