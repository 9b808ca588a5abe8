"""``harness bisect EXP --good REV --bad REV``: the first revision of a build's git source that made it slower.

Each step builds the midpoint and measures it interleaved against the good and the bad build in one campaign
(:mod:`harness.campaign.bisect`); the gate's statistics decide which end it is like
(:mod:`harness.analysis.bisect`). The answer is one line with the gate's ratio, interval and p-value; when good
and bad do not differ at the threshold the first step says so in one line and the search stops. Every step's
result set is kept and listed.

Exit codes: 0 the first bad revision found, 1 good and bad do not differ (nothing found), 2 bad input, 3 a step
could not be measured (a board, a build, a run not ok).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from harness.boards.lease import DEFAULT_WAIT_S as DEFAULT_LEASE_WAIT_S
from harness.commands.common import ResultsOpt, TargetsDirOpt, console

if TYPE_CHECKING:  # scipy loads when the command runs, not whenever the CLI starts
    from harness.analysis.gate import GateDecision


def bisect(experiment: Path = typer.Argument(..., help="experiment YAML with the build to bisect under builds:"),
           good: str = typer.Option(..., "--good", metavar="REV", help="a revision known to be good"),
           bad: str = typer.Option(..., "--bad", metavar="REV", help="a later revision known to be bad"),
           build: str = typer.Option(None, "--build", metavar="NAME",
                                     help="the build of builds: whose source to bisect (default: the baseline)"),
           metric: str = typer.Option("decode_tps", "--metric", metavar="NAME", help="the metric that regressed"),
           threshold_pct: str = typer.Option(None, "--threshold-pct", metavar="PCT",
                                             help="smallest change that counts (default: 5% for times, 1% counts)"),
           repo: Path = typer.Option(None, "--repo", metavar="DIR",
                                     help="a local clone to list revisions in (default: the build's git source)"),
           target: list[str] = typer.Option(None, "--target", "-t", help="target name or tag:X (repeatable)"),
           results: Path = ResultsOpt, targets_dir: Path = TargetsDirOpt,
           lease_wait: float = typer.Option(DEFAULT_LEASE_WAIT_S, "--lease-wait", metavar="SECONDS",
                                            help="how long to wait for a board another campaign holds"),
           ) -> None:
    """Find the first bad revision between --good and --bad: exit 0 found, 1 no difference, 2 bad input, 3 not
    measured."""
    from harness.analysis.bisect import bisect as search
    from harness.boards.inventory import load_targets, select_targets
    from harness.campaign import bisect as steps
    from harness.campaign.resolve import load_resolved
    from harness.commands.comparison import DEFAULT_THRESHOLDS, metric_by_name, parse_percent

    chosen_metric = metric_by_name(metric)
    threshold = (parse_percent(threshold_pct, "--threshold-pct") if threshold_pct is not None
                 else DEFAULT_THRESHOLDS[chosen_metric.kind])
    loaded = load_resolved(experiment)
    name, spec = steps.build_to_bisect(loaded, build)
    local, url = steps.repository_of(spec, name, repo)
    revisions = steps.revisions(local, good, bad)
    chosen = select_targets(target or loaded.experiment.targets, load_targets(targets_dir), source=str(experiment))
    rounds = len(revisions) - 1
    _say(f"bisect {name} ({spec.engine}) in {local}: {rounds} revision(s) after good "
         f"{steps.describe(local, revisions[0])}; at most {max(0, math.ceil(math.log2(max(rounds, 1))))} "
         f"midpoint build(s); {chosen_metric.name}, threshold {threshold * 100:g} %")

    def said(path: Path) -> None:
        _say(f"  session {len(sessions.sets)}: {path}")

    sessions = steps.Sessions(loaded, spec, url, revisions[0], revisions[-1], chosen_metric, results, chosen,
                              lease_wait_s=lease_wait, on_session=said)
    try:
        outcome = search(revisions, sessions, higher_is_better=chosen_metric.higher_is_better, threshold=threshold)
    except BaseException:
        if sessions.sets:  # kept: what was measured before the step that failed
            _say("sets: " + ", ".join(str(path) for path in sessions.sets))
        raise
    for index, step in enumerate(outcome.steps, start=1):
        if step.revision is None or step.mid_vs_good is None or step.mid_vs_bad is None:
            continue
        how = "" if step.clear else ", unclear: nearer median"
        _say(f"step {index}: {steps.describe(local, step.revision)} is like {step.side}{how}: "
             f"vs good {_short(step.mid_vs_good)}, vs bad {_short(step.mid_vs_bad)}")
    if sessions.focus is not None:
        _say(f"cell: {steps.focus_label(sessions.focus)}")
    _say("sets: " + ", ".join(str(path) for path in sessions.sets))
    _say(outcome.line(chosen_metric.name, lambda rev: steps.describe(local, rev)))
    if outcome.kind != "found":
        raise typer.Exit(1)


def _say(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True, markup=False)  # one line each, never wrapped


def _short(decision: GateDecision) -> str:
    est = decision.estimate
    if est is None:
        return decision.verdict
    return f"{decision.verdict} x{est.ratio:.3f} [{est.low:.3f}, {est.high:.3f}] p = {est.p:.2g}"


def register(app: typer.Typer) -> None:
    app.command()(bisect)
