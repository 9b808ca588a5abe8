"""``harness results publish`` over 100 sets (target: under 30 s) and its index page in a browser (target: loaded
in under 1 s).

    .venv/bin/python bench/publish_speed.py [TEMPLATE_SET] [--sets 100] [--repeat 3]

TEMPLATE_SET defaults to the real quickstart set of tests/data (tables and manifest only): ``harness report`` draws
its report.md and figures once, then ``--sets`` copies of it (tables, manifest, report.md, figures; an hour apart,
each its own revision) make the results directory. Timed:

1. ``harness results publish OUT --results DIR`` in a fresh process (Python start, the history, every page: index,
   a page per set with its report and figures copied, boards, a trend per board, cell and headline metric), the
   median of ``--repeat`` runs;
2. the index page in Debian's headless chromium: the navigation timing's ``loadEventEnd`` (from the start of the
   navigation to the end of the load event, file://), the median of 5 loads, plus its size and rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / ".venv" / "bin" / "harness"
DEFAULT_TEMPLATE = REPO / "tests" / "data" / "harness" / "quickstart-4950e0"


def drawn_template(template: Path, work: Path) -> Path:
    """The template with its report.md and figures (drawn here when it has none)."""
    if (template / "report.md").exists():
        return template
    copy = work / "template" / template.name
    shutil.copytree(template, copy)
    subprocess.run([str(HARNESS), "report", str(copy)], check=True, capture_output=True, text=True)
    return copy


def build_sets(template: Path, count: int, results: Path) -> None:
    manifest = json.loads((template / "manifest.json").read_text())
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(count):
        when = start + dt.timedelta(hours=i)
        set_id = f"{when:%Y%m%d-%H%M%S}-{manifest['experiment']['name']}-{i:06x}"
        shutil.copytree(template, results / set_id, ignore=shutil.ignore_patterns("raw", "SHA256SUMS"))
        copy = dict(manifest, set_id=set_id, started=when.isoformat(),
                    harness=dict(manifest.get("harness") or {}, git_revision=f"rev{i:04d}"))
        (results / set_id / "manifest.json").write_text(json.dumps(copy))


def index_load_ms(index: Path, loads: int = 5) -> list[float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        times = []
        for _ in range(loads):
            driver.get(index.as_uri())
            entry = driver.execute_script("return performance.getEntriesByType('navigation')[0].toJSON()")
            times.append(float(entry["loadEventEnd"]))
        return times
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("template", nargs="?", type=Path, default=DEFAULT_TEMPLATE)
    parser.add_argument("--sets", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        template = drawn_template(args.template, work)
        figures = sorted(p.name for p in (template / "figures").iterdir())
        print(f"template {template.name}: report.md, {len(figures)} figure file(s)")
        build_sets(template, args.sets, work / "results")
        seconds = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            done = subprocess.run([str(HARNESS), "results", "publish", str(work / "site"), "--results",
                                   str(work / "results")], capture_output=True, text=True)
            seconds.append(time.perf_counter() - t0)
            if done.returncode != 0:
                sys.exit(done.stderr)
        print(done.stdout.strip())
        print(f"publish {args.sets} sets, fresh process: median {statistics.median(seconds):.2f} s "
              f"(runs: {', '.join(f'{s:.2f}' for s in seconds)})")
        index = work / "site" / "index.html"
        loads = index_load_ms(index)
        size = sum(p.stat().st_size for p in (work / "site").rglob("*") if p.is_file())
        print(f"index.html {index.stat().st_size / 1e3:.0f} kB (site {size / 1e6:.1f} MB): load in chromium "
              f"median {statistics.median(loads):.0f} ms (loads: {', '.join(f'{t:.0f}' for t in loads)})")


if __name__ == "__main__":
    main()
