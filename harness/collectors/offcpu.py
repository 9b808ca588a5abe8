"""The ``offcpu`` collector: exact off-CPU time per thread of the step's process from the scheduler's tracepoints
(bpftrace; runner/collectors/offcpu.py), in the sampler's classes (fault_io, read_io, futex, gpu, idle, other) plus
runqueue. Rows go to ``offcpu``; harness/analysis/offcpu.py turns two snapshots into shares of a window.

What bpftrace missed (the ``# stop`` line's ``unwoken``, ``unseen``, ``noregs``, ``lost``) is in every row
(``collector_*`` columns) and, when any is above zero, one warning line at ingest naming the run.

Optional by default: where it cannot run (no root, no bpftrace, no tracefs or BTF) the preflight says why in one
line and runs go on without it; ``optional: false`` makes it required.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

from pydantic import Field

from harness.collectors.base import CollectorKind, Rows, register_collector
from harness.config.validate import StrictModel
from harness.parsers import parse
from harness.parsers.offcpu import missed_events, offcpu_notes
from harness.parsers.sampler import process_records
from runner.contract import CollectorSpec, RunRecord

log = logging.getLogger(__name__)


class OffcpuConfig(StrictModel):
    period_ms: Annotated[int, Field(ge=50, le=60_000)] = 1000
    optional: bool = True


@register_collector
class Offcpu(CollectorKind):
    """Per thread and class: time asleep and the wait for a CPU after each wake-up, cumulative per snapshot."""

    name, Config, table, raw_file, parser = "offcpu", OffcpuConfig, "offcpu", "offcpu.txt", "offcpu"

    def runner_spec(self, config: OffcpuConfig) -> CollectorSpec:
        return {"kind": self.name, "period_ms": config.period_ms, "optional": config.optional}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        data = raw.read_bytes()
        notes = offcpu_notes(data)
        missed = missed_events(notes)
        if missed:  # the numbers stand (tests/test_offcpu.py bounds the loss), but a loss is never silent
            log.warning("offcpu: bpftrace missed events in %s (%s)", run_dir,
                        " ".join(f"{key}={count}" for key, count in missed.items()))
        rows = {self.table: [{**row, **notes} for row in parse(self.parser, data)]}
        # the step's process tree as bpftrace saw it (v2: '# proc' lines, no exits traced)
        processes = [{**row, "source": "offcpu"} for row in process_records(data)]
        return {**rows, "processes": processes} if processes else rows
