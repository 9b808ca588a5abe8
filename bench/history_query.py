"""``harness results query`` over many result sets: how long one history question takes (target: <= 2 s for 100).

    .venv/bin/python bench/history_query.py TEMPLATE_SET [--sets 100] [--repeat 5]

Builds ``--sets`` sets in a temporary directory by copying TEMPLATE_SET's tables and manifest under new set ids
(one hour apart; an older-schema template is upgraded first with ``harness results upgrade``'s code), then times
"median decode tok/s of one cell on one board over the last 20 sets":

- in-process: ``open_history`` plus the query, as the command runs it (only the views the SQL names) and as the
  Python helper does by default (every table's view);
- the same with the other way to build the views (one ``read_parquet`` per set, unioned by name), to compare;
- end to end: ``harness results query`` in a fresh process (Python start, imports, views, query, the table).
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
sys.path.insert(0, str(REPO))

QUERY = """\
SELECT r.set_id, r.started, median(q.decode_tps) AS decode_tps, count(*) AS requests
FROM requests q JOIN runs r USING (set_id, target, run_id)
WHERE r.variant = '{cell}' AND r.target = '{target}'
GROUP BY ALL ORDER BY r.started DESC LIMIT 20"""


def build_sets(template: Path, count: int, out: Path) -> Path:
    """``count`` copies of the template's tables and manifest in ``out/results``; returns that directory."""
    from harness.results.upgrade import read_manifest, upgrade_set

    upgraded = upgrade_set(template, out / "upgraded")
    source = upgraded or template
    manifest = read_manifest(source)
    results = out / "results"
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(count):
        when = start + dt.timedelta(hours=i)
        set_id = f"{when:%Y%m%d-%H%M%S}-{manifest['experiment']['name']}-{i:06x}"
        shutil.copytree(source / "tables", results / set_id / "tables")
        copy = dict(manifest, set_id=set_id, started=when.isoformat(), harness={"version": "0.1.0",
                                                                                "git_revision": f"rev{i:04d}"})
        (results / set_id / "manifest.json").write_text(json.dumps(copy))
    return results


def per_set_union(results: Path):  # noqa: ANN201 - a DuckDB connection
    """The alternative: each view a UNION ALL BY NAME of one read_parquet per set, the set's columns as constants."""
    import duckdb

    from harness.results.history import history_sets, set_row

    con = duckdb.connect()
    parts: dict[str, list[str]] = {}
    for one in history_sets(results_dir=results):
        row = set_row(one)
        added = (f"'{row['set_id']}' AS set_id, '{row['experiment']}' AS experiment, "
                 f"'{row['harness_rev']}' AS harness_rev, TIMESTAMPTZ '{row['started']}' AS started")
        for path in sorted((one.path / "tables").glob("*.parquet")):
            parts.setdefault(path.stem, []).append(f"SELECT *, {added} FROM read_parquet('{path}')")
    for table, selects in parts.items():
        con.execute(f'CREATE VIEW "{table}" AS ' + " UNION ALL BY NAME ".join(selects))
    return con


def timed(what: str, repeat: int, once) -> float:  # noqa: ANN001
    seconds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = once()
        seconds.append(time.perf_counter() - t0)
    print(f"{what}: median {statistics.median(seconds):.3f} s, min {min(seconds):.3f}, max {max(seconds):.3f} "
          f"({repeat} runs; {result})")
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", type=Path, help="a complete result set to copy")
    parser.add_argument("--sets", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cell", default="read_ahead_kb=128 threads=2 cold")
    parser.add_argument("--target", default="local")
    args = parser.parse_args()
    from harness.results.history import open_history

    query = QUERY.format(cell=args.cell, target=args.target)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        results = build_sets(args.template, args.sets, Path(tmp))
        print(f"built {args.sets} sets from {args.template.name} in {time.perf_counter() - t0:.1f} s")
        def helper(for_query: str | None) -> int:
            return len(open_history(results_dir=results, for_query=for_query, say=lambda _: None).execute(query)
                       .fetchall())

        timed("warm-up (first read of the files)", 1, lambda: helper(None))
        timed("open_history(for_query=SQL) + query: the views it names (what the command does)", args.repeat,
              lambda: helper(query))
        timed("open_history() + query: every table's view", args.repeat, lambda: helper(None))
        timed("per-set views unioned by name + query", args.repeat,
              lambda: len(per_set_union(results).execute(query).fetchall()))
        command = [sys.executable, "-m", "harness", "results", "query", query, "--results", str(results)]

        def cli() -> str:
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"harness results query failed ({done.returncode}): {done.stderr[-800:]}")
            return f"{len(done.stdout.splitlines())} lines printed"

        timed("`harness results query` end to end (new process)", args.repeat, cli)
        timed("`harness results list` of an empty directory (the CLI's own start, for comparison)", args.repeat,
              lambda: subprocess.run([sys.executable, "-m", "harness", "results", "list", "--results",
                                      str(Path(tmp) / "none")], cwd=REPO, capture_output=True, check=True) and "")


if __name__ == "__main__":
    main()
