"""tegrastats logs, one row per line, across boards and releases (TX1/TX2 L4T 28, JetPack 4-6).

The format is a run of ``NAME value`` pairs and ``sensor@TEMPC`` words whose set and spelling change
with board, release and privileges (EMC_FREQ only under sudo; rails with or without ``mW``; ``cpu``
in old releases, ``CPU`` later; ``CPU`` is also an AGX Xavier rail and a sensor). So the line is
read word by word, each word recognised by its shape, and words nobody knows are skipped.
"""

from __future__ import annotations

import re

from ._common import numbered_lines
from .base import ParseError, register_parser

OFFLINE_C = -256.0  # tegrastats prints this for a sensor that is powered off

# a line's readings: the time (str), counts, clocks and loads (int), temperatures and sizes (float), per core or
# per GPC (lists, None for a core that is off); None: not printed
TegraValue = str | int | float | list[int | None] | list[int] | None
TegraRow = dict[str, TegraValue]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_DATE = re.compile(r"^(\d\d)-(\d\d)-(\d{4})$")
_TIME = re.compile(r"^\d\d:\d\d:\d\d$")
_USED_TOTAL = re.compile(r"^(\d+)/(\d+)(MB|kB)")
_LFB = re.compile(r"^(\d+)x(\d+)(MB|kB)\)?$")
_CACHED = re.compile(r"^(\d+)MB\)?$")
# "0%", "15%@204", "0%@[305]", "12%@[1300,1300]", "@[1000,1000,1000]" (no load on Thor)
_LOAD_FREQ = re.compile(r"^(?:(\d+)%)?(?:@(?:\[([\d,]+)\]|(\d+)))?$")
# "4556mW/4556mW", "463/463", "5139mW/5139mW/5139mW" (JetPack 7: cur/avg/max)
_RAIL = re.compile(r"^(\d+)(?:mW)?/(\d+)(?:mW)?(?:/(\d+)(?:mW)?)?$")
# "cpu@47.687C", "CV0@-256C", "cpu@52.968C/52.968C" (JetPack 7 adds a second reading)
_TEMP = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)@(-?\d+(?:\.\d+)?)C(?:/.*)?$")
_CPU_LIST = re.compile(r"^\[(.*)\](?:@(\d+))?$")
_PCT = re.compile(r"^(\d+)%$")


def _engine(name: str) -> str:
    """Column stem for an engine: GR3D_FREQ/GR3D -> gpu, EMC_FREQ/EMC -> emc, VIC_FREQ -> vic."""
    stem = name.upper().removesuffix("_FREQ")
    return "gpu" if stem == "GR3D" else stem.lower()


def _load_freq(value: str) -> tuple[int | None, list[int] | None] | None:
    match = _LOAD_FREQ.match(value)
    if not match or value in ("", "@"):
        return None
    load, freq_list, freq = match.groups()
    freqs = [int(f) for f in freq_list.split(",") if f] if freq_list else [int(freq)] if freq else None
    return (int(load) if load else None), freqs


def _cpus(value: str) -> tuple[list[int | None], list[int | None]] | None:
    """``[0%@729,off,5%@1497]`` or the old ``[17%,13%,29%,5%]@408`` (one clock for all cores)."""
    match = _CPU_LIST.match(value)
    if not match:
        return None
    shared = int(match.group(2)) if match.group(2) else None
    loads: list[int | None] = []
    freqs: list[int | None] = []
    for core in match.group(1).split(","):
        parsed = _load_freq(core.strip())
        if parsed is None:  # "off" (powered-down core) or anything unreadable
            loads.append(None)
            freqs.append(None)
            continue
        load, core_freqs = parsed
        loads.append(load)
        freqs.append(core_freqs[0] if core_freqs else shared)
    return loads, freqs


class _Line:
    """Reads one line's words into a row."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.row: TegraRow = {
            "timestamp": None, "ram_used_mb": None, "ram_total_mb": None, "swap_used_mb": None,
            "swap_total_mb": None, "cpu_load_pct": None, "cpu_freq_mhz": None, "emc_load_pct": None,
            "emc_freq_mhz": None, "gpu_load_pct": None, "gpu_freq_mhz": None, "gpu_freq_mhz_list": None,
        }
        self.recognised = 0

    def put(self, key: str, value: TegraValue) -> None:
        self.row[key] = value

    def stem(self, prefix: str, name: str, first_suffix: str) -> str:
        """``power_vdd_in``; a name printed twice (AGX Orin prints two unconnected ``NC`` rails)
        keeps both readings: ``power_nc``, ``power_nc_2``."""
        base = stem = f"{prefix}_{name.lower()}"
        n = 1
        while f"{stem}{first_suffix}" in self.row:
            n += 1
            stem = f"{base}_{n}"
        return stem

    def word(self, i: int) -> str:
        return self.words[i] if i < len(self.words) else ""

    def read(self) -> TegraRow:
        i = 0
        if (date := _DATE.match(self.word(0))) and _TIME.match(self.word(1)):
            month, day, year = date.groups()
            self.row["timestamp"] = f"{year}-{month}-{day}T{self.word(1)}"
            i = 2
        while i < len(self.words):
            i = self.step(i)
        return self.row

    def step(self, i: int) -> int:
        """Read the pair (or single word) at i; return the index of the next unread word."""
        name, value = self.words[i], self.word(i + 1)
        temp = _TEMP.match(name)
        if temp:
            celsius = float(temp.group(2))
            self.put(self.stem("temp", temp.group(1), "_c") + "_c", None if celsius == OFFLINE_C else celsius)
            self.recognised += 1
            return i + 1
        if not _NAME.match(name):
            return i + 1  # an unknown word: skip it
        upper = name.upper()
        if upper in ("RAM", "SWAP", "IRAM"):
            return self.memory(upper, i)
        if upper == "CPU" and value.startswith("["):
            cpus = _cpus(value)
            if cpus:
                self.row["cpu_load_pct"], self.row["cpu_freq_mhz"] = cpus
                self.recognised += 1
            return i + 2
        if upper == "MTS":  # "MTS fg 0% bg 0%": Denver MTS foreground/background load
            return self.mts(i + 1)
        if upper == "EDP" and value == "limit" and self.word(i + 2).isdigit():  # TX1: "EDP limit 1912"
            self.put("edp_limit_mhz", int(self.word(i + 2)))
            return i + 3
        rail = _RAIL.match(value)
        if rail:
            stem = self.stem("power", name, "_mw")
            self.put(f"{stem}_mw", int(rail.group(1)))
            self.put(f"{stem}_avg_mw", int(rail.group(2)))
            if rail.group(3):
                self.put(f"{stem}_max_mw", int(rail.group(3)))
            self.recognised += 1
            return i + 2
        return self.engine(name, value, i)

    def engine(self, name: str, value: str, i: int) -> int:
        stem = _engine(name)
        if value == "off":
            self.put(f"{stem}_freq_mhz", None)
            return i + 2
        if value.isdigit():  # "APE 200", "VIC_FREQ 729", "NVENC 716": clock in MHz
            self.put(f"{stem}_freq_mhz", int(value))
            return i + 2
        parsed = _load_freq(value) if ("%" in value or "@" in value) else None
        if parsed is None:
            return i + 1
        load, freqs = parsed
        self.put(f"{stem}_load_pct", load)
        self.put(f"{stem}_freq_mhz", max(freqs) if freqs else None)
        if stem == "gpu":
            # GR3D_FREQ N%@[a,b] has one clock per GPC; the max is the headline, the list is kept.
            self.row["gpu_freq_mhz_list"] = freqs
        self.recognised += 1
        return i + 2

    def memory(self, kind: str, i: int) -> int:
        match = _USED_TOTAL.match(self.word(i + 1))
        if not match:
            return i + 1
        used, total, unit = int(match.group(1)), int(match.group(2)), match.group(3).lower()
        stem = kind.lower()
        self.put(f"{stem}_used_{unit}", used)
        self.put(f"{stem}_total_{unit}", total)
        self.recognised += 1
        i += 2
        # "(lfb 157x4MB)" after RAM, "(cached 3MB)" after SWAP, "0/252kB(lfb 252kB)" for IRAM.
        if self.word(i) == "(lfb" and (lfb := _LFB.match(self.word(i + 1))):
            count, size, size_unit = lfb.groups()
            self.put(f"{stem}_lfb_blocks", int(count))
            self.put(f"{stem}_lfb_block_mb", int(size) / (1024 if size_unit == "kB" else 1))
            i += 2
        elif self.word(i) == "(cached" and (cached := _CACHED.match(self.word(i + 1))):
            self.put(f"{stem}_cached_mb", int(cached.group(1)))
            i += 2
        return i

    def mts(self, i: int) -> int:
        while self.word(i) in ("fg", "bg") and (pct := _PCT.match(self.word(i + 1))):
            self.put(f"mts_{self.word(i)}_pct", int(pct.group(1)))
            i += 2
        return i


@register_parser("tegrastats")
def parse_tegrastats(data: bytes) -> list[TegraRow]:
    """One row per tegrastats line; lists per CPU core; a line with nothing tegrastats-like fails."""
    rows = []
    for number, line in numbered_lines(data):
        if line.lstrip().startswith("#"):
            continue
        reader = _Line(line.split())
        row = reader.read()
        if reader.recognised == 0:
            raise ParseError(f"not a tegrastats line: {line[:60]!r}", line=number)
        rows.append(row)
    return rows
