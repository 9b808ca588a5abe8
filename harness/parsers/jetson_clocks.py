"""``jetson_clocks --show``: the clocks in effect (CPU per core, GPU, EMC) and the power mode.

::

    SOC family:tegra234  Machine:NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super
    cpu0:  Governor=schedutil MinFreq=729600 MaxFreq=1344000 CurrentFreq=960000 IdleStates: WFI=1 c7=1
    GPU MinFreq=306000000 MaxFreq=918000000 CurrentFreq=306000000
    EMC MinFreq=204000000 MaxFreq=3199000000 CurrentFreq=665600000 FreqOverride=0
    NV Power Mode: 25W

CPU values are kHz, GPU/EMC Hz (as the tool prints them). Old releases spell ``Gonvernor``, JetPack 6
drops ``Online=``, JetPack 7 adds ``Active GPU TPCs``; unknown lines (DLA, PVA, FAN) are skipped.
"""

from __future__ import annotations

import re
from typing import TypedDict

from ._common import numbered_lines
from .base import ParseError, register_parser

_HEAD = re.compile(r"^SOC family:\s*(\S+)\s+Machine:\s*(.+?)\s*$")
_CPU = re.compile(r"^cpu(\d+):\s*(.*)$")
_KV = re.compile(r"(\w+)=(\S*)")
_CLOCK = re.compile(r"^(GPU|EMC)\s+MinFreq=")
_MODE = re.compile(r"^NV Power Mode:\s*(.+?)\s*$")
_TPCS = re.compile(r"^Active GPU TPCs:\s*(\d+)")


class JetsonCpu(TypedDict):
    cpu: int
    online: bool | None  # None: the release prints no Online= (JetPack 6)
    governor: str | None
    min_khz: int | None
    max_khz: int | None
    cur_khz: int | None


class JetsonClocksRow(TypedDict):
    soc_family: str | None
    machine: str | None
    cpus: list[JetsonCpu]
    cpu_max_khz: int | None
    gpu_min_hz: int | None
    gpu_max_hz: int | None
    gpu_cur_hz: int | None
    gpu_active_tpcs: int | None
    emc_min_hz: int | None
    emc_max_hz: int | None
    emc_cur_hz: int | None
    emc_freq_override: bool | None
    power_mode: str | None


def _num(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


@register_parser("jetson-clocks")
def parse_jetson_clocks(data: bytes) -> list[JetsonClocksRow]:
    """One row: soc_family, machine, cpus (list per core), cpu_max_khz, gpu_*_hz, emc_*_hz, power_mode."""
    row: JetsonClocksRow = {"soc_family": None, "machine": None, "cpus": [], "cpu_max_khz": None,
                            "gpu_min_hz": None, "gpu_max_hz": None, "gpu_cur_hz": None, "gpu_active_tpcs": None,
                            "emc_min_hz": None, "emc_max_hz": None, "emc_cur_hz": None, "emc_freq_override": None,
                            "power_mode": None}
    recognised = False
    for number, line in numbered_lines(data):
        line = line.strip()
        if head := _HEAD.match(line):
            row["soc_family"], row["machine"] = head.groups()
            recognised = True
        elif cpu := _CPU.match(line):
            values = dict(_KV.findall(cpu.group(2)))
            if "MaxFreq" not in values:
                raise ParseError(f"cpu line without MaxFreq: {line!r}", line=number)
            online = values.get("Online")
            row["cpus"].append({"cpu": int(cpu.group(1)), "online": None if online is None else online == "1",
                                "governor": values.get("Governor") or values.get("Gonvernor"),
                                "min_khz": _num(values.get("MinFreq")), "max_khz": _num(values.get("MaxFreq")),
                                "cur_khz": _num(values.get("CurrentFreq"))})
            recognised = True
        elif clock := _CLOCK.match(line):
            values = dict(_KV.findall(line))
            low, high, current = (_num(values.get(key)) for key in ("MinFreq", "MaxFreq", "CurrentFreq"))
            if clock.group(1) == "GPU":
                row["gpu_min_hz"], row["gpu_max_hz"], row["gpu_cur_hz"] = low, high, current
            else:
                row["emc_min_hz"], row["emc_max_hz"], row["emc_cur_hz"] = low, high, current
                if "FreqOverride" in values:
                    row["emc_freq_override"] = values["FreqOverride"] == "1"
            recognised = True
        elif mode := _MODE.match(line):
            row["power_mode"] = mode.group(1)
        elif tpcs := _TPCS.match(line):
            row["gpu_active_tpcs"] = int(tpcs.group(1))
    if not recognised:
        raise ParseError("no 'SOC family', cpuN, GPU or EMC line (expected jetson_clocks --show output)")
    row["cpus"].sort(key=lambda c: c["cpu"])
    online = [c["max_khz"] for c in row["cpus"] if c["online"] is not False and c["max_khz"] is not None]
    row["cpu_max_khz"] = max(online) if online else None
    return [row]
