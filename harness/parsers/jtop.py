"""jetson-stats (``jtop``): the runner writes one JSON line per sample, ``{"t_ns": ..., "stats": jetson.stats}``.

Columns follow the tegrastats parser where the signal is the same (``cpu_load_pct``, ``gpu_load_pct``,
``emc_load_pct``, ``temp_<sensor>_c`` with offline -256 as null, ``power_<rail>_mw``), so both land in
one ``telemetry`` table. jtop reports RAM and SWAP as used fractions, not MB.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._common import ParseError, numbered_lines

_CPU = re.compile(r"^CPU(\d+)$")


def _pct(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None  # "OFF" engines/cores -> null


def parse_jtop(data: bytes) -> list[dict[str, Any]]:
    rows = []
    for number, line in numbered_lines(data):
        try:
            record = json.loads(line)
            stats = record["stats"]
        except (ValueError, KeyError, TypeError):
            raise ParseError("expected a JSON line {\"t_ns\": ..., \"stats\": {...}} (the jtop collector's)",
                             line=number) from None
        row: dict[str, Any] = {"t_ns": record.get("t_ns"), "timestamp": stats.get("time"),
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
        rows.append(row)
    if not rows:
        raise ParseError("no jtop samples")
    return rows
