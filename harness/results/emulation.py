"""How emulated runs show in the results: the ``emu_*`` columns of the runs table (what ``runner/emulation/``
recorded) and the note a figure made from emulated runs carries in its footer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.units import format_size
from runner.contract import RunRecord

if TYPE_CHECKING:  # frames come from the figures and reports; the CLI's start needs no pandas
    import pandas as pd

AT_LIMIT_FRACTION = 0.95
_EFFECTIVE = ("memory_bytes", "memory_swap_bytes", "read_bytes_per_s", "read_iops", "read_ahead_kb")
_STATS = ("memory_peak_bytes", "memory_failcnt", "oom_kill", "pgmajfault", "cache_bytes", "io_read_bytes",
          "io_read_ios")


def emulation_columns(record: RunRecord | None) -> dict[str, Any]:
    """``emu_*`` columns of the runs table: effective limits (read back from the kernel) and cgroup stats."""
    repaired = record.get("emulation_repaired") if record else None
    # this run first undid what a killed runner left changed (read_ahead_kb, a cgroup): worth seeing
    row: dict[str, Any] = {"emu_repaired_run": repaired.get("from_run")} if repaired else {}
    emu = record.get("emulation") if record else None
    if not emu:
        return row
    row["emulated"] = True
    backend = emu.get("backend") or {}
    row["emu_backend"] = ",".join(f"{k}:{v}" for k, v in sorted(backend.items())) or None
    effective, stats = emu.get("effective") or {}, emu.get("stats") or {}
    for key in _EFFECTIVE:
        row[f"emu_{key}"] = effective.get(key)
    row["emu_read_ahead_kb_seen"] = emu.get("read_ahead_kb_seen")
    row["emu_read_ahead_kb_original"] = emu.get("read_ahead_kb_original")
    for key in _STATS:
        row[f"emu_{key}"] = stats.get(key)
    # whether the budget bound the run; failcnt can stay 0 on recent kernels even when it did
    peak, limit = row.get("emu_memory_peak_bytes"), row.get("emu_memory_bytes")
    row["emu_memory_at_limit"] = bool(peak >= AT_LIMIT_FRACTION * limit) if peak and limit else None
    row["emu_cgroups_removed"] = emu.get("cgroups_removed")
    if emu.get("teardown_errors"):
        row["emu_teardown_errors"] = "; ".join(emu["teardown_errors"])
    return row


def _values(runs: pd.DataFrame, column: str, fmt: Callable[[Any], str]) -> str | None:
    if column not in runs:
        return None
    import pandas as pd

    seen = list(dict.fromkeys(v for v in runs[column] if pd.notna(v)))
    return "|".join(fmt(v) for v in seen) if seen else None


def emulation_note(runs: pd.DataFrame | None) -> str:
    """'emulated: memory 512.0 MiB · read_ahead_kb 8192|128' for the runs a figure was made from ('' if none)."""
    import pandas as pd

    if runs is None or runs.empty or "emulated" not in runs:
        return ""
    runs = runs[runs["emulated"].fillna(False).astype(bool)]
    if runs.empty:
        return ""
    parts = []
    for label, column, fmt in (("memory", "emu_memory_bytes", format_size),
                               ("read", "emu_read_bytes_per_s", lambda v: format_size(v) + "/s"),
                               ("read IOPS", "emu_read_iops", lambda v: f"{v:.0f}"),
                               ("read_ahead_kb", "emu_read_ahead_kb", lambda v: f"{v:.0f}")):
        shown = _values(runs, column, fmt)
        if shown:
            parts.append(f"{label} {shown}")
    versions = sorted({part.split(":")[1] for value in runs.get("emu_backend", pd.Series(dtype=object)).dropna()
                       for part in str(value).split(",") if ":" in part})
    how = f" (cgroup {'/'.join(versions)})" if versions else ""
    return f"emulated{how}: " + (" · ".join(parts) if parts else "yes")
