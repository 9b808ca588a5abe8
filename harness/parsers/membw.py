"""``runner/native/membw`` (CUDA): one JSON line with read/write/copy GB/s of GPU memory."""

from __future__ import annotations

import json
from typing import Any

from ._common import numbered_lines
from .base import ParseError, register_parser


@register_parser("membw")
def parse_membw(data: bytes) -> list[dict[str, Any]]:
    rows = []
    for number, line in numbered_lines(data):
        try:
            row = json.loads(line)
        except ValueError:
            raise ParseError(f"expected membw's JSON line, got {line[:80]!r}", line=number) from None
        if not isinstance(row, dict) or row.get("tool") != "membw" or "read_gbps" not in row:
            raise ParseError("a JSON line without tool=membw and read_gbps", line=number)
        rows.append(row)
    if not rows:
        raise ParseError("no membw output (did it fail? it prints why on stderr)")
    return rows
