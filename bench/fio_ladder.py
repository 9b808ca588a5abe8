"""The fio queue-depth ladder on this machine's disk, through the harness: which depth is faster on a shared
two-core machine is a measurement, not a test (tests/test_e2e.py checks rows and queue depths only).

    .venv/bin/python bench/fio_ladder.py [--rounds 3] [--size 256M] [--runtime 3]

Prints mean MB/s and IOPS per job and cache condition over the rounds, from the result set's fio table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EXPERIMENT = """\
name: fio-ladder
files: {{data: {{create: {size}}}}}
cache: both
rounds: {rounds}
steps:
  - fio: {{file: data, jobs: [randread-64k-qd1, randread-64k-qd2, randread-64k-qd4, randread-128k-qd8,
                             read-1m-seq], runtime_s: {runtime}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="256M")
    parser.add_argument("--runtime", type=int, default=3)
    args = parser.parse_args()
    from harness.results.loader import load_result_set

    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "ladder.yaml"
        exp.write_text(EXPERIMENT.format(size=args.size, rounds=args.rounds, runtime=args.runtime))
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(exp), "--target", "local", "--results",
                               f"{tmp}/results"], cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"the campaign failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
        (path,) = list(Path(tmp, "results").iterdir())
        rs = load_result_set(path)
        fio = rs.table("fio").merge(rs.table("runs")[["run_id", "cache"]], on="run_id")
        fio["MB/s"] = fio["read_bw_bytes_per_s"] / 1e6
        summary = fio.groupby(["cache", "job_name"])[["MB/s", "read_iops"]].mean().round(1)
        print(summary.to_string())


if __name__ == "__main__":
    main()
