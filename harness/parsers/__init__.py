"""Parsers: pure functions from a tool's captured bytes to tidy rows (one dict per observation).

Column names carry their unit (``_bytes``, ``_ns``, ``_ms``, ``_mhz``, ``_c``, ``_mw``, ``_pct``...);
values are JSON-serialisable. Bad input raises :class:`ParseError` saying what and where.
``harness parse KIND FILE`` reaches them through :data:`PARSERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._common import ParseError
from .blockstat import parse_blockstat
from .fio import parse_fio
from .getprop import parse_getprop
from .jetson_clocks import parse_jetson_clocks
from .jtop import parse_jtop
from .llama_bench import parse_llama_bench
from .llama_server import parse_llama_server
from .macos import parse_diskutil, parse_iostat, parse_powermetrics, parse_sw_vers, parse_sysctl, parse_vm_stat
from .membw import parse_membw
from .nvpmodel import parse_nvpmodel
from .sampler import parse_sampler_threads
from .snapshots import parse_power, parse_psi, parse_thermal, parse_vmstat
from .tegrastats import parse_tegrastats

Parser = Callable[[bytes], list[dict[str, Any]]]

PARSERS: dict[str, Parser] = {
    "fio": parse_fio,
    "blockstat": parse_blockstat,
    "sampler-threads": parse_sampler_threads,
    "tegrastats": parse_tegrastats,
    "nvpmodel": parse_nvpmodel,
    "jetson-clocks": parse_jetson_clocks,
    "llama-bench": parse_llama_bench,
    "llama-server": parse_llama_server,
    "vmstat": parse_vmstat,
    "psi": parse_psi,
    "thermal": parse_thermal,
    "power": parse_power,
    "jtop": parse_jtop,
    "getprop": parse_getprop,
    "iostat": parse_iostat,
    "vm_stat": parse_vm_stat,
    "powermetrics": parse_powermetrics,
    "sysctl": parse_sysctl,
    "sw_vers": parse_sw_vers,
    "diskutil": parse_diskutil,
    "membw": parse_membw,
}


def parse(kind: str, data: bytes) -> list[dict[str, Any]]:
    """Parse ``data`` as ``kind``; an unknown kind is a ParseError listing the known ones."""
    parser = PARSERS.get(kind)
    if parser is None:
        raise ParseError(f"unknown kind {kind!r} (known: {', '.join(sorted(PARSERS))})")
    return parser(data)


__all__ = ["PARSERS", "ParseError", "Parser", "parse"]
