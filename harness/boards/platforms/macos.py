"""Apple Silicon / Intel Macs: sysctl, sw_vers and ``diskutil info /``.

macOS has no per-file page-cache drop that the harness can verify the way mincore does on Linux;
``purge`` (sudo) drops the whole cache. When it is not allowed the run record must say the cache
was NOT cleared (the InferSSD Mac numbers were measured that way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.boards.platforms.base import ExpectationResult, Platform, register_platform
from harness.boards.platforms.checks import check_platform
from harness.parsers import ParseError, parse
from harness.units import format_size, parse_size


@register_platform
class MacPlatform(Platform):
    name = "macos"
    expectations = {
        "mem_total_min": "hw.memsize is at least this size (e.g. 48G)",
        "macos_version_min": "sw_vers ProductVersion at least this (e.g. 14.5)",
        "performance_cores_min": "hw.perflevel0.physicalcpu at least this",
        "solid_state": "the boot disk is (true) or is not (false) solid state, per diskutil",
        "cache_drop": "purge: the page cache can be dropped with sudo purge (cold runs need it)",
    }

    def probe(self, session: Any, files: list[str], tools: Sequence[str] = ()) -> dict[str, Any]:
        return enrich(super().probe(session, files, tools))

    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        results = check_platform(self.name, facts) if expect else []
        for name, expected in expect.items():
            if name == "mem_total_min":
                seen = facts.get("mem_total_bytes") or 0
                results.append(ExpectationResult(name, expected, format_size(seen), seen >= parse_size(expected),
                                                 f"hw.memsize {format_size(seen)}, need >= {expected}"))
            elif name == "macos_version_min":
                seen = facts.get("macos_version")
                ok = seen is not None and _version(seen) >= _version(str(expected))
                results.append(ExpectationResult(name, expected, seen, ok, f"macOS {seen}, need >= {expected}"))
            elif name == "performance_cores_min":
                seen = facts.get("performance_cores") or 0
                results.append(ExpectationResult(name, expected, seen, seen >= int(expected),
                                                 f"{seen} performance cores, need >= {expected}"))
            elif name == "solid_state":
                seen = facts.get("disk_solid_state")
                results.append(ExpectationResult(name, expected, seen, seen is bool(expected),
                                                 f"diskutil says Solid State: {seen}"))
            elif name == "cache_drop":
                seen = facts.get("cache_drop")
                results.append(ExpectationResult(name, expected, seen, seen == "purge",
                                                 "sudo -n purge is allowed" if seen == "purge" else
                                                 f"the page cache cannot be dropped ({facts.get('cache_drop_error')}); "
                                                 "cold runs would NOT be cold"))
            else:
                results.append(ExpectationResult(name, expected, None, False, f"unknown expectation {name!r} for "
                                                  f"platform macos (known: {', '.join(self.expectations)})"))
        return results


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _parsed(facts: dict[str, Any], kind: str, key: str) -> dict[str, Any]:
    if not facts.get(key):
        return {}
    try:
        return parse(kind, facts[key].encode())[0]
    except ParseError as exc:
        facts[key.replace("_raw", "_error")] = f"{kind}: {exc}"
        return {}


def enrich(facts: dict[str, Any]) -> dict[str, Any]:
    facts = dict(facts)
    sysctl = _parsed(facts, "sysctl", "sysctl_raw")
    vers = _parsed(facts, "sw_vers", "sw_vers_raw")
    disk = _parsed(facts, "diskutil", "diskutil_raw")
    facts["model"] = sysctl.get("hw.model")
    facts["cpu_model"] = sysctl.get("machdep.cpu.brand_string") or facts.get("cpu_model")
    facts["mem_total_bytes"] = sysctl.get("hw.memsize") or facts.get("mem_total_bytes")
    facts["page_size_bytes"] = sysctl.get("hw.pagesize")
    facts["performance_cores"] = sysctl.get("hw.perflevel0.physicalcpu")
    facts["efficiency_cores"] = sysctl.get("hw.perflevel1.physicalcpu")
    facts["macos_version"] = vers.get("product_version")
    facts["macos_build"] = vers.get("build_version")
    facts["disk_device"] = disk.get("device_identifier")
    facts["disk_media_name"] = disk.get("device_media_name")
    facts["disk_protocol"] = disk.get("protocol")
    facts["disk_solid_state"] = disk.get("solid_state")
    facts["disk_size_bytes"] = disk.get("disk_size_bytes")
    return facts
