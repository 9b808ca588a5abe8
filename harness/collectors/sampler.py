"""The native sampler's collectors: ``blockstat`` (the block device's counters) and ``threads`` (every
thread of the step's main process), both read by ``runner/native`` every period."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from harness.collectors.base import CollectorKind, Rows, register_collector
from harness.config.validate import StrictModel
from harness.parsers.blockstat import derive_intervals


class PeriodConfig(StrictModel):
    period_ms: Annotated[int, Field(ge=1, le=10_000)]


class BlockstatConfig(PeriodConfig):
    period_ms: Annotated[int, Field(ge=1, le=10_000)] = 10


class ThreadsConfig(PeriodConfig):
    period_ms: Annotated[int, Field(ge=1, le=10_000)] = 5


@register_collector
class Blockstat(CollectorKind):
    """``/sys/block/DEV/stat`` every period, by the native sampler."""

    name, Config, table, raw_file, parser = "blockstat", BlockstatConfig, "blockstat", "blockstat.txt", "blockstat"

    def ingest(self, run_dir: Path, record: dict[str, Any]) -> dict[str, Rows]:
        tables = super().ingest(run_dir, record)
        rows = tables.get(self.table, [])
        # Rates over the interval ending at each sample (throughput, I/O size, queue depth); the
        # raw counters stay beside them so any other derivation remains possible.
        for row, interval in zip(rows[1:], derive_intervals(rows), strict=True):
            for key in ("dt_s", "read_bytes_per_s", "write_bytes_per_s", "avg_read_io_bytes", "avg_inflight",
                        "util_pct"):
                row[key] = interval[key]
        return tables


@register_collector
class Threads(CollectorKind):
    """Every thread of the step's main process every period: state, faults, CPU, wchan."""

    name, Config, table, raw_file, parser = "threads", ThreadsConfig, "threads", "threads.txt", "sampler-threads"
