"""The whole site of ``harness results publish OUT/``: the index (every set, with its status and revision), a page
per set (its report and figures), per board a page (its sets and trends), and a trend page per board, cell and
metric. Reads what the earlier stages wrote (tables through the history, report.md and figures/ of each set) and
writes only under OUT."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.results.history import cells, columns_of, set_row, views
from harness.results.loader import ResultSet
from harness.results.metrics import METRICS, Metric
from harness.site.pages import Cell, esc, link, number, page, slug, table, text
from harness.site.sets import set_page, status_of
from harness.site.trends import TREND_COLUMNS, Trend, trend_page, trend_rows

# the metrics a site draws trends of by default: what a lab reads first (each only where some set measured it)
DEFAULT_METRICS = ("decode_tps", "prefill_tps", "ttft_ms", "bytes_per_token", "bench_tps", "fio_read_mbps",
                   "read_mbps")
SET_COLUMNS = ["set", "status", "experiment", "revision", "started", "ended", "boards", "runs", "ok runs"]

Say = Callable[[str], None]


@dataclass
class Site:
    """What was published, for the command's summary and the tests."""

    root: Path
    sets: list[ResultSet]
    trends: list[Trend] = field(default_factory=list)
    boards: list[str] = field(default_factory=list)

    @property
    def index(self) -> Path:
        return self.root / "index.html"


def measured(con: Any, metric: Metric) -> bool:
    """Whether some set's table holds what ``metric`` is computed from."""
    table = metric.table.name
    if table not in views(con):
        return False
    have = set(columns_of(con, table))
    return all(c in have for c in (*metric.needs, *([metric.test] if metric.test else [])))


def materialize(con: Any, tables: set[str]) -> None:
    """Read each of ``tables`` once into memory under its view's name: a view reads every set's parquet file at
    each query, and a site asks one per board, cell and metric (about 0.4 s each over 100 sets here; the tables
    trends read are the small per-request and per-run ones)."""
    for name in sorted(tables & set(views(con))):
        quoted, copy = '"' + name.replace('"', '""') + '"', '"_site_' + name.replace('"', '""') + '"'
        con.execute(f"CREATE TABLE {copy} AS SELECT * FROM {quoted}")
        con.execute(f"DROP VIEW {quoted}")
        con.execute(f"ALTER TABLE {copy} RENAME TO {quoted}")


def boards_of(con: Any) -> list[str]:
    if "runs" not in views(con):
        return []
    return [name for (name,) in con.execute("SELECT DISTINCT target FROM runs ORDER BY target").fetchall()]


def set_rows(sets: Sequence[ResultSet], up: str) -> list[list[Cell]]:
    rows = []
    for one in sets:
        row = set_row(one)
        ok = sum(1 for r in one.manifest.get("runs", []) if r.get("status") == "ok")
        status = status_of(one)
        rows.append([Cell(link(f"{up}sets/{one.set_id}/index.html", one.set_id)),
                     Cell(f'<span class="{status}">{status}</span>'), text(row["experiment"]),
                     text(row["harness_rev"] or ""), text(row["started"]), text(row["ended"]),
                     text(", ".join(row["targets"])), number(row["runs"], "{:d}"), number(ok, "{:d}")])
    return rows


def publish(sets: Sequence[ResultSet], con: Any, out: Path, metrics: Sequence[str] = DEFAULT_METRICS,
            say: Say = print) -> Site:
    """Write the site into ``out`` (emptied first of a previous site's pages: a set gone from the results must not
    stay on it). ``con``: the history of ``sets`` (harness.results.history.open_history)."""
    for old in ("index.html", "sets", "boards", "trends"):
        target = out / old
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    out.mkdir(parents=True, exist_ok=True)
    ordered = sorted(sets, key=lambda one: (str(one.manifest.get("started") or ""), one.set_id))
    site = Site(out, ordered, boards=boards_of(con))
    for one in ordered:
        set_page(one, out)
    chosen = [METRICS[name] for name in metrics if measured(con, METRICS[name])]
    materialize(con, {"runs", *(metric.table.name for metric in chosen)})
    for board in site.boards:
        for cell in cells(con, board):
            for metric in chosen:
                trend = trend_page(con, out, metric, cell, board)
                if trend is not None:
                    site.trends.append(trend)
    for board in site.boards:
        board_page(site, board, con)
    boards_index(site)
    page(out / "trends" / "index.html", out, "trends",
         f"<p>{len(site.trends)} trend(s): the median of every set per board, cell and metric</p>"
         + table("trends", TREND_COLUMNS, trend_rows(site.trends, "../")))
    index_page(site)
    say(f"published {len(ordered)} set(s), {len(site.boards)} board(s), {len(site.trends)} trend(s): {site.index}")
    return site


def index_page(site: Site) -> Path:
    incomplete = sum(1 for one in site.sets if not one.complete)
    changes = sum(len(t.changes) for t in site.trends)
    body = (f"<p>{len(site.sets)} set(s), {incomplete} incomplete; {len(site.boards)} board(s): "
            + ", ".join(link(f"boards/{slug(b)}.html", b) for b in site.boards)
            + f"; {link('trends/index.html', f'{len(site.trends)} trend(s)')} with {changes} change point(s)</p>"
            + table("sets", SET_COLUMNS, set_rows(site.sets, "")))
    return page(site.index, site.root, "result sets", body)


def board_page(site: Site, board: str, con: Any) -> Path:
    mine = [one for one in site.sets if board in set_row(one)["targets"]]
    trends = [t for t in site.trends if t.target == board]
    body = (f"<p>board <code>{esc(board)}</code>: {len(mine)} set(s), {len(cells(con, board))} cell(s), "
            f"{len(trends)} trend(s)</p><h2>trends</h2>" + table("trends", TREND_COLUMNS, trend_rows(trends, "../"))
            + "<h2>sets</h2>" + table("sets", SET_COLUMNS, set_rows(mine, "../")))
    return page(site.root / "boards" / f"{slug(board)}.html", site.root, f"board {board}", body)


def boards_index(site: Site) -> Path:
    rows = [[Cell(link(f"{slug(b)}.html", b)),
             number(sum(1 for one in site.sets if b in set_row(one)["targets"]), "{:d}"),
             number(sum(1 for t in site.trends if t.target == b), "{:d}"),
             number(sum(len(t.changes) for t in site.trends if t.target == b), "{:d}")] for b in site.boards]
    return page(site.root / "boards" / "index.html", site.root, "boards",
                table("boards", ["board", "sets", "trends", "change points"], rows))
