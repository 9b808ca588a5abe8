"""Draw every registered figure from a result set, timing each and listing any overlapping text: the check
tests/test_figures.py makes on synthetic tables, run on real data (a set of millions of thread samples).

    .venv/bin/python bench/figure_speed.py SET_DIR [OUT_DIR]

Reads the set's tables only; writes the figures to OUT_DIR (default: a temporary directory), never into the set.
Prints one line per figure: seconds to draw and save, and the overlapping text pairs (none expected).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.figures import FIGURES, FigureContext  # noqa: E402
from harness.figures import base as figures_base  # noqa: E402
from harness.figures.report import settings_line  # noqa: E402
from harness.results.loader import load_result_set  # noqa: E402
from tests.test_figures import overlapping_texts  # noqa: E402


def main() -> None:
    rs = load_result_set(Path(sys.argv[1]))
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="figures-"))
    started = time.perf_counter()
    for name in ("runs", "requests", "threads", "blockstat", "tokens", "fio", "bench", "telemetry"):
        rs.table(name)
    print(f"tables loaded in {time.perf_counter() - started:.1f} s; figures in {out}")
    context = FigureContext(rs.table, out, rs.set_id, settings_line(rs.manifest),
                            list(rs.manifest.get("matrix") or {}), rs.manifest.get("baseline"),
                            dict(rs.manifest.get("matrix") or {}))
    for name, figure in FIGURES.items():
        missing = figure.missing(lambda table: not rs.table(table).empty)
        if missing:
            print(f"{name}: not drawn ({missing})")
            continue
        kept: list = []
        started = time.perf_counter()
        with patch.object(figures_base.plt, "close", side_effect=kept.append):
            figure.draw(context)
        seconds = time.perf_counter() - started
        for fig in kept:
            print(f"{name}: {seconds:.1f} s, overlapping text: {overlapping_texts(fig) or 'none'}")
            figures_base.plt.close(fig)


if __name__ == "__main__":
    main()
