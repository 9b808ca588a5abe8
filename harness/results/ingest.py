"""Raw run directories -> tidy tables (parquet). Pure reading: the raw files are never changed.

Every row carries ``run_id`` and ``target`` so any table joins onto ``runs`` for the matrix
parameters, cache condition and round.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from harness.collectors import COLLECTORS
from harness.collectors.base import CollectorKind
from harness.parsers import ParseError
from harness.parsers.blockstat import delta as blockstat_delta
from harness.parsers.blockstat import parse_snapshot
from harness.results.cachestate import cache_drop_columns
from harness.results.emulation import emulation_columns
from harness.results.manifest import Manifest, verdict
from harness.results.minimums import Minimums, verdict_columns
from harness.results.store import disk_error
from harness.results.streamed import RunTable, StreamedTables
from harness.results.tables import FACTS, RUNS, TABLES_DIR, table_file
from harness.results.validity import measure_columns
from harness.results.variants import variant_label
from harness.steps import STEPS
from harness.steps.base import StepKind
from harness.steps.env import env_columns
from runner.contract import RunRecord

Rows = list[dict[str, Any]]

# A cold run that moved less than this share of its files from the device is suspect (MLPerf TEST04 idea).
COLD_READ_SUSPECT_FRACTION = 0.05


def run_row(planned: Mapping[str, Any], record: RunRecord | None) -> dict[str, Any]:
    """One row of the ``runs`` table: plan, status, timings, entry state, cache, device deltas."""
    row: dict[str, Any] = {k: planned[k] for k in ("run_id", "index", "target", "step", "cache", "round", "repeat")}
    row["step_label"] = planned.get("step_label", planned["step"])
    row["engine"] = planned.get("engine")  # the engine the step ran (variant labels name any but llama.cpp's)
    row.update(planned.get("params", {}))
    row.update(env_columns(planned.get("env")))  # env_<NAME> per variable the step set (none: no column)
    row["status"] = planned.get("status", "planned")
    # the campaign's verdict on the run's interference (harness/results/validity.py); a retry names its original
    row["perturbed"] = bool(planned.get("perturbed", False))
    row["perturbed_reason"] = planned.get("perturbed_reason")
    row["retry_of"] = planned.get("retry_of")
    if record is None:
        return row
    row["status"], row["error"] = verdict(planned, record)  # the controller's (RunEntry.status), one owner
    started, ended = record.get("step_started"), record.get("step_ended")
    row["started_wall"] = (record.get("started") or {}).get("wall")
    if started and ended:
        row["step_start_mono_ns"] = started["mono_ns"]
        row["step_end_mono_ns"] = ended["mono_ns"]
        row["step_duration_s"] = (ended["mono_ns"] - started["mono_ns"]) / 1e9
    row["block_device"] = record.get("block_device")
    for key, value in (record.get("entry_state") or {}).items():
        row[f"entry_{key}"] = value
    cache = record.get("cache") or {}
    before, after = cache.get("before") or [], cache.get("after") or []
    row["residency_before_pct"] = max((r["resident_pct"] for r in before), default=None)
    row["residency_after_pct"] = max((r["resident_pct"] for r in after), default=None)
    file_bytes = sum(r["size_bytes"] for r in before) if before else None
    row["cache_files_bytes"] = file_bytes
    row.update(cache_drop_columns(cache.get("drop")))
    stat_before = parse_snapshot(record.get("blockstat_before"))
    stat_after = parse_snapshot(record.get("blockstat_after"))
    if stat_before and stat_after:
        moved = blockstat_delta(stat_before, stat_after)
        for key in ("read_bytes", "read_ios", "write_bytes", "io_ticks_ms", "time_in_queue_ms", "avg_read_io_bytes"):
            row[f"dev_{key}"] = moved.get(key)
        seconds = row.get("step_duration_s")
        if seconds and moved.get("read_bytes") is not None:
            row["dev_read_bytes_per_s"] = moved["read_bytes"] / seconds
    row.update(emulation_columns(record))  # emu_*: effective limits and cgroup stats of an emulated run
    row.update(measure_columns(record.get("interference")))  # contract 1.0 has none: empty columns
    for key, value in main_rusage(record).items():
        row[f"proc_{key}"] = value
    row["cold_read_suspect"] = bool(
        row["cache"] == "cold" and row["status"] == "ok" and file_bytes and row.get("dev_read_bytes") is not None
        and row["step"] == "read" and row["dev_read_bytes"] < COLD_READ_SUSPECT_FRACTION * file_bytes)
    return row


def main_rusage(record: RunRecord) -> dict[str, Any]:
    """The rusage of the step's own process: the one run.json names ``main_process``. A record written before
    runners named it (or a step that spawned nothing itself, equivalence's sides) has its first entry, as
    ingest always took it (the first process reaped)."""
    usage: dict[str, dict[str, Any]] = record.get("rusage") or {}
    named = record.get("main_process")
    if isinstance(named, str) and named in usage:
        return usage[named]
    return next(iter(usage.values()), {})


def ingest_run(raw_dir: Path, planned: Mapping[str, Any],
               minimums: Minimums | None = None) -> dict[str, Rows | RunTable]:
    """All table rows one run contributes (a table a collector read column-wise, as a RunTable); the run row
    says whether its decode was below the experiment's ``minimums`` (harness/results/minimums.py)."""
    record_path = raw_dir / "run.json"
    record: RunRecord | None
    try:
        record = json.loads(record_path.read_text()) if record_path.exists() else None
    except ValueError:
        record = None  # a pull cut short (a full disk): the run counts as not pulled; --resume pulls it again
    run = run_row(planned, record)
    run.update(verdict_columns({}, None, False))  # every run has the columns, not judged until its rows are read
    tables: dict[str, Rows | RunTable] = {RUNS.name: [run]}
    if record is None:
        return tables
    sources: list[tuple[str, StepKind | CollectorKind]] = [(planned["step"], STEPS[planned["step"]])]
    sources += [(spec["kind"], COLLECTORS[spec["kind"]]) for spec in record["spec"].get("collectors", [])]
    pieces: list[dict[str, Rows | pa.Table]] = []
    for name, source in sources:
        try:
            pieces.append(source.ingest(raw_dir, record))
        except (ParseError, ValueError) as exc:
            # a failed step often leaves partial output: keep the run, say what could not be read
            errors = run.setdefault("ingest_errors", [])
            errors.append(f"{name}: {exc}")
    if "ingest_errors" in run:
        run["ingest_errors"] = "; ".join(run["ingest_errors"])
    t0 = (record.get("step_started") or {}).get("mono_ns")
    for piece in pieces:
        for table, rows in piece.items():
            if isinstance(rows, pa.Table):  # threads, blockstat: run_id, target, t_rel_s added as it is written
                tables[table] = RunTable(rows, planned["run_id"], planned["target"], t0)
                continue
            for row in rows:
                row["run_id"], row["target"] = planned["run_id"], planned["target"]
                if t0 is not None and row.get("t_ns") is not None:
                    row["t_rel_s"] = (row["t_ns"] - t0) / 1e9
            kept = tables.setdefault(table, [])
            assert isinstance(kept, list)  # a table is streamed (RunTable) or rows, never both
            kept.extend(rows)
    rows_only = {name: rows for name, rows in tables.items() if isinstance(rows, list)}
    run.update(verdict_columns(rows_only, minimums, run["status"] == "ok"))
    return tables


def _frame(rows: Rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        # lists (e.g. per-core frequencies) and mixed objects are stored as JSON text for parquet
        if frame[column].dtype == object and frame[column].map(lambda v: isinstance(v, (list, dict))).any():
            frame[column] = frame[column].map(lambda v: None if v is None else json.dumps(v))
    return frame


def write_tables(set_path: Path, manifest: Manifest) -> dict[str, int]:
    """(Re)build every table of a result set from its raw directories; return row counts."""
    tables: dict[str, Rows] = {RUNS.name: []}
    streamed = StreamedTables(set_path)  # written run by run: an hour of thread samples is 11.5 M rows
    minimums = Minimums.of(manifest.get("validity"))  # the experiment's, as the campaign recorded them
    for planned in manifest["runs"]:
        raw_dir = set_path / "raw" / planned["target"] / planned["run_id"]
        for table, rows in ingest_run(raw_dir, planned, minimums).items():
            if isinstance(rows, RunTable):
                streamed.write(table, rows)
            else:
                tables.setdefault(table, []).extend(rows)
    params = list(manifest.get("matrix") or {})
    for row in tables[RUNS.name]:
        row["variant"] = variant_label(row, params)  # schema 2: history and gate select a cell by its name
    facts: Rows = []
    for target in manifest.get("targets", []):
        for key, value in sorted((target.get("facts") or {}).items()):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            facts.append({"target": target["name"], "key": key, "value": str(value)})
    tables[FACTS.name] = facts
    out = set_path / TABLES_DIR
    out.mkdir(exist_ok=True)
    counts = streamed.finish()
    for name, rows in tables.items():
        # a temporary name, then the real one: a full disk never leaves a truncated table under its name
        tmp = out / f".{table_file(name)}.tmp"
        try:
            _frame(rows).to_parquet(tmp, index=False)
            os.replace(tmp, out / table_file(name))
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise disk_error(exc, set_path) from None
        counts[name] = len(rows)
    return counts
