"""``nvpmodel -q`` (optionally ``--verbose``): the active power mode's name and id.

``-q`` on every JetPack (TX2 ... Thor)::

    NV Fan Mode:cool                    <- Xavier-era releases also print the fan mode
    NV Power Mode: MAXN_SUPER
    2
    NVPM ERROR: Error opening ...: 13   <- NVPM WARN/ERROR lines come before or after (13: not root)

``-q --verbose`` moves the mode line into a ``NVPM VERB:`` message, then dumps every setting::

    NVPM VERB: Config file: /etc/nvpmodel.conf
    NVPM VERB: Current mode: NV Power Mode: 40W
    4
    NVPM VERB: PARAM GPU: ARG MAX_FREQ: PATH /sys/.../max_freq: REAL_VAL: 1173000000 CONF_VAL: 1173000000

JetPack 3 (TX2, nvpmodel 1.x) printed ``NVPM VERB: PM_CONFIG: DEFAULT=MAXP_CORE_ARM(3)`` and ``ACTIVE=MAXN(0)``
instead of PARAM lines. The name alone is not enough: the same name maps to different ids on different boards,
and on an Orin Nano the name can say MAXN_SUPER while the clock tables are not Super (docs/methodology.md
section 1) -- the PARAM lines' REAL_VAL (what sysfs holds now) is kept for that check.
"""

from __future__ import annotations

import re
from typing import TypedDict

from ._common import numbered_lines
from .base import ParseError, register_parser

_MODE = re.compile(r"^NV Power Mode\s*:\s*(.+?)\s*$")
_FAN = re.compile(r"^NV Fan Mode\s*:\s*(.+?)\s*$")
_NVPM = re.compile(r"^NVPM\s+([A-Z]+)\s*:\s?(.*)$")
_DEFAULT = re.compile(r"^PM_CONFIG:\s*DEFAULT=(.+)\((\d+)\)$")
_PARAM = re.compile(r"^PARAM (\S+): ARG (\S+): PATH (\S+): REAL_VAL: (\S*) CONF_VAL: (\S*)$")


class NvpmParam(TypedDict):
    """One ``PARAM`` line of ``--verbose``, its words as printed (real: what sysfs holds now)."""

    param: str
    arg: str
    path: str
    real: str
    conf: str


class NvpmodelRow(TypedDict):
    mode_name: str | None
    mode_id: int | None
    fan_mode: str | None
    default_mode_name: str | None
    default_mode_id: int | None
    messages: list[str]
    params: list[NvpmParam]


@register_parser("nvpmodel")
def parse_nvpmodel(data: bytes) -> list[NvpmodelRow]:
    """One row: mode_name, mode_id, fan_mode, default mode (JetPack 3 verbose only), the NVPM WARN/ERROR messages
    and, from ``--verbose``, ``params`` ({param, arg, path, real, conf} as printed)."""
    row: NvpmodelRow = {"mode_name": None, "mode_id": None, "fan_mode": None,
                        "default_mode_name": None, "default_mode_id": None, "messages": [], "params": []}
    mode_line = None
    for number, line in numbered_lines(data):
        line = line.strip()
        text = line
        if nvpm := _NVPM.match(line):
            level, text = nvpm.group(1), nvpm.group(2).strip()
            if level != "VERB":  # WARN/ERROR ("fan mode is not set!", "Error opening ...: 13") are kept
                row["messages"].append(line)
                continue
            if not text.startswith("Current mode:"):
                _verbose(row, text)
                continue
            text = text[len("Current mode:"):].strip()  # "NVPM VERB: Current mode: NV Power Mode: MAXN"
        if mode := _MODE.match(text):
            if mode_line is not None:
                raise ParseError(f"a second power mode line {line!r}", line=number)
            row["mode_name"], mode_line = mode.group(1), number
        elif fan := _FAN.match(text):
            row["fan_mode"] = fan.group(1)
        elif mode_line is not None and row["mode_id"] is None:
            if not text.isdigit():
                raise ParseError(f"expected the power mode id after 'NV Power Mode', got {line!r}", line=number)
            row["mode_id"] = int(text)
        else:
            raise ParseError(f"not a line of nvpmodel -q output: {line[:80]!r}", line=number)
    if mode_line is None:
        raise ParseError("no 'NV Power Mode:' line (expected nvpmodel -q output)")
    if row["mode_id"] is None:
        raise ParseError("no power mode id after 'NV Power Mode:'", line=mode_line)
    return [row]


def _verbose(row: NvpmodelRow, text: str) -> None:
    """What a ``NVPM VERB:`` line adds: the default mode (JetPack 3) or one PARAM setting; the rest is a dump of
    file names and values that says nothing about the mode."""
    if default := _DEFAULT.match(text):
        row["default_mode_name"], row["default_mode_id"] = default.group(1), int(default.group(2))
    elif param := _PARAM.match(text):
        name, arg, path, real, conf = param.groups()
        row["params"].append({"param": name, "arg": arg, "path": path, "real": real, "conf": conf})
