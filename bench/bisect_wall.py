"""The wall time of ``harness bisect`` on the test repository (tests/test_bisect.py): 8 revisions of tinystream,
the sleep per token added at r5, 6 interleaved rounds per build (one stalled run still leaves p < 0.01), on a
private local target.

Prints the wall time of the whole bisect, its sessions (campaigns: a midpoint build + 18 runs) and the answer line.
The first session also builds good and bad; later ones find them in the build cache.

    .venv/bin/python bench/bisect_wall.py [--rounds N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    from tests.helpers import private_base, private_targets_dir
    from tests.test_bisect import SLOW_AT, engine_repository, experiment

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bisect-bench-", dir=private_base()))
    try:
        commits = engine_repository(work / "engine")
        exp = experiment(work, work / "engine", commits[0], rounds=args.rounds)
        argv = [sys.executable, "-m", "harness", "bisect", str(exp), "--good", commits[0], "--bad", commits[7],
                "--results", str(work / "results"), "--targets-dir", str(private_targets_dir())]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
        wall = time.monotonic() - started
        print(done.stdout, end="")
        if done.returncode != 0:
            print(done.stderr, end="", file=sys.stderr)
            return done.returncode
        sets = sorted((work / "results").iterdir())
        print(f"bisect wall time: {wall:.1f} s for {len(sets)} session(s), rounds {args.rounds}, "
              f"first bad r{SLOW_AT} of 8 revisions")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
