"""The native sampler's collectors: ``blockstat`` (the block device's counters) and ``threads`` (every
thread of the step's main process), both read by ``runner/native`` every period. Their captures are read
column-wise into Arrow tables (:mod:`harness.collectors.sampler_tables`), which ingest writes run by run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from harness.collectors.base import CollectorKind, register_collector
from harness.config.validate import StrictModel

if TYPE_CHECKING:
    import pyarrow as pa


class PeriodConfig(StrictModel):
    period_ms: Annotated[int, Field(ge=1, le=10_000)]


class BlockstatConfig(PeriodConfig):
    period_ms: Annotated[int, Field(ge=1, le=10_000)] = 10


class ThreadsConfig(PeriodConfig):
    period_ms: Annotated[int, Field(ge=1, le=10_000)] = 5
    # stat (state letter D/S, majflt, utime, stime) of every thread every this many ms; 0: every sample (exact
    # state letters, about twice the sampler's CPU). The sampler's --stat-ms.
    stat_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 100
    # the kernel wait channel of every thread off CPU every sample (the sampler's --wchan; costs ~50 % more CPU)
    wchan: bool = False
    # a thread parked in one wait is re-read only after its schedstat shows it ran (false: the sampler's --no-gate,
    # syscall of every thread every sample; a woken parked thread then shows R while it waits for a CPU)
    gate: bool = True


@register_collector
class Blockstat(CollectorKind):
    """``/sys/block/DEV/stat`` every period, by the native sampler."""

    name, Config, table, raw_file, parser = "blockstat", BlockstatConfig, "blockstat", "blockstat.txt", "blockstat"

    def ingest(self, run_dir: Path, record: dict[str, Any]) -> dict[str, pa.Table]:
        from harness.collectors.sampler_tables import blockstat_table, with_intervals  # pyarrow: with ingest only

        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        with raw.open("rb") as capture:  # read column-wise, a block at a time (an hour is 360 000 lines)
            # Rates over the interval ending at each sample (throughput, I/O size, queue depth); the
            # raw counters stay beside them so any other derivation remains possible.
            return {self.table: with_intervals(blockstat_table(capture))}


@register_collector
class Threads(CollectorKind):
    """Every thread of the step's main process every period: state, faults, CPU, wchan."""

    name, Config, table, raw_file, parser = "threads", ThreadsConfig, "threads", "threads.txt", "sampler-threads"

    def ingest(self, run_dir: Path, record: dict[str, Any]) -> dict[str, pa.Table]:
        from harness.collectors.sampler_tables import sampler_threads_table  # pyarrow: with ingest only

        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        with raw.open("rb") as capture:  # an hour of 5 ms samples of 16 threads: 11.5 M lines, never held whole
            return {self.table: sampler_threads_table(capture)}
