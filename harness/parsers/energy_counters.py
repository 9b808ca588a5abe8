"""Energy sensors in sysfs, as the runner snapshots them (``runner/collectors/snapshots.py``):

- ``rapl``: ``<zone> <name> <energy_uj> <max_energy_range_uj>`` per powercap zone (``intel-rapl:0 package-0 ...``,
  subzones ``intel-rapl:0:0 core ...``): columns ``rapl_<zone id>_energy_uj``, ``_max_uj`` and ``_name`` (id
  ``0``, ``0_0``). The counter is cumulative and wraps at its range: harness/analysis/energy.py unwraps it.
- ``hwmon``: ``<hwmonN> <chip name> <powerK> <uW> <label|->`` per ``power*_input``: ``power_<chip>_<label or
  powerK>_mw``.
"""

from __future__ import annotations

import re

from .base import ParseError, register_parser
from .snapshots import snapshots

# a row: counters and readings (int, float), the zones' names (str)
EnergyRow = dict[str, int | float | str | None]
_ZONE = re.compile(r"^intel-rapl:(\d+(?::\d+)*)$")


def _stem(word: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", word.lower()).strip("_")


@register_parser("rapl")
def parse_rapl(data: bytes) -> list[EnergyRow]:
    """One row per snapshot: every zone's cumulative ``energy_uj``, its wrap range and its name."""
    rows: list[EnergyRow] = []
    for t_ns, wall, lines in snapshots(data):
        row: EnergyRow = {"t_ns": t_ns, "wall_s": wall}
        for number, line in lines:
            parts = line.split()
            zone = _ZONE.match(parts[0]) if len(parts) == 4 else None
            if not zone or not parts[2].isdigit():
                raise ParseError(f"expected 'intel-rapl:<id> <name> <energy_uj> <max_energy_range_uj>', got "
                                 f"{line!r}", line=number)
            stem = "rapl_" + zone.group(1).replace(":", "_")
            row[f"{stem}_name"] = parts[1]
            row[f"{stem}_energy_uj"] = int(parts[2])
            row[f"{stem}_max_uj"] = int(parts[3]) if parts[3].isdigit() else None
        rows.append(row)
    return rows


@register_parser("hwmon")
def parse_hwmon(data: bytes) -> list[EnergyRow]:
    """One row per snapshot: each ``power*_input`` channel in mW, named by chip and label."""
    rows: list[EnergyRow] = []
    for t_ns, wall, lines in snapshots(data):
        row: EnergyRow = {"t_ns": t_ns, "wall_s": wall}
        for number, line in lines:
            parts = line.split()
            if len(parts) != 5 or not re.match(r"^power\d+$", parts[2]) or not parts[3].lstrip("-").isdigit():
                raise ParseError(f"expected '<hwmonN> <chip> power<K> <microwatts> <label|->', got {line!r}",
                                 line=number)
            channel = parts[4] if parts[4] != "-" else parts[2]
            row[f"power_{_stem(parts[1])}_{_stem(channel)}_mw"] = int(parts[3]) / 1000
        rows.append(row)
    return rows
