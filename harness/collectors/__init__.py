"""Collectors: background samplers during a run (``blockstat``, ``threads``, ...).

Like steps, each kind validates its options, tells the runner what to start, and turns the
runner's raw output into table rows. The target side lives in ``runner/collectors.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field

from harness.config.validate import StrictModel, validate
from harness.parsers import parse
from harness.parsers.blockstat import derive_intervals

Rows = list[dict[str, Any]]


class CollectorKind:
    name: ClassVar[str]
    Config: ClassVar[type[StrictModel]]
    table: ClassVar[str]
    raw_file: ClassVar[str]
    parser: ClassVar[str]

    def runner_spec(self, config: Any) -> dict[str, Any]:
        return {"kind": self.name, **config.model_dump()}

    def ingest(self, run_dir: Path, record: dict[str, Any]) -> dict[str, Rows]:
        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        return {self.table: parse(self.parser, raw.read_bytes())}


class PeriodConfig(StrictModel):
    period_ms: Annotated[int, Field(ge=1, le=10_000)]


class BlockstatConfig(PeriodConfig):
    period_ms: Annotated[int, Field(ge=1, le=10_000)] = 10


class ThreadsConfig(PeriodConfig):
    period_ms: Annotated[int, Field(ge=1, le=10_000)] = 5


COLLECTORS: dict[str, CollectorKind] = {}


def register_collector(cls: type[CollectorKind]) -> type[CollectorKind]:
    COLLECTORS[cls.name] = cls()
    return cls


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


def collector_configs(experiment: Any, doc: Any) -> dict[str, StrictModel]:
    configs: dict[str, StrictModel] = {}
    for name, options in experiment.collectors().items():
        if name not in COLLECTORS:
            raise doc.error(("collect", name), f"unknown collector {name!r} (known: {', '.join(COLLECTORS)})")
        configs[name] = validate(COLLECTORS[name].Config, options, doc, ("collect", name))
    return configs


def check_collectors(experiment: Any, doc: Any) -> None:
    collector_configs(experiment, doc)


from harness.collectors import platform as _platform  # noqa: E402,F401  (registers the platform collectors)
