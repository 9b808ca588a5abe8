"""Android ``getprop``: ``[key]: [value]`` lines (values may span lines) -> one row {key: value}."""

from __future__ import annotations

import re

from ._common import text_of
from .base import ParseError, register_parser

_PROP = re.compile(r"^\[([^\]]*)\]: \[(.*?)\]$", re.S | re.M)


@register_parser("getprop")
def parse_getprop(data: bytes) -> list[dict[str, str]]:
    """One row: every property, its value as printed (a string)."""
    props = {key: value for key, value in _PROP.findall(text_of(data)) if key}
    if not props:
        raise ParseError("no '[key]: [value]' lines (expected getprop output)")
    return [props]
