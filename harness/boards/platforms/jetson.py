"""NVIDIA Jetson (L4T / JetPack): power mode, clocks, GUI, NVMe link, tegrastats.

A power mode is verified by its name AND the clock tables: the seed article's Orin Nano Super said
MAXN_SUPER in ``nvpmodel -q`` while its GPU devfreq table still ended at 624.75 MHz.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.boards.platforms import checks as C
from harness.boards.platforms.base import ExpectationResult, register_platform
from harness.boards.platforms.linux import LinuxPlatform
from harness.parsers import ParseError, parse

# What a mode must show in the tables, per board (matched against /proc/device-tree/model).
MODE_CLOCKS: dict[tuple[str, str], dict[str, int]] = {
    ("Orin Nano", "MAXN_SUPER"): {"gpu_max_hz": 1_020_000_000, "cpu_max_khz": 1_728_000},
}

SUPER_HINT = ("the Super clocks are not active: the board runs a non-Super device tree/firmware (flash JetPack 6.2+ "
              "with the *-super configuration) or the mode was not applied (sudo nvpmodel -m <id>, then reboot)")


def mode_requirements(board_model: str | None, mode: str) -> dict[str, int] | None:
    for (board, name), clocks in MODE_CLOCKS.items():
        if name == mode and board_model and board in board_model:
            return clocks
    return None


@register_platform
class JetsonPlatform(LinuxPlatform):
    name = "jetson"
    expectations = {
        **LinuxPlatform.expectations,
        "power_mode": "nvpmodel mode name (e.g. MAXN_SUPER), verified against the GPU/CPU clock tables; or "
                      "{name: MAXN_SUPER, gpu_max_hz: ..., cpu_max_khz: ...}",
        "gpu_max_hz": "the GPU devfreq table reaches this clock and max_freq allows it",
        "cpu_max_khz": "the CPU clock cap (scaling_max_freq) is at least this",
        "gui": "off: multi-user.target and no display manager running; on: the opposite",
        "nvme_link": "NVMe PCIe link at least {gts: 8, width: 4} (optionally controller: nvme0)",
        **C.GATES,
    }

    def probe(self, session: Any, files: list[str], tools: Sequence[str] = ()) -> dict[str, Any]:
        return enrich(super().probe(session, files, tools))

    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        results: list[ExpectationResult] = C.check_platform(self.name, facts) if expect else []
        rest: dict[str, Any] = {}
        for name, expected in expect.items():
            if name == "power_mode":
                results += check_power_mode(expected, facts)
            elif name == "gpu_max_hz":
                results.append(C.check_gpu_max(expected, facts))
            elif name == "cpu_max_khz":
                results.append(C.check_cpu_max(expected, facts))
            elif name == "gui":
                results.append(C.check_gui(expected, facts))
            elif name == "nvme_link":
                results.append(C.check_nvme_link(expected, facts))
            elif name not in C.GATES:
                rest[name] = expected
        return results + super().check(rest, facts, session)


def enrich(facts: dict[str, Any]) -> dict[str, Any]:
    """Parse the raw tool outputs the runner captured into named facts (the parsers live here)."""
    facts = dict(facts)
    facts["power_mode_name"] = facts["power_mode_id"] = None
    if facts.get("nvpmodel_q_raw"):
        try:
            row = parse("nvpmodel", facts["nvpmodel_q_raw"].encode())[0]
            facts["power_mode_name"], facts["power_mode_id"] = row["mode_name"], row["mode_id"]
        except ParseError as exc:
            facts["nvpmodel_error"] = f"nvpmodel -q: {exc}"
    if facts.get("jetson_clocks_raw") and not facts.get("jetson_clocks_error"):
        try:
            facts["jetson_clocks"] = parse("jetson-clocks", facts["jetson_clocks_raw"].encode())[0]
        except ParseError as exc:
            facts["jetson_clocks_error"] = f"jetson_clocks --show: {exc}"
    facts["cpu_max_khz"] = C.cpu_max_khz(facts)
    facts["cpu_table_max_khz"] = C.cpu_table_max_khz(facts)
    facts["gui"] = "on" if C.gui_running(facts) else "off"
    return facts


def check_power_mode(expected: Any, facts: dict[str, Any]) -> list[ExpectationResult]:
    spec = dict(expected) if isinstance(expected, dict) else {"name": str(expected)}
    want = str(spec.get("name"))
    seen = facts.get("power_mode_name")
    if seen is None:
        why = facts.get("nvpmodel_error") or "nvpmodel -q printed no mode"
        return [ExpectationResult("power_mode", want, None, False, f"power mode unknown: {why}")]
    if seen != want:
        return [ExpectationResult("power_mode", want, seen, False,
                                  f"nvpmodel says {seen} (id {facts.get('power_mode_id')}), expected {want}")]
    required = {k: v for k, v in spec.items() if k in ("gpu_max_hz", "cpu_max_khz")} or \
        mode_requirements(facts.get("board_model"), want) or {}
    if not required:
        return [ExpectationResult("power_mode", want, seen, True,
                                  f"nvpmodel says {seen}; no clock table known for {facts.get('board_model')!r}, "
                                  "name checked only (add gpu_max_hz/cpu_max_khz to verify the clocks)")]
    results = []
    for key, value in required.items():
        result = C.check_gpu_max(value, facts) if key == "gpu_max_hz" else C.check_cpu_max(value, facts)
        message = f"nvpmodel says {seen} but {result.message}" if not result.ok else result.message
        if not result.ok and want.endswith("SUPER"):
            message += f": {SUPER_HINT}"
        results.append(ExpectationResult(f"power_mode:{key}", value, result.seen, result.ok, message))
    ok = all(r.ok for r in results)
    head = ExpectationResult("power_mode", want, seen, ok,
                             f"nvpmodel says {seen} and the clock tables agree" if ok else results[0].message
                             if not results[0].ok else results[-1].message)
    return [head] + results
