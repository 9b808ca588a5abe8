"""``harness results publish OUT/``: the static dashboard of a results directory (harness/site/): plain HTML that
opens from disk, a CI artifact or offline, with no server."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.commands.common import ResultsOpt, console
from harness.commands.results import SetsOpt, err_line
from harness.errors import UsageError


def publish(out: Path = typer.Argument(..., metavar="OUT", help="the site's directory (its pages are replaced)"),
            metric: list[str] = typer.Option(None, "--metric", metavar="NAME",
                                             help="a metric to draw trends of (repeatable); default: the headline "
                                                  "ones any set measured"),
            results: Path = ResultsOpt, set_ids: list[str] = SetsOpt,
            include_incomplete: bool = typer.Option(False, "--include-incomplete", help="count the runs of sets "
                                                    "whose campaign did not complete in the trends too"),
    ) -> None:
    """Write a static site of the result sets: index, one page per set (report and figures), per board, and per
    cell and metric a trend with its change points."""
    from harness.results.history import history_sets, open_history
    from harness.results.loader import find_result_set, is_result_set
    from harness.results.metrics import METRICS
    from harness.site.publish import DEFAULT_METRICS
    from harness.site.publish import publish as write_site

    unknown = [name for name in metric or [] if name not in METRICS]
    if unknown:
        raise UsageError(f"unknown metric {unknown[0]!r}: expected one of {', '.join(METRICS)}")
    # publishing replaces OUT's pages: never the results directory itself, nor inside a set (results/site is fine:
    # a directory without a manifest is no set)
    inside = [p for p in (out.resolve(), *out.resolve().parents) if is_result_set(p)]
    if out.resolve() == results.resolve() or inside:
        raise UsageError(f"{out}: the site must not be the results directory or lie inside a result set"
                         + (f" ({inside[0]})" if inside else ""))
    chosen = [find_result_set(name, results) for name in set_ids] if set_ids else None
    # every set is listed (an incomplete one marked); trends count complete sets only, as `results trend` does
    sets = history_sets(chosen, results, include_incomplete=True, say=err_line)
    if not sets:
        raise UsageError(f"no result set to publish in {results}")
    counted = [one.path for one in sets if one.complete or include_incomplete]
    con = open_history(counted, results, include_incomplete=include_incomplete, say=err_line)
    write_site(sets, con, out, metric or DEFAULT_METRICS, say=lambda line: console.print(line, highlight=False))

