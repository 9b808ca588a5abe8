"""``nvpmodel -q`` (optionally ``--verbose``): the active power mode's name and id.

::

    NVPM WARN: fan mode is not set!     <- NVPM WARN/ERROR/VERB lines may come before or after
    NV Fan Mode:cool                    <- some releases (AGX Xavier) also print the fan mode
    NV Power Mode: MAXN_SUPER
    2

The name alone is not enough: the same name maps to different ids on different boards, and on an
Orin Nano the name can say MAXN_SUPER while the clock tables are not Super (docs/methodology.md section 1).
"""

from __future__ import annotations

import re
from typing import Any

from ._common import numbered_lines
from .base import ParseError, register_parser

_MODE = re.compile(r"^NV Power Mode\s*:\s*(.+?)\s*$")
_FAN = re.compile(r"^NV Fan Mode\s*:\s*(.+?)\s*$")
_DEFAULT = re.compile(r"PM_CONFIG: DEFAULT=(.+)\((\d+)\)")


@register_parser("nvpmodel")
def parse_nvpmodel(data: bytes) -> list[dict[str, Any]]:
    """One row: mode_name, mode_id, fan_mode, default mode (verbose only) and NVPM messages."""
    row: dict[str, Any] = {"mode_name": None, "mode_id": None, "fan_mode": None,
                           "default_mode_name": None, "default_mode_id": None, "messages": []}
    mode_line = None
    for number, line in numbered_lines(data):
        line = line.strip()
        if line.startswith("NVPM"):
            default = _DEFAULT.search(line)
            if default:
                row["default_mode_name"], row["default_mode_id"] = default.group(1), int(default.group(2))
            elif not line.startswith("NVPM VERB"):  # keep WARN/ERROR: "fan mode is not set!"
                row["messages"].append(line)
            continue
        mode, fan = _MODE.match(line), _FAN.match(line)
        if mode:
            row["mode_name"], mode_line = mode.group(1), number
        elif fan:
            row["fan_mode"] = fan.group(1)
        elif mode_line is not None and row["mode_id"] is None:
            if not line.isdigit():
                raise ParseError(f"expected the power mode id after 'NV Power Mode', got {line!r}",
                                 line=number)
            row["mode_id"] = int(line)
    if mode_line is None:
        raise ParseError("no 'NV Power Mode:' line (expected nvpmodel -q output)")
    if row["mode_id"] is None:
        raise ParseError("no power mode id after 'NV Power Mode:'", line=mode_line)
    return [row]
