"""The replay program's reads against fio's on the same cold file, side by side in one run (issue 24: replay
``pread`` or ``io_uring`` at QD 4, 64 KiB reaches at least 90 % of fio's throughput).

    .venv/bin/python bench/replay_vs_fio.py [--size 2560M] [--dir /var/tmp] [--rounds 2] [--keep]

One incompressible file of SIZE (``python3 -m runner mkfile``: synced, on the real disk) laid out as a MoE's
experts: 8 layers x 3 tensors (up, gate, down) x E experts of 384 KiB, E as many as fit. The trace reads every
expert slice exactly once in a random order (per layer a seeded permutation of the experts, 8 per token), so no
read finds a page the run itself cached and the replay reads as much of the file as fio does. Per round, each
measurement after the file's pages are dropped (runner/native/bin/cachectl drop, posix_fadvise DONTNEED):
- replay ``pread``: 4 threads, 64 KiB blocks, ``--fadv-random``, compute none;
- replay ``io_uring``: queue depth 4, 64 KiB blocks, ``--fadv-random``, compute none;
- fio: randread, bs 64k, iodepth 4, ioengine io_uring, buffered (direct=0, as the replay reads), readonly,
  fadvise_hint random (fio's default for random I/O: the replay's --fadv-random), io_size = the bytes the replay
  read; and the same with ioengine psync and 4 jobs (the pread side's shape: four blocking readers), for context.
MB/s is the device's bytes over the wall time (the replay's summary ``dev_mb_s``; fio's bw). Printed: per
measurement the median over rounds, and replay MB/s / fio MB/s (target >= 0.90).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.traces.model import Trace, write_trace  # noqa: E402
from harness.units import parse_size  # noqa: E402
from runner.probes.blockdev import block_device_of  # noqa: E402

NATIVE = REPO / "runner" / "native" / "bin"
KINDS = ("up", "gate", "down")
SLICE = 384 << 10
LAYERS = 8
USED = 8
BS = 64 << 10


def write_layout(path: Path, slices: list[tuple[int, str, int, int]], n_layer: int, n_expert: int) -> None:
    """The replay's layout file: per (layer, kind) the tensor's offset and one expert's slice bytes."""
    lines = [f"# harness-replay-layout v1 n_layer={n_layer} n_expert={n_expert}"]
    lines += [f"{layer} {kind} {offset} {size}" for layer, kind, offset, size in slices]
    path.write_text("\n".join(lines) + "\n")


def drop(path: Path) -> None:
    subprocess.run([str(NATIVE / "cachectl"), "drop", str(path)], check=True)


def replay(model: Path, layout: Path, trace: Path, out: Path, strategy: str, *extra: str,
           compute: str = "none") -> dict[str, float]:
    """One replay run from a cold file: its summary, plus the wall time around the process."""
    drop(model)
    dev = block_device_of(str(model))
    cmd = [str(NATIVE / "replay"), "--model", str(model), "--layout", str(layout), "--trace", str(trace),
           "--out", str(out), "--strategy", strategy, "--compute", compute, *extra]
    if dev:
        cmd += ["--blockstat", f"/sys/block/{dev}/stat"]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"replay {strategy} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    summary = json.loads(out.read_text().strip().splitlines()[-1])["summary"]
    return {**summary, "wall_s": wall}


def fio(model: Path, io_bytes: int, engine: str, iodepth: int, jobs: int) -> float:
    """fio's read MB/s on the cold file (all jobs together)."""
    drop(model)
    cmd = ["fio", "--name=ref", f"--filename={model}", "--readonly", "--rw=randread", f"--bs={BS}",
           f"--ioengine={engine}", f"--iodepth={iodepth}", f"--numjobs={jobs}", "--direct=0", "--group_reporting",
           f"--io_size={io_bytes // jobs}", "--output-format=json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout[done.stdout.index("{"):])
    return float(report["jobs"][0]["read"]["bw_bytes"]) / 1e6


def make_inputs(tmp: Path, size: int, seed: int) -> tuple[Path, Path, Path, int]:
    """The file, its layout and the once-each trace; returns the bytes the trace reads."""
    n_expert = size // (LAYERS * len(KINDS) * SLICE)
    n_expert -= n_expert % USED
    model = tmp / "experts.bin"
    made = subprocess.run([sys.executable, "-m", "runner", "mkfile", str(model),
                           str(LAYERS * len(KINDS) * n_expert * SLICE)], cwd=REPO, capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(f"mkfile failed: {made.stderr.strip()}")
    slices, offset = [], 0
    for layer in range(LAYERS):
        for kind in KINDS:
            slices.append((layer, kind, offset, SLICE))
            offset += n_expert * SLICE
    layout = tmp / "layout.txt"
    write_layout(layout, slices, LAYERS, n_expert)
    rng = np.random.default_rng(seed)
    tokens = n_expert // USED
    experts = np.stack([rng.permutation(n_expert).reshape(tokens, USED) for _ in range(LAYERS)], axis=1)
    trace = tmp / "trace.txt"
    write_trace(Trace(LAYERS, n_expert, USED, experts.astype(np.int32), f"bench:once-each:seed={seed}"), trace)
    return model, layout, trace, tokens * LAYERS * USED * len(KINDS) * SLICE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="2560M", help="the file (>= 2 GiB: beyond what a board caches)")
    parser.add_argument("--dir", default="/var/tmp", help="where the file goes (the real disk, not tmpfs)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the file (and the replay outputs) in --dir")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="replay-vs-fio-", dir=args.dir))
    try:
        model, layout, trace, io_bytes = make_inputs(tmp, parse_size(args.size), seed=24)
        print(f"file {model.stat().st_size / 2**30:.2f} GiB on {block_device_of(str(model))}, "
              f"trace reads {io_bytes / 2**30:.2f} GiB once each, {args.rounds} rounds")
        results: dict[str, list[float]] = {}
        for _ in range(args.rounds):  # interleaved: each round measures every side once
            for name, value in measure_round(model, layout, trace, tmp, io_bytes).items():
                results.setdefault(name, []).append(value)
        report(results)
    finally:
        if not args.keep:
            for path in tmp.iterdir():
                path.unlink()
            tmp.rmdir()


def measure_round(model: Path, layout: Path, trace: Path, tmp: Path, io_bytes: int) -> dict[str, float]:
    common = ("--bs", str(BS), "--fadv-random")
    pread = replay(model, layout, trace, tmp / "pread.jsonl", "pread", "--threads", "4", *common)
    uring = replay(model, layout, trace, tmp / "uring.jsonl", "io_uring", "--qd", "4", *common)
    return {"replay pread t4": float(pread["dev_mb_s"]), "replay io_uring qd4": float(uring["dev_mb_s"]),
            "fio io_uring qd4": fio(model, io_bytes, "io_uring", 4, 1),
            "fio psync 4 jobs": fio(model, io_bytes, "psync", 1, 4)}


def report(results: dict[str, list[float]]) -> None:
    med = {name: median(values) for name, values in results.items()}
    for name, values in results.items():
        print(f"{name:22s} {med[name]:8.1f} MB/s  (rounds: {', '.join(f'{v:.1f}' for v in values)})")
    ref = med["fio io_uring qd4"]
    for name in ("replay pread t4", "replay io_uring qd4"):
        print(f"{name} / fio io_uring qd4 = {med[name] / ref:.3f}  (target >= 0.90)")
    print(f"replay pread t4 / fio psync 4 jobs = {med['replay pread t4'] / med['fio psync 4 jobs']:.3f}")
    print(json.dumps({"median_mb_s": med, "rounds": results}))


if __name__ == "__main__":
    main()
