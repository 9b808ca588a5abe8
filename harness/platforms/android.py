"""Android phones, through Termux's sshd (port 8022) or adb: properties, memory, storage, heat, battery.

Facts come from ``getprop`` (model, release, SoC) and the Linux files the runner reads anyway. The
page cache is dropped per file with fadvise (no root needed for files the user can open). Memory
reclaim during decode (pgscan/pgsteal, refaults, PSI) is what the vmstat and psi collectors record.
"""

from __future__ import annotations

from typing import Any

from harness.parsers import ParseError, parse
from harness.platforms import ExpectationResult, register_platform
from harness.platforms import checks as C
from harness.platforms.linux import LinuxPlatform


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

    def probe(self, session: Any, files: list[str], tools: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        return enrich(super().probe(session, files, tools))

    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        results: list[ExpectationResult] = []
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
