"""Which platform this machine is (jetson, android, macos or linux), and the facts of that platform.

Stdlib only (Python >= 3.8). Every path goes through ``sysroot`` and every tool is looked up on PATH, so tests
replay real captures from a fake tree and fake executables.
"""

import os
import sys

from runner import sysroot
from runner.collectors.availability import availability
from runner.probes import android, jetson, linux, macos


def detect():
    """Which platform this machine is: jetson, android, macos or linux."""
    if sys.platform == "darwin":
        return "macos"
    compatible = (sysroot.text("/proc/device-tree/compatible") or "").lower()
    if os.path.exists(sysroot.path("/etc/nv_tegra_release")) or ("nvidia" in compatible and "tegra" in compatible):
        return "jetson"
    if os.path.exists(sysroot.path("/system/build.prop")) or "ANDROID_ROOT" in os.environ:
        return "android"
    return "linux"


def facts(platform=None):
    platform = platform or detect()
    out = {"platform_detected": platform,
           "collectors_unavailable": {k: v for k, v in availability().items() if v}}
    if platform != "macos":
        out.update(linux.linux_facts())
    if platform == "jetson":
        out.update(jetson.jetson_facts())
    elif platform == "android":
        out.update(android.android_facts())
    elif platform == "macos":
        out.update(macos.macos_facts())
    return out
