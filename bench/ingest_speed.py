#!/usr/bin/env python3
"""How long ingest takes, and how much memory, on one hour of sampler output. Run on demand, not in CI.

    .venv/bin/python bench/ingest_speed.py [--hours 1] [--threads 16] [--way columnar|rows|both] [--keep DIR]

Builds a synthetic but realistic result set in a temporary directory: one run whose ``threads.txt`` holds
``--hours`` of 5 ms samples of a ``--threads``-thread llama-server (1 h x 16 threads = 720 000 instants x 16 =
11.52 M lines) and whose ``blockstat.txt`` holds 10 ms block stats (360 000 lines), both in the native sampler's
exact line format (copied from tests/data/sampler and the quickstart demo's captures: TAB-separated thread records,
space-separated 17-field stat lines, the ``# harness-sampler v1`` header and the ``# exit`` / ``# stop`` trailers).

Then, in a child process per measurement (its peak RSS comes from ``os.wait4``, so one measurement never inherits
another's peak; the set is generated in a child of its own, because a child's peak RSS includes its parent's at the
fork):

- ``columnar``: ``harness.results.ingest.write_tables`` as a campaign calls it (the vectorised parsers, the threads and
  blockstat tables written run by run with a ParquetWriter);
- ``rows``: the ingest as it was before the columnar path, reproduced here for the before numbers: the per-line
  parsers (one dict per sample row), ``derive_intervals`` row by row, every table's rows concatenated, then
  ``pd.DataFrame(rows).to_parquet``. It needs about 10 GiB per hour of 16-thread samples: measure it at a fraction
  of an hour (``--hours 0.1``) on a shared machine.

Targets (issue 12): one hour of 16 threads plus block stats in <= 30 s and <= 2 GiB peak RSS on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

THREAD_PERIOD_NS, BLOCK_PERIOD_NS = 5_000_000, 10_000_000
T0_NS = 12_222_173_731_519  # a monotonic clock reading from the demo's capture
PID, TARGET, RUN_ID = 24842, "local", "0001-read-cold-r1"
TARGET_SECONDS, TARGET_BYTES = 30.0, 2 << 30


def _tsv(columns: dict[str, Any], delimiter: str) -> bytes:
    """Rows of ``columns`` as the sampler writes them: no header, no quoting."""
    sink = pa.BufferOutputStream()
    options = pacsv.WriteOptions(include_header=False, delimiter=delimiter, quoting_style="none")
    pacsv.write_csv(pa.table(columns), sink, options)
    return sink.getvalue().to_pybytes()


def thread_lines(seconds: float, threads: int, rng: np.random.Generator) -> bytes:
    """llama-server decoding from flash: workers mostly waiting on a futex, some running, some in page-fault I/O."""
    instants = int(seconds * 1e9 // THREAD_PERIOD_NS)
    jitter = rng.integers(0, 400_000, instants)  # the sampler wakes a little late, never early
    t_ns = np.repeat(T0_NS + np.arange(instants, dtype=np.int64) * THREAD_PERIOD_NS + jitter, threads)
    tids = np.tile(np.array([PID] + [PID + 7 + i for i in range(threads - 1)], dtype=np.int64), instants)
    draw = rng.random((instants, threads))
    state_code = np.where(draw < 0.10, 0, np.where(draw < 0.15, 1, 2))  # R, D, S
    state_code[:, 0] = np.where(draw[:, 0] < 0.02, 0, 2)  # the main thread waits in accept/poll
    running, in_io = (state_code == 0).astype(np.int64), (state_code == 1).astype(np.int64)
    majflt = np.cumsum(in_io, axis=0)
    utime, stime = np.cumsum(running, axis=0) // 2, np.cumsum(in_io, axis=0) // 3  # 100 Hz ticks, 5 ms samples
    states = np.array(["R", "D", "S"])[state_code]
    wchan = np.array(["0", "folio_wait_bit_common", "futex_do_wait"])[state_code]
    wchan[:, 0] = np.where(state_code[:, 0] == 0, "0", "inet_csk_accept")
    body = _tsv({"t_ns": t_ns, "tid": tids, "state": states.ravel(), "majflt": majflt.ravel(),
                 "utime": utime.ravel(), "stime": stime.ravel(),
                 "comm": pa.repeat(pa.scalar("llama-server"), instants * threads), "wchan": wchan.ravel()}, "\t")
    end = int(t_ns[-1]) + 1_000_000
    return (f"# harness-sampler v1 mode=threads pid={PID} period_ms=5 clock_ticks_per_s=100 clock=monotonic\n"
            .encode() + body + f"# exit t_ns={end}\n# stop t_ns={end + 5000} samples={instants} overruns=31\n"
            .encode())


def block_lines(seconds: float, rng: np.random.Generator) -> bytes:
    """A virtio disk read at 64 KiB per I/O with queue depth ~2, the 17 counters of kernel 5.5+."""
    samples = int(seconds * 1e9 // BLOCK_PERIOD_NS)
    t_ns = T0_NS - 20_000_000 + np.arange(samples, dtype=np.int64) * BLOCK_PERIOD_NS + rng.integers(0, 200_000, samples)
    reads = rng.poisson(240, samples)

    def counter(start: int, steps: np.ndarray) -> np.ndarray:
        return start + np.cumsum(steps.astype(np.int64))

    columns = {
        "t_ns": t_ns, "read_ios": counter(14004610, reads), "read_merges": counter(408478, reads // 50),
        "read_sectors": counter(2034527154, reads * 128), "read_ticks_ms": counter(5435569, reads // 12),
        "write_ios": counter(99098, rng.poisson(0.2, samples)),
        "write_merges": counter(736108, rng.poisson(0.1, samples)),
        "write_sectors": counter(87687904, rng.poisson(2, samples)),
        "write_ticks_ms": counter(635085, rng.poisson(0.1, samples)),
        "in_flight": rng.integers(0, 4, samples), "io_ticks_ms": counter(1922176, rng.integers(6, 11, samples)),
        "time_in_queue_ms": counter(6237017, rng.integers(12, 24, samples)), "discard_ios": np.full(samples, 501689),
        "discard_merges": np.full(samples, 83), "discard_sectors": np.full(samples, 72335216),
        "discard_ticks_ms": np.full(samples, 129397), "flush_ios": counter(3967, rng.poisson(0.01, samples)),
        "flush_ticks_ms": counter(36965, rng.poisson(0.01, samples)),
    }
    end = int(t_ns[-1]) + 3_000_000
    return (b"# harness-sampler v1 mode=block dev=vda period_ms=10 clock=monotonic\n" + _tsv(columns, " ")
            + f"# stop t_ns={end} samples={samples} overruns=0\n".encode())


def make_set(root: Path, hours: float, threads: int) -> dict[str, Any]:
    """A result set with one finished ``read`` run carrying both collectors' raw files; returns its manifest."""
    rng = np.random.default_rng(12)
    run_dir = root / "raw" / TARGET / RUN_ID
    run_dir.mkdir(parents=True)
    seconds = hours * 3600
    (run_dir / "threads.txt").write_bytes(thread_lines(seconds, threads, rng))
    (run_dir / "blockstat.txt").write_bytes(block_lines(seconds, rng))
    record = {"status": "ok", "spec": {"collectors": [{"kind": "blockstat", "period_ms": 10},
                                                      {"kind": "threads", "period_ms": 5}]},
              "step_started": {"mono_ns": T0_NS}, "step_ended": {"mono_ns": T0_NS + int(seconds * 1e9)}}
    (run_dir / "run.json").write_text(json.dumps(record))
    planned = {"run_id": RUN_ID, "index": 1, "target": TARGET, "step": "read", "cache": "cold", "round": 1,
               "repeat": 1, "params": {}, "status": "ok"}
    manifest = {"runs": [planned], "targets": [], "matrix": {}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def ingest_by_rows(set_path: Path, manifest: dict[str, Any]) -> dict[str, int]:
    """The threads and blockstat tables as ingest wrote them before the columnar path (the before numbers)."""
    import pandas as pd

    from harness.parsers.blockstat import derive_intervals, parse_blockstat
    from harness.parsers.sampler import parse_sampler_threads

    tables: dict[str, list[dict[str, Any]]] = {"threads": [], "blockstat": []}
    for planned in manifest["runs"]:
        raw = set_path / "raw" / planned["target"] / planned["run_id"]
        t0 = json.loads((raw / "run.json").read_text())["step_started"]["mono_ns"]
        threads = parse_sampler_threads((raw / "threads.txt").read_bytes())
        blocks = parse_blockstat((raw / "blockstat.txt").read_bytes())
        for row, interval in zip(blocks[1:], derive_intervals(blocks), strict=True):
            for key in ("dt_s", "read_bytes_per_s", "write_bytes_per_s", "avg_read_io_bytes", "avg_inflight",
                        "util_pct"):
                row[key] = interval[key]
        for name, rows in (("threads", threads), ("blockstat", blocks)):
            for row in rows:
                row["run_id"], row["target"] = planned["run_id"], planned["target"]
                row["t_rel_s"] = (row["t_ns"] - t0) / 1e9
            tables[name].extend(rows)
    out = set_path / "tables"
    out.mkdir(exist_ok=True)
    for name, rows in tables.items():
        pd.DataFrame(rows).to_parquet(out / f"{name}.parquet", index=False)
    return {name: len(rows) for name, rows in tables.items()}


def child(way: str, set_path: Path) -> None:
    """The measured part: imports first (not timed: a campaign has them loaded), then parse + write."""
    from harness.results.ingest import write_tables

    manifest = json.loads((set_path / "manifest.json").read_text())
    started = time.perf_counter()
    counts = write_tables(set_path, manifest) if way == "columnar" else ingest_by_rows(set_path, manifest)
    print(json.dumps({"seconds": time.perf_counter() - started, "counts": counts}))


def measure(way: str, set_path: Path) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", way, str(set_path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{way}: the child failed with exit code {proc.returncode}")
    result = json.loads(out)
    result.update(way=way, child_wall_s=time.perf_counter() - started, peak_rss_bytes=usage.ru_maxrss * 1024,
                  cpu_s=usage.ru_utime + usage.ru_stime)
    return result


def report(result: dict[str, Any], hours: float) -> str:
    gib = result["peak_rss_bytes"] / (1 << 30)
    met = result["seconds"] <= TARGET_SECONDS and result["peak_rss_bytes"] <= TARGET_BYTES
    verdict = "" if hours != 1 else f"  [{'met' if met else 'MISSED'}: <= {TARGET_SECONDS:.0f} s, <= 2 GiB]"
    rows = ", ".join(f"{name} {count:,}" for name, count in sorted(result["counts"].items()))
    return (f"{result['way']:>8}: parse + write {result['seconds']:6.1f} s (child {result['child_wall_s']:.1f} s wall, "
            f"{result['cpu_s']:.1f} s CPU), peak RSS {gib:.2f} GiB; rows: {rows}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0, help="hours of samples (default 1)")
    parser.add_argument("--threads", type=int, default=16, help="threads sampled at each instant (default 16)")
    parser.add_argument("--way", choices=("columnar", "rows", "both"), default="columnar",
                        help="columnar: today's ingest; rows: the per-line ingest before it (needs ~10 GiB per hour)")
    parser.add_argument("--keep", type=Path, help="build the set in this new directory and keep it")
    parser.add_argument("--child", nargs=2, metavar=("WAY", "SET"), help=argparse.SUPPRESS)
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    if args.make:
        make_set(args.make, args.hours, args.threads)
        return
    with tempfile.TemporaryDirectory(prefix="ingest-speed-") as tmp:
        root = args.keep or Path(tmp) / "set"
        started = time.perf_counter()
        # In a child too: a child's peak RSS counts the parent's peak (fork and exec carry it over), so the
        # parent never holds the generated arrays.
        subprocess.run([sys.executable, __file__, "--make", str(root), "--hours", str(args.hours),
                        "--threads", str(args.threads)], check=True)
        sizes = {p.name: p.stat().st_size for p in (root / "raw" / TARGET / RUN_ID).glob("*.txt")}
        print(f"synthetic set: {args.hours:g} h x {args.threads} threads at 5 ms + block stats at 10 ms in "
              f"{time.perf_counter() - started:.1f} s: " + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in sizes.items()))
        for way in (("rows", "columnar") if args.way == "both" else (args.way,)):
            print(report(measure(way, root), args.hours), flush=True)


if __name__ == "__main__":
    main()
