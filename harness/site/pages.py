"""The page shell and tables of the static site: every page is one self-contained HTML file (CSS and script
inlined, links relative), so it opens from disk, from a CI artifact and offline alike."""

from __future__ import annotations

import hashlib
import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

SITE_TITLE = "harness results"


@cache
def asset(name: str) -> str:
    """A file of harness/site/assets, as text (read once per process)."""
    return (files("harness.site") / "assets" / name).read_text(encoding="utf-8")


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def slug(text: str) -> str:
    """A file name for a label (cells have spaces and '='): readable, and distinct labels stay distinct."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "_"
    # hashlib, not hash(): Python's hash of a str changes with every process, and links must not
    return cleaned if cleaned == text else f"{cleaned}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


@dataclass(frozen=True)
class Cell:
    """A table cell: ``html`` is already markup (a link); ``number`` right-aligns it."""

    html: str
    number: bool = False


def text(value: object) -> Cell:
    return Cell(esc(value))


def number(value: float | int | None, fmt: str = "{:.4g}") -> Cell:
    """A number as shown (null and NaN as an empty cell: no measurement is not a zero)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Cell("", True)
    return Cell(esc(fmt.format(value)), True)


def table(table_id: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]], caption: str = "") -> str:
    """A filterable, sortable table (the page's script adds the filter box and the header clicks)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(f'<td class="num">{c.html}</td>' if c.number else f"<td>{c.html}</td>"
                                      for c in row) + "</tr>" for row in rows)
    shown = f'<p class="note" id="{esc(table_id)}-shown">{len(rows)} of {len(rows)}</p>'
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (f'<table id="{esc(table_id)}" data-filterable>{cap}<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody></table>\n{shown}")


def page(out: Path, root: Path, title: str, body: str) -> Path:
    """Write one page at ``out``; the navigation links are relative to ``root`` (the site's top)."""
    up = Path(*([".."] * (len(out.relative_to(root).parts) - 1))) if out.parent != root else Path(".")
    nav = " ".join(link((up / href).as_posix(), name) for name, href in
                   (("sets", "index.html"), ("boards", "boards/index.html"), ("trends", "trends/index.html")))
    document = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<title>{esc(title)} · {SITE_TITLE}</title><link rel=\"icon\" href=\"data:,\">"
                f"<style>{asset('site.css')}</style></head>\n"
                f"<body><nav><strong>{SITE_TITLE}</strong> {nav}</nav>\n<h1>{esc(title)}</h1>\n{body}\n"
                f"<script>{asset('site.js')}</script></body></html>\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(document, encoding="utf-8")
    return out
