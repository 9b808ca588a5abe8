"""How long parsing a 10 000-token BigMoeOnEdge log takes (harness/parsers/bmoe.py). Target: <= 1 s.

The log is generated: one real BMOE_LOAD + BMOE_PROGRESS pair (tests/data/bmoe/synth_cache16.log) repeated with
the token index counting up, then that file's end-of-run lines. Reports the best and median of a few parses.

    .venv/bin/python bench/bmoe_parse_speed.py [--tokens 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.parsers.bmoe import parse_bmoe_log  # noqa: E402

SAMPLE = REPO / "tests" / "data" / "bmoe" / "synth_cache16.log"
TARGET_S = 1.0


def make_log(tokens: int) -> bytes:
    lines = SAMPLE.read_text().splitlines()
    load = next(line for line in lines if line.startswith("BMOE_LOAD"))
    progress = next(line for line in lines if line.startswith("BMOE_PROGRESS"))
    perf = lines[lines.index("=== perf ==="):]
    body = []
    for step in range(1, tokens + 1):
        body.append(load)
        body.append(re.sub(r'"step":\d+,"steps":\d+', f'"step":{step},"steps":{tokens}', progress))
    perf[1] = re.sub(r"generation: \d+", f"generation: {tokens}", perf[1])
    return ("\n".join([*body, "=== answer ===", "The cat", *perf]) + "\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = make_log(args.tokens)
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        tables = parse_bmoe_log(data)
        times.append(time.perf_counter() - started)
    assert len(tables["tokens"]) == args.tokens and tables["summary"][0]["tokens"] == args.tokens
    best, median = min(times), statistics.median(times)
    verdict = "ok" if median <= TARGET_S else "OVER TARGET"
    print(f"parse_bmoe_log: {args.tokens} tokens ({len(data) / 1e6:.1f} MB): best {best:.3f} s, median {median:.3f} s "
          f"over {args.repeat} parses (target <= {TARGET_S:.0f} s): {verdict}")


if __name__ == "__main__":
    main()
