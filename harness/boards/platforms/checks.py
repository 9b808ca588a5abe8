"""Expectation checks shared by the Linux-like platforms (Linux, Jetson, Android): clocks, GUI, NVMe link.

Each check reads the probed facts and returns one :class:`ExpectationResult` whose message says
what was seen, so a failure explains itself without a second probe.
"""

from __future__ import annotations

from typing import Any

from harness.boards.platforms.base import ExpectationResult

# Waited for before each run instead of failing (runstate.before_run), recorded per run.
GATES = {
    "tj_below_c": "gate: before each run wait until the junction (tj) temperature is below this many degrees C",
    "tj_wait_timeout_s": "gate: give up waiting for tj_below_c after this many seconds (default 600)",
    "mem_available_min": "gate: before each run wait until MemAvailable is at least this size (e.g. 6G)",
    "mem_wait_timeout_s": "gate: give up waiting for mem_available_min after this many seconds (default 600)",
}


def mhz(hz: int | None) -> str:
    return "unknown" if hz is None else f"{hz / 1e6:g} MHz"


def cpu_max_khz(facts: dict[str, Any]) -> int | None:
    """The CPU clock cap in effect: the highest scaling_max_freq of any cpufreq policy."""
    caps = [p.get("scaling_max_khz") for p in (facts.get("cpufreq") or {}).values()]
    caps = [c for c in caps if c]
    if caps:
        return max(caps)
    return (facts.get("jetson_clocks") or {}).get("cpu_max_khz")


def cpu_table_max_khz(facts: dict[str, Any]) -> int | None:
    tops = [max(p["available_khz"]) for p in (facts.get("cpufreq") or {}).values() if p.get("available_khz")]
    tops += [p["cpuinfo_max_khz"] for p in (facts.get("cpufreq") or {}).values() if p.get("cpuinfo_max_khz")]
    return max(tops) if tops else None


def check_cpu_max(expected: Any, facts: dict[str, Any]) -> ExpectationResult:
    seen = cpu_max_khz(facts)
    ok = seen is not None and seen >= int(expected)
    return ExpectationResult("cpu_max_khz", expected, seen, ok,
                             f"CPU clock cap (scaling_max_freq) is {seen} kHz, expected >= {expected} kHz"
                             + ("" if seen is not None else " (no cpufreq policy readable)"))


def check_gpu_max(expected: Any, facts: dict[str, Any]) -> ExpectationResult:
    """The GPU devfreq table must reach the clock AND the cap (max_freq) must allow it."""
    table, cap = facts.get("gpu_table_max_hz"), facts.get("gpu_max_freq_hz")
    expected = int(expected)
    ok = table is not None and table >= expected and (cap is None or cap >= expected)
    if table is None:
        why = f"no GPU devfreq table readable ({facts.get('gpu_devfreq_error') or 'unknown path'})"
    elif table < expected:
        why = f"the GPU devfreq table tops out at {mhz(table)}, expected {mhz(expected)}"
    elif cap is not None and cap < expected:
        why = f"the GPU table reaches {mhz(table)} but max_freq caps it at {mhz(cap)}, expected {mhz(expected)}"
    else:
        why = f"GPU table top {mhz(table)}, max_freq {mhz(cap)}"
    return ExpectationResult("gpu_max_hz", expected, table, ok, why + f" ({facts.get('gpu_devfreq_path')})")


def gui_running(facts: dict[str, Any]) -> bool:
    return facts.get("default_target") == "graphical.target" or bool(facts.get("display_managers"))


def check_gui(expected: Any, facts: dict[str, Any]) -> ExpectationResult:
    want_on = expected in (True, "on", "yes", "true")
    on = gui_running(facts)
    seen = "on" if on else "off"
    detail = f"default target {facts.get('default_target') or 'unknown'}, display processes: " \
             f"{', '.join(facts.get('display_managers') or []) or 'none'}"
    hint = "" if on == want_on or want_on else \
        " (sudo systemctl set-default multi-user.target && sudo systemctl isolate multi-user.target)"
    return ExpectationResult("gui", expected, seen, on == want_on, f"GUI is {seen}: {detail}{hint}")


def check_nvme_link(expected: Any, facts: dict[str, Any]) -> ExpectationResult:
    """``{gts: 8, width: 4}``, optionally ``controller: nvme0``; the first controller by default."""
    spec = dict(expected) if isinstance(expected, dict) else {}
    links = facts.get("nvme_links") or {}
    name = spec.get("controller") or (sorted(links)[0] if links else None)
    link = links.get(name) if name else None
    if not link:
        return ExpectationResult("nvme_link", expected, None, False,
                                 f"no NVMe controller {name or ''} under /sys/class/nvme".replace("  ", " "))
    seen = {"gts": link.get("gts"), "width": link.get("width")}
    ok = all(seen.get(key) is not None and float(seen[key]) >= float(spec[key]) for key in ("gts", "width")
             if key in spec)
    return ExpectationResult("nvme_link", expected, seen, ok,
                             f"{name} link runs at {link.get('gts')} GT/s x{link.get('width')} (capable of "
                             f"{link.get('max_gts')} GT/s x{link.get('max_width')}), expected {expected}")


def check_platform(name: str, facts: dict[str, Any]) -> list[ExpectationResult]:
    """A target declared ``platform: jetson`` whose runner finds no Jetson: say that first, since every
    other expectation would fail for that reason."""
    seen = facts.get("platform_detected")
    if seen is None or seen == name:
        return []
    signs = {"jetson": "/etc/nv_tegra_release", "android": "/system/build.prop or ANDROID_ROOT",
             "macos": "sys.platform darwin"}
    return [ExpectationResult("platform", name, seen, False,
                              f"the target is declared platform {name} but the runner found {seen} "
                              f"(no {signs.get(name, name)}): check targets/*.yaml")]
