"""The native sampler's collectors: ``blockstat`` (the block device's counters) and ``threads`` (every
thread of the step's process and of its descendants, and the process tree), both read by ``runner/native`` every
period. Their captures are read
column-wise into Arrow tables (:mod:`harness.collectors.sampler_tables`), which ingest writes run by run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from harness.collectors.base import CollectorKind, register_collector
from harness.config.validate import StrictModel
from harness.parsers._common import header_fields
from harness.parsers.sampler import process_records, sampler_lateness
from runner.contract import CollectorSpec, RunRecord

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
TAIL_BYTES = 4096  # the exit or stop line is among a capture's last lines
PROCESSES = "processes"  # the table of the step's process tree (harness/results/tables.py)
LATE_SHARE = 0.2  # p90 lateness beyond this share of the period: the samples are not at their instants


def warn_if_late(raw: Path) -> None:
    """One warning line naming the capture when its samples' p90 lateness (parsers.sampler.sampler_lateness) came
    later than a fifth of the period. Why: a sampler that waits for a CPU gets one at the next scheduling
    event, most often a thread going to sleep, so late samples over-count the waits that just began (the sampler
    asks for a short slice, which does not help against a step that runs at a higher priority)."""
    with raw.open("rb") as capture:
        period = header_fields(capture.readline().decode(errors="replace")).get("period_ms", "")
        capture.seek(max(0, raw.stat().st_size - TAIL_BYTES))
        late = sampler_lateness(capture.read())
    # no readable header: the table reader says what is wrong with it
    if late and period.isdigit() and late["late_us_p90"] > LATE_SHARE * int(period) * 1000:
        log.warning("%s: samples were late (p90 %d us, max %d us of a %s ms period): the sampler waited for a CPU, "
                    "so its classes over-count waits that had just begun; run it at the step's priority or higher",
                    raw, late["late_us_p90"], late["late_us_max"], period)


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
    # the step's process and its descendants (found every ~100 ms); false: the step's process only (--no-tree)
    tree: bool = True


@register_collector
class Blockstat(CollectorKind):
    """``/sys/block/DEV/stat`` every period, by the native sampler."""

    name, Config, table, raw_file, parser = "blockstat", BlockstatConfig, "blockstat", "blockstat.txt", "blockstat"

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, pa.Table]:
        from harness.collectors.sampler_tables import blockstat_table, with_intervals  # pyarrow: with ingest only

        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        warn_if_late(raw)
        with raw.open("rb") as capture:  # read column-wise, a block at a time (an hour is 360 000 lines)
            # Rates over the interval ending at each sample (throughput, I/O size, queue depth); the
            # raw counters stay beside them so any other derivation remains possible.
            return {self.table: with_intervals(blockstat_table(capture))}


@register_collector
class Threads(CollectorKind):
    """Every thread of the step's process and its descendants every period: state, faults, CPU, wait class; the
    processes (``processes``)."""

    name, Config, table, raw_file, parser = "threads", ThreadsConfig, "threads", "threads.txt", "sampler-threads"

    def runner_spec(self, config: ThreadsConfig) -> CollectorSpec:
        return {"kind": self.name, "period_ms": config.period_ms, "stat_ms": config.stat_ms, "wchan": config.wchan,
                "gate": config.gate, "tree": config.tree}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, pa.Table]:
        from harness.collectors.sampler_tables import sampler_threads_table  # pyarrow: with ingest only

        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        warn_if_late(raw)
        with raw.open("rb") as capture:  # an hour of 5 ms samples of 16 threads: 11.5 M lines, never held whole
            table = sampler_threads_table(capture)
            # the step's process tree (v3's '# proc' lines): which process each pid was, when it came and went
            processes = [{**row, "source": "threads"} for row in process_records(capture)]
        return {self.table: table, PROCESSES: processes} if processes else {self.table: table}
