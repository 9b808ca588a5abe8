"""Byte sizes as people write them in lab notes: ``1G``, ``1.6G``, ``512M``, ``64k``, ``4096``.

Binary multiples throughout (``1G`` = 1 GiB), as fio and dd read them, so a ``1G`` data file here is
the same size as fio's ``size=1G``.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(value: str | int | float) -> int:
    """Return the number of bytes in ``value``; raise ValueError saying what was expected."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like 1G, 512M or 65536, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value!r}")
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size like 1G, 512M or 65536, got {value!r}")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


def format_size(n_bytes: float) -> str:
    """Short human form, binary multiples: 1073741824 -> '1.0 GiB'."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
