"""Android phones, through Termux's sshd (port 8022) or adb: properties, memory, storage, heat, battery.

Facts come from ``getprop`` (model, release, SoC) and the Linux files the runner reads anyway. The
page cache is dropped per file with fadvise (no root needed for files the user can open). Memory
reclaim during decode (pgscan/pgsteal, refaults, PSI) is what the vmstat and psi collectors record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.boards.platforms import checks as C
from harness.boards.platforms.base import ExpectationResult, register_platform
from harness.boards.platforms.linux import LinuxPlatform
from harness.errors import TargetError
from harness.parsers import ParseError, parse


@register_platform
class AndroidPlatform(LinuxPlatform):
    name = "android"
    expectations = {
        **LinuxPlatform.expectations,
        "android_release_min": "Android release at least this (ro.build.version.release, e.g. 14)",
        "model": "ro.product.model equals this",
        "cpu_max_khz": "the CPU clock cap (scaling_max_freq, any cluster) is at least this",
        **C.GATES,
    }

    def probe(self, session: Any, files: list[str], tools: Sequence[str] = ()) -> dict[str, Any]:
        try:
            facts = super().probe(session, files, tools)
        except TargetError:
            # a phone reached by adb without Termux has no Python for the runner: read the basics
            # with the phone's own shell instead, and say so
            if getattr(session.transport, "name", "") != "adb":
                raise
            facts = shell_facts(session)
        return enrich(facts)

    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        results: list[ExpectationResult] = C.check_platform(self.name, facts) if expect else []
        rest: dict[str, Any] = {}
        for name, expected in expect.items():
            if name == "android_release_min":
                seen = facts.get("android_release")
                ok = seen is not None and _version(seen) >= _version(str(expected))
                results.append(ExpectationResult(name, expected, seen, ok, f"Android {seen}, need >= {expected}"))
            elif name == "model":
                seen = facts.get("model")
                results.append(ExpectationResult(name, expected, seen, seen == str(expected),
                                                 f"ro.product.model is {seen!r}, expected {expected!r}"))
            elif name == "cpu_max_khz":
                results.append(C.check_cpu_max(expected, facts))
            elif name not in C.GATES:
                rest[name] = expected
        return results + super().check(rest, facts, session)


_SHELL_PROBE = (
    "echo @@getprop; getprop; echo @@meminfo; cat /proc/meminfo; echo @@kernel; uname -r; "
    "echo @@block; ls /sys/block; echo @@thermal; for z in /sys/class/thermal/thermal_zone*; do "
    "echo \"$(cat $z/type 2>/dev/null) $(cat $z/temp 2>/dev/null)\"; done; echo @@power; "
    "for p in /sys/class/power_supply/*; do echo \"${p##*/} $(cat $p/current_now 2>/dev/null) "
    "$(cat $p/voltage_now 2>/dev/null)\"; done"
)


def shell_facts(session: Any) -> dict[str, Any]:
    """Facts from ``sh`` alone (getprop, /proc, /sys), for a phone without Python."""
    done = session.transport.run(["sh", "-c", _SHELL_PROBE], timeout=60).check()
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith("@@"):
            current = sections.setdefault(line[2:], [])
        else:
            current.append(line)
    mem = {k.strip(): v.split() for k, _, v in (line.partition(":") for line in sections.get("meminfo", []))}
    thermal = {}
    for line in sections.get("thermal", []):
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            thermal[parts[0]] = int(parts[1]) / 1000.0
    power = {}
    for line in sections.get("power", []):
        parts = line.split()
        if len(parts) == 3 and parts[1].lstrip("-").isdigit():
            power[parts[0]] = {"current_now": int(parts[1]), "voltage_now": int(parts[2])}
    total = mem.get("MemTotal")
    return {"platform_detected": "android", "probe_method": "adb-shell (no Python on the phone)",
            "getprop_raw": "\n".join(sections.get("getprop", [])),
            "mem_total_bytes": int(total[0]) * 1024 if total else None,
            "kernel": next(iter(sections.get("kernel", [])), None),
            "block_devices": [b for b in sections.get("block", []) if b.startswith(("sd", "mmcblk", "nvme"))],
            "thermal_c": thermal, "power_supply": power}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def enrich(facts: dict[str, Any]) -> dict[str, Any]:
    facts = dict(facts)
    props: dict[str, str] = {}
    if facts.get("getprop_raw"):
        try:
            props = parse("getprop", facts["getprop_raw"].encode())[0]
        except ParseError as exc:
            facts["getprop_error"] = f"getprop: {exc}"
    facts["model"] = props.get("ro.product.model")
    facts["manufacturer"] = props.get("ro.product.manufacturer")
    facts["android_release"] = props.get("ro.build.version.release")
    facts["android_sdk"] = props.get("ro.build.version.sdk")
    # newer phones name the SoC (ro.soc.model, Android 12+); older ones only the board platform
    facts["soc"] = props.get("ro.soc.model") or props.get("ro.board.platform") or props.get("ro.hardware")
    facts["soc_manufacturer"] = props.get("ro.soc.manufacturer")
    facts["cpu_max_khz"] = C.cpu_max_khz(facts)
    return facts
