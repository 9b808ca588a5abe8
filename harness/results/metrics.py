"""The metrics compare, gate and history know: where each lives, which way is better, and how exact it is.

A metric is one column of one table (or a value derived from a row), observed once per row. ``test`` names the
column that splits a table into separately compared tests (llama-bench's ``pp16``/``tg32``, fio's job names).
``kind`` says how noisy the metric is by nature: ``count`` metrics (bytes, faults, I/Os per token) are
near-deterministic for a given model and build and may be gated with a tighter threshold than ``time``
metrics (tok/s, latency), which move with clocks, temperature and neighbours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from harness.results.tables import BENCH, FIO, READS, REQUESTS, Table

Value = Callable[[pd.DataFrame], pd.Series]


@dataclass(frozen=True)
class Metric:
    name: str
    table: Table
    value: Value  # one observation per row
    needs: tuple[str, ...]  # columns the value is computed from; a set without them lacks the metric
    higher_is_better: bool
    kind: Literal["time", "count"]
    unit: str
    test: str | None = None  # the column that names separately compared tests within the table
    holds: str = ""

    def observations(self, frame: pd.DataFrame) -> pd.Series:
        return pd.to_numeric(self.value(frame), errors="coerce")


def _column(name: str) -> Value:
    return lambda frame: frame[name]


def _ratio(top: str, bottom: str, scale: float = 1.0) -> Value:
    return lambda frame: frame[top] * scale / frame[bottom].where(frame[bottom] > 0)


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("decode_tps", REQUESTS, _column("decode_tps"), ("decode_tps",), True, "time", "tok/s",
           holds="llama-server's decode tokens per second, one per request"),
    Metric("prefill_tps", REQUESTS, _column("prefill_tps"), ("prefill_tps",), True, "time", "tok/s",
           holds="llama-server's prompt tokens per second, one per request"),
    Metric("ttft_ms", REQUESTS, lambda f: (f["t_first_token_ns"] - f["t_ns"]) / 1e6, ("t_first_token_ns", "t_ns"),
           False, "time", "ms", holds="time from sending a request to its first streamed token"),
    Metric("bytes_per_token", REQUESTS, _column("decode_dev_read_bytes_per_token"),
           ("decode_dev_read_bytes_per_token",), False, "count", "B/token",
           holds="device bytes read per decoded token (block-stat delta over the decode window)"),
    Metric("majflt_per_token", REQUESTS, _column("decode_majflt_per_token"), ("decode_majflt_per_token",), False,
           "count", "faults/token", holds="major page faults of the engine per decoded token"),
    Metric("ios_per_token", REQUESTS, _ratio("decode_dev_read_ios", "decode_tokens"),
           ("decode_dev_read_ios", "decode_tokens"), False, "count", "I/Os/token",
           holds="device read I/Os per decoded token"),
    # decode over an output-token window (llama-server decode_window, declared engines; InferSSD reports 129-256)
    Metric("window_tps", REQUESTS, _column("window_tps"), ("window_tps",), True, "time", "tok/s",
           holds="decode tokens per second over the step's decode_window tokens, one per request"),
    # paid once per model, not per token: kept apart from decode (declared engines that report them)
    Metric("load_ms", REQUESTS, _column("load_ms"), ("load_ms",), False, "time", "ms",
           holds="the engine's own model load time, one per run"),
    Metric("pack_build_ms", REQUESTS, _column("pack_build_ms"), ("pack_build_ms",), False, "time", "ms",
           holds="the engine's own expert-pack build time (InferSSD), one per run"),
    Metric("bench_tps", BENCH, _column("avg_tps"), ("avg_tps",), True, "time", "tok/s", test="test",
           holds="llama-bench tokens per second, one per test and run"),
    Metric("fio_read_mbps", FIO, lambda f: f["read_bw_bytes_per_s"] / 1e6, ("read_bw_bytes_per_s",),
           True, "time", "MB/s", test="job_name", holds="fio read bandwidth, one per job and run"),
    Metric("fio_p99_ms", FIO, lambda f: f["read_clat_p99_ns"] / 1e6, ("read_clat_p99_ns",), False, "time", "ms",
           test="job_name", holds="fio read completion latency, 99th percentile"),
    Metric("read_mbps", READS, lambda f: f["read_bytes_per_s"] / 1e6, ("read_bytes_per_s",), True, "time", "MB/s",
           holds="the read step's own throughput, one per run"),
)}
