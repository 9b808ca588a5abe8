"""jetson-stats (``jtop``): the runner writes one JSON line per sample, ``{"t_ns": ..., "stats": jetson.stats,
"memory": ..., "cpu_freq_khz": [...], "gpu_freq_khz": {...}, "power": jetson.power}`` (lines of older
runners hold ``stats`` only).

Columns follow the tegrastats parser where the signal is the same, so both land in one ``telemetry``
table: ``cpu_load_pct``, ``gpu_load_pct``, ``emc_load_pct``, ``temp_<sensor>_c`` (offline -256 as null),
``power_<rail>_mw`` from ``stats``; ``ram_used_mb, ram_total_mb, swap_used_mb, swap_total_mb`` (jtop's kB
/ 1024), ``cpu_freq_mhz`` (null for offline cores), ``gpu_freq_mhz``, ``emc_freq_mhz`` and
``power_<rail>_avg_mw`` from the structured parts, the total rail under its own name too (``VDD_IN``,
as tegrastats prints it). ``stats`` alone gives RAM and SWAP as used fractions (``ram_used_pct``).
"""

from __future__ import annotations

import json
import re

from ._common import Json, JsonObject, numbered_lines
from .base import ParseError, register_parser

_CPU = re.compile(r"^CPU(\d+)$")
# a sample's readings: jtop's values as it wrote them (JSON), loads, sizes and clocks as floats, lists per core
JtopRow = dict[str, Json]


def _pct(value: Json) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None  # "OFF" engines/cores -> null


def _mb(kb: Json) -> float | None:
    return kb / 1024 if isinstance(kb, (int, float)) else None


def _mhz(khz: Json) -> float | None:
    return khz / 1000 if isinstance(khz, (int, float)) else None


def _object(value: Json) -> JsonObject:
    """``value`` where it is an object, else {} (what ``value or {}`` read of a missing or empty part)."""
    return value if isinstance(value, dict) else {}


def _structured(record: JsonObject, row: JtopRow) -> None:
    memory = _object(record.get("memory"))
    for name, prefix in (("RAM", "ram"), ("SWAP", "swap")):
        part = _object(memory.get(name))
        row[f"{prefix}_used_mb"], row[f"{prefix}_total_mb"] = _mb(part.get("used")), _mb(part.get("tot"))
    row["emc_freq_mhz"] = _mhz(_object(memory.get("EMC")).get("cur"))
    freqs = record.get("cpu_freq_khz")
    row["cpu_freq_mhz"] = [_mhz(f) for f in freqs] if isinstance(freqs, list) and freqs else None
    gpus = list(_object(record.get("gpu_freq_khz")).values())
    row["gpu_freq_mhz"] = _mhz(gpus[0]) if gpus else None
    power = _object(record.get("power"))
    rails = dict(_object(power.get("rail")))
    total = _object(power.get("tot"))
    total_name = total.get("name")
    if total_name and isinstance(total_name, str):
        rails[total_name] = total
    for name, rail in rails.items():
        column = name.lower().replace(" ", "_")
        rail = _object(rail)
        row[f"power_{column}_mw"], row[f"power_{column}_avg_mw"] = _pct(rail.get("power")), _pct(rail.get("avg"))


@register_parser("jtop")
def parse_jtop(data: bytes) -> list[JtopRow]:
    rows = []
    for number, line in numbered_lines(data):
        try:
            record: Json = json.loads(line)
        except ValueError:
            record = None
        stats = record.get("stats") if isinstance(record, dict) else None
        if not isinstance(record, dict) or not isinstance(stats, dict):
            raise ParseError("expected a JSON line {\"t_ns\": ..., \"stats\": {...}} (the jtop collector's)",
                             line=number) from None
        row: JtopRow = {"t_ns": record.get("t_ns"), "timestamp": stats.get("time"),
                        "jetson_clocks": stats.get("jetson_clocks"), "nvp_model": stats.get("nvp model")}
        cpus = sorted((int(m.group(1)), value) for key, value in stats.items() if (m := _CPU.match(key)))
        row["cpu_load_pct"] = [_pct(value) for _i, value in cpus] or None
        for key, column in (("RAM", "ram_used_pct"), ("SWAP", "swap_used_pct")):
            fraction = _pct(stats.get(key))
            row[column] = None if fraction is None else fraction * 100
        row["gpu_load_pct"], row["emc_load_pct"] = _pct(stats.get("GPU")), _pct(stats.get("EMC"))
        for key, value in stats.items():
            name = key.split(" ", 1)[1].lower().replace(" ", "_") if " " in key else None
            if key.startswith("Temp "):
                temp = _pct(value)
                row[f"temp_{name}_c"] = None if temp is None or temp <= -256 else temp
            elif key.startswith("Power "):
                row[f"power_{name}_mw"] = _pct(value)
            elif key.startswith("Fan "):
                row[f"fan_{name}_pct"] = _pct(value)
        if "memory" in record:
            _structured(record, row)
        rows.append(row)
    if not rows:
        raise ParseError("no jtop samples")
    return rows
