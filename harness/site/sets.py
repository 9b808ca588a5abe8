"""One page per result set: its status, revision and dates, then its report.md rendered to HTML (markdown-it-py,
CommonMark with tables) with the set's figures copied beside the page, so the report's relative image links
(``figures/x.png``) resolve as they do in the set itself."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from markdown_it import MarkdownIt

from harness.results.loader import ResultSet
from harness.site.pages import esc, page

FIGURE_SUFFIXES = (".png", ".svg")
# html off: a report quotes names from the data (cells, commands, errors), which must show as text, never as markup
RENDER = MarkdownIt("commonmark", {"html": False}).enable("table")


def status_of(one: ResultSet) -> str:
    return "complete" if one.complete else "incomplete"


def set_page(one: ResultSet, root: Path) -> Path:
    """Write ``sets/<id>/index.html`` and copy the set's figures next to it; returns the page."""
    folder = root / "sets" / one.set_id
    figures = one.path / "figures"
    if figures.is_dir():
        (folder / "figures").mkdir(parents=True, exist_ok=True)
        for figure in sorted(figures.iterdir()):
            if figure.suffix in FIGURE_SUFFIXES:
                shutil.copyfile(figure, folder / "figures" / figure.name)
    harness: Mapping[str, object] = one.manifest.get("harness") or {}
    status = status_of(one)
    head = (f'<p>status: <span class="{status}">{status}</span>, revision '
            f"<code>{esc(harness.get('git_revision') or 'none')}</code>, started {esc(one.manifest.get('started'))}"
            f", ended {esc(one.manifest.get('ended'))}</p>")
    report = one.path / "report.md"
    if report.exists():
        rendered = RENDER.render(report.read_text(encoding="utf-8"))
        body = f'{head}<div class="report">{rendered}</div>'
    else:
        body = f'{head}<p class="note">no report.md in this set (`harness report {esc(one.set_id)}` draws it)</p>'
    return page(folder / "index.html", root, one.set_id, body)
