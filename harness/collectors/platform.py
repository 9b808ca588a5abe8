"""Platform collectors, controller side: options, raw file, parser, table (runner side:
``runner/collectors/``).

``optional: true`` lets a run go on without a collector that cannot run on a target (the reason is
shown and kept in the run record); a required one that cannot run stops the campaign in preflight,
before a result set exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from harness.collectors.base import CollectorKind, Rows, register_collector
from harness.config.validate import StrictModel
from harness.errors import ToolMissingError
from harness.parsers import ParseError
from harness.parsers.snapshots import reclaim_summary
from runner.contract import CollectorSpec, RunRecord


class PlatformConfig(StrictModel):
    period_ms: Annotated[int, Field(ge=10, le=60_000)] = 1000
    optional: bool = False


def _config(default_ms: int, minimum_ms: int = 10) -> type[PlatformConfig]:
    class Config(PlatformConfig):
        period_ms: Annotated[int, Field(ge=minimum_ms, le=60_000)] = default_ms

    return Config


class PlatformCollector(CollectorKind):
    def runner_spec(self, config: PlatformConfig) -> CollectorSpec:
        return {"kind": self.name, "period_ms": config.period_ms, "optional": config.optional}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        try:
            tables = super().ingest(run_dir, record)
        except ParseError as exc:
            # a run shorter than one period leaves a header and no sample ("no iostat samples"):
            # nothing to tabulate, not a broken file; anything else is reported by ingest
            if str(exc).startswith("no "):
                return {}
            raise
        for row in tables.get(self.table, []):
            row["source"] = self.name  # several collectors share the telemetry/memory tables
        return tables


STAMP_MIDDLE_S = 0.5  # whole-second stamps: the middle of the second they name


class WallClockCollector(PlatformCollector):
    """Rows of a tool that stamps wall-clock seconds (tegrastats, powermetrics) get ``t_ns`` on the run's monotonic
    axis from the clock pair the runner wrote at start; rows without a stamp are spaced by the period."""

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        tables = super().ingest(run_dir, record)
        clock_path = run_dir / (self.raw_file + ".clock")
        if not clock_path.exists():
            return tables
        clock = json.loads(clock_path.read_text())
        period_s = next((c.get("period_ms", 1000) for c in record.get("spec", {}).get("collectors", [])
                         if c.get("kind") == self.name), 1000) / 1000
        for index, row in enumerate(tables.get(self.table, [])):
            stamp = row.get("timestamp")
            # a stamp is the second the line was printed in, truncated: its middle is the best guess (within
            # +-0.5 s, where the second's start was up to 1 s early)
            if isinstance(row.get("wall_s"), float):  # powermetrics: the stamp with its own UTC offset
                wall = row["wall_s"] + STAMP_MIDDLE_S
            elif stamp:
                local = datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp()
                wall = local - clock["utc_offset_s"] + STAMP_MIDDLE_S  # the board printed local time
            else:
                wall = clock["wall_s"] + (index + 1) * period_s
            row["t_ns"] = clock["mono_ns"] + round((wall - clock["wall_s"]) * 1e9)
        return tables


class VmstatCollector(PlatformCollector):
    """/proc/vmstat rows, plus one ``reclaim`` row per run: what the run's window reclaimed and re-read."""

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        tables = super().ingest(run_dir, record)
        summary = reclaim_summary(tables.get(self.table, []))
        if summary:
            tables["reclaim"] = [summary]
        return tables


def _kind(name: str, table: str, raw_file: str, parser: str, config: type[PlatformConfig], doc: str) -> None:
    bases = {"tegrastats": WallClockCollector, "powermetrics": WallClockCollector, "vmstat": VmstatCollector}
    base = bases.get(name, PlatformCollector)
    cls = type(name.title().replace("_", ""), (base,),
               {"name": name, "table": table, "raw_file": raw_file, "parser": parser, "Config": config,
                "__doc__": doc})
    register_collector(cls)


_kind("tegrastats", "telemetry", "tegrastats.log", "tegrastats", _config(1000, 100),
      "Jetson tegrastats --interval MS --logfile FILE: RAM, CPU/GPU/EMC load and clocks, temperatures, rails.")
_kind("jtop", "telemetry", "jtop.jsonl", "jtop", _config(1000, 100),
      "jetson-stats (jtop service): the same signals as tegrastats, through its Python API.")
_kind("vmstat", "memory", "vmstat.txt", "vmstat", _config(200),
      "/proc/vmstat counters (reclaim, major faults, refaults) with per-interval deltas.")
_kind("psi", "memory", "psi.txt", "psi", _config(500), "/proc/pressure/{memory,io,cpu,irq}: stall averages and totals.")
_kind("thermal", "telemetry", "thermal.txt", "thermal", _config(1000), "Every thermal zone's temperature.")
_kind("power", "telemetry", "power.txt", "power", _config(500), "power_supply current_now x voltage_now (battery).")
_kind("rapl", "telemetry", "rapl.txt", "rapl", _config(500),
      "Intel/AMD RAPL powercap zones: cumulative energy_uj (wrapping at max_energy_range_uj) per zone.")
_kind("hwmon", "telemetry", "hwmon.txt", "hwmon", _config(500), "hwmon power*_input channels (uW), by chip and label.")
_kind("iostat", "iostat", "iostat.txt", "iostat", _config(1000, 1000),
      "macOS iostat -d -w SECONDS: per disk KB/t, tps, MB/s.")
_kind("vm_stat", "memory", "vm_stat.txt", "vm_stat", _config(1000, 200),
      "macOS vm_stat snapshots: pages free/active/wired, compressor, pageins/outs, swapins/outs.")
_kind("powermetrics", "telemetry", "powermetrics.txt", "powermetrics", _config(1000, 100),
      "macOS powermetrics (sudo): CPU/GPU/ANE power, cluster frequencies, thermal pressure.")


def preflight(target: str, configs: dict[str, Any], facts: dict[str, Any], message: Callable[[str], None]) -> None:
    """Stop before anything runs when a required collector cannot run on ``target``; say so for optional ones."""
    unavailable = facts.get("collectors_unavailable") or {}
    for name, config in configs.items():
        reason = unavailable.get(name)
        if not reason:
            continue
        if getattr(config, "optional", False):
            message(f"{target}: collector {name} unavailable, runs go on without it: {reason}")
            continue
        raise ToolMissingError(f"target {target}: collector {name} cannot run: {reason} "
                               f"(or mark it optional: true)")
