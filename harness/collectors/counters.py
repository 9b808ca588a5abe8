"""The ``counters`` collector: the kernel's cumulative per-thread counters of the step's process and its
descendants (schedstat, stat, taskstats delay accounting, PSI), read by ``runner/collectors/counters.py`` every
``period_ms`` (default 100) and at the run's start and end. Rows go to ``thread_counters`` (and the tree to
``processes``); harness/analysis/waits.py turns them into where each thread's time went (run, runqueue, io_wait,
thrashing, reclaim, other_sleep)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from harness.collectors.base import CollectorKind, Rows, register_collector
from harness.config.validate import StrictModel
from harness.parsers import parse
from harness.parsers.counters import counter_notes
from harness.parsers.sampler import process_records
from runner.contract import CollectorSpec, RunRecord


class CountersConfig(StrictModel):
    period_ms: Annotated[int, Field(ge=10, le=10_000)] = 100
    # native: runner/native/bin/counters reads (the default; Python where it is not built); python: the old reader
    reader: Literal["native", "python"] = "native"
    # the step's process and its descendants (found at every read); false: the step's process only
    tree: bool = True


@register_collector
class Counters(CollectorKind):
    """Per thread and read: on-CPU, runqueue and delay-accounting counters; PSI once per read."""

    name, Config, table, raw_file, parser = "counters", CountersConfig, "thread_counters", "counters.txt", "counters"

    def runner_spec(self, config: CountersConfig) -> CollectorSpec:
        return {"kind": self.name, "period_ms": config.period_ms, "reader": config.reader, "tree": config.tree}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        data = raw.read_bytes()
        rows = parse(self.parser, data)
        notes = counter_notes(data)  # why a source was missing, whether delayacct was restored
        for row in rows:
            row.update(notes)
        # the step's process tree (v2's '# proc' lines, written as the thread sampler writes them)
        processes = [{**row, "source": "counters"} for row in process_records(data)]
        return {self.table: rows, "processes": processes} if processes else {self.table: rows}
