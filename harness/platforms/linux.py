"""Any Linux machine: facts from /proc and /sys, generic expectations."""

from __future__ import annotations

from typing import Any

from harness.errors import TargetError
from harness.platforms import ExpectationResult, Platform, register_platform
from harness.units import format_size, parse_size


@register_platform
class LinuxPlatform(Platform):
    name = "linux"
    expectations = {
        "mem_total_min": "MemTotal is at least this size (e.g. 7G)",
        "cpu_count_min": "at least this many CPUs are online",
        "block_device": "the files live on this block device (e.g. nvme0n1)",
        "sysfs": "each path reads exactly this value, e.g. {/sys/block/vda/queue/scheduler: '[none] mq-deadline'}",
    }

    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        results = []
        for name, expected in expect.items():
            if name == "mem_total_min":
                seen = facts.get("mem_total_bytes") or 0
                ok = seen >= parse_size(expected)
                results.append(ExpectationResult(name, expected, format_size(seen), ok,
                                                 f"MemTotal {format_size(seen)}, need >= {expected}"))
            elif name == "cpu_count_min":
                seen = facts.get("cpu_count") or 0
                results.append(ExpectationResult(name, expected, seen, seen >= int(expected),
                                                 f"{seen} CPUs, need >= {expected}"))
            elif name == "block_device":
                seen = facts.get("block_device")
                results.append(ExpectationResult(name, expected, seen, seen == expected,
                                                 f"files are on {seen}, expected {expected}"))
            elif name == "sysfs":
                for path, value in dict(expected).items():
                    try:
                        got = session.transport.read_file(path).decode(errors="replace").strip()
                    except TargetError as exc:
                        got = f"unreadable ({exc})"
                    results.append(ExpectationResult(f"sysfs:{path}", value, got, got == str(value).strip(),
                                                     f"{path} reads {got!r}, expected {value!r}"))
            else:
                known = ", ".join(self.expectations)
                results.append(ExpectationResult(name, expected, None, False,
                                                 f"unknown expectation {name!r} for platform {self.name} "
                                                 f"(known: {known})"))
        return results
