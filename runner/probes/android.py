"""Android facts: system properties (raw getprop output), block devices (UFS, eMMC) and power supplies."""

import glob
import os

from runner import sysroot
from runner.probes.linux import power_supplies
from runner.util import run_tool

ANDROID_PROPS = ("ro.product.model", "ro.product.manufacturer", "ro.build.version.release", "ro.build.version.sdk",
                 "ro.soc.model", "ro.soc.manufacturer", "ro.board.platform", "ro.hardware")


def android_facts():
    out, err = run_tool(["getprop"])
    facts = {"getprop_raw": out, "getprop_error": err, "block_devices": []}
    for path in sorted(glob.glob(sysroot.path("/sys/block/*"))):
        name = os.path.basename(path)
        if name.startswith(("sd", "mmcblk", "nvme")):  # UFS shows as sdX, eMMC as mmcblkN
            facts["block_devices"].append(name)
    facts["power_supply"] = power_supplies()
    return facts
