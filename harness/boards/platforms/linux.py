"""Any Linux machine: facts from /proc and /sys, generic expectations.

The NVMe link check and the entry gates (junction/hottest thermal zone, MemAvailable) read only
/sys/class/nvme, /sys/class/thermal and /proc/meminfo, which any Linux board or PC has; Jetson and
Android inherit them.
"""

from __future__ import annotations

from typing import Any

from harness.boards.platforms import checks as C
from harness.boards.platforms.base import ExpectationResult, Platform, register_platform
from harness.errors import TargetError
from harness.units import format_size, parse_size


@register_platform
class LinuxPlatform(Platform):
    name = "linux"
    expectations = {
        "mem_total_min": "MemTotal is at least this size (e.g. 7G)",
        "cpu_count_min": "at least this many CPUs are online",
        "block_device": "the files live on this block device (e.g. nvme0n1)",
        "sysfs": "each path reads exactly this value, e.g. {/sys/block/vda/queue/scheduler: '[none] mq-deadline'}",
        "nvme_link": "NVMe PCIe link at least {gts: 8, width: 4} (optionally controller: nvme0)",
        **C.GATES,
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
            elif name == "nvme_link":
                results.append(C.check_nvme_link(expected, facts))
            elif name in C.GATES:
                continue  # waited for before each run (runstate), not a pass/fail check
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
