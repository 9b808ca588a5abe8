"""``harness gate SET``: fail CI on a regression, and only on one.

Same session (``--baseline-variant NAME``, the default and robust mode: the rounds interleave, so drift hits
both sides alike): each variant of SET against the baseline variant of the same target, step and test. Same
session across one axis (``--across build [--baseline-value base]``): each cell against the cell equal in
everything but that axis, whose value is the baseline's (default: the experiment's ``baseline:`` value of
it, else its first); the report says per value which regressed ("build strategies regressed decode_tps in 2 of
4 cells"). Across sessions (``--baseline SET2``): the same cell in both sets, flagged as weaker evidence. The rule is
:mod:`harness.analysis.gate` (ratio past the threshold, whole 95 % interval past it, Mann-Whitney p < 0.01).
``--confirm N`` re-runs the suspected cells (and their baseline) N more interleaved rounds on the same target as
a new set (:mod:`harness.campaign.confirm`) and decides on both sets' observations.

Exit codes: 0 pass, 1 regression, 2 bad input (also a set that differs from its SHA256SUMS or whose tables cannot
be read: a damaged set is not a board failure), 3 infrastructure failure (a set incomplete, a gated run not ok, a
board unreachable or a lease lost during --confirm, anything else that kept the gate from deciding).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from harness.boards.lease import DEFAULT_WAIT_S as DEFAULT_LEASE_WAIT_S
from harness.commands.common import BaselineValueOpt, ResultsOpt, TargetsDirOpt, console
from harness.errors import HarnessError, InfrastructureError, UsageError

if TYPE_CHECKING:  # pandas and scipy load when the command runs, not whenever the CLI starts
    from harness.commands.gate_report import GateOutcome

FORMATS = ("table", "json", "md")
STYLES = {"regression": "bold red", "improvement": "green", "insufficient": "yellow"}


def gate(result_set: str = typer.Argument(..., metavar="SET", help="the candidate set: id, unique part, or path"),
         baseline_variant: str = typer.Option(None, "--baseline-variant", metavar="NAME",
                                              help="same-session baseline, e.g. 'read_ahead_kb=8192 threads=1' "
                                                   "(per cache condition) or with its cache condition"),
         across: str = typer.Option(None, "--across", metavar="AXIS",
                                    help="same session: each cell against the one differing only in this matrix "
                                         "axis (e.g. build), at its baseline value"),
         baseline_value: str = BaselineValueOpt,
         baseline: str = typer.Option(None, "--baseline", metavar="SET2",
                                      help="a baseline set of another session (weaker evidence: drift)"),
         metric: list[str] = typer.Option(..., "--metric", metavar="NAME[:PCT]",
                                          help="metric to gate (repeatable), with its own threshold after ':'"),
         max_regression: str = typer.Option(None, "--max-regression", metavar="PCT",
                                            help="threshold of every --metric without its own "
                                                 "(default: 5% for times, 1% for counts)"),
         confirm: int = typer.Option(0, "--confirm", metavar="N", min=0,
                                     help="re-run suspected cells N more interleaved rounds, decide on all data"),
         include_perturbed: bool = typer.Option(False, "--include-perturbed",
                                                help="count runs marked perturbed (another process had the "
                                                     "machine); the output says how many"),
         junit: Path = typer.Option(None, "--junit", metavar="FILE", help="write a JUnit XML report"),
         output: str = typer.Option("table", "--format", help="table, json or md"),
         results: Path = ResultsOpt, targets_dir: Path = TargetsDirOpt,
         lease_wait: float = typer.Option(DEFAULT_LEASE_WAIT_S, "--lease-wait", metavar="SECONDS",
                                          help="with --confirm: how long to wait for a board another campaign holds"),
         ) -> None:
    """Gate a result set against a baseline: exit 0 pass, 1 regression, 2 bad input, 3 infrastructure failure."""
    if output not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {output!r}")
    try:
        from harness.commands.comparison import parse_metric_specs
        from harness.commands.gating import decide_gate

        outcome = decide_gate(result_set, baseline_variant, baseline, parse_metric_specs(metric, max_regression),
                              confirm, results, targets_dir, lease_wait, axis=across, baseline_value=baseline_value,
                              include_perturbed=include_perturbed)
    except UsageError:
        raise
    except InfrastructureError as exc:
        _report_infrastructure(exc, result_set, junit)
        raise
    except HarnessError as exc:  # a campaign or board error that is not the metric
        _report_infrastructure(exc, result_set, junit)
        raise InfrastructureError(str(exc)) from exc
    except Exception as exc:  # an unexpected failure must not exit 1, which reads as a regression
        _report_infrastructure(exc, result_set, junit)
        raise InfrastructureError(f"the gate could not decide: {type(exc).__name__}: {exc}") from exc
    _report(outcome, output, junit)
    if outcome.failed:
        raise typer.Exit(1)


def _report(outcome: GateOutcome, output: str, junit: Path | None) -> None:
    from harness.commands.comparison import rich_table, to_json
    from harness.commands.gate_report import append_step_summary, markdown, table_columns, write_junit

    try:
        if junit is not None:
            write_junit(junit, outcome)
        append_step_summary(markdown(outcome))
    except OSError as exc:  # the decision stands; where it was to be written is wrong
        raise UsageError(f"cannot write the gate's report to {exc.filename}: {exc.strerror}") from None
    if output == "json":
        print(to_json(outcome.document()))
        return
    if output == "md":
        print(markdown(outcome))
        return
    for metric, rows in outcome.by_metric().items():
        first = rows[0]
        better = "higher" if first["higher_is_better"] else "lower"
        title = (f"{metric} ({first['unit']}, {better} is better; regression past {first['limit']:.3g}) vs "
                 f"{outcome.baseline}")
        console.print(rich_table(rows, table_columns(rows), title, STYLES))
    for note in outcome.notes:
        console.print(f"[yellow]{note}[/]", highlight=False)
    for line in outcome.regressed_lines():
        console.print(f"[{'green' if line.startswith('no ') else 'bold red'}]{line}[/]", highlight=False)
    console.print(f"[{'bold red' if outcome.failed else 'bold green'}]{outcome.headline()}[/]", highlight=False)


def _report_infrastructure(exc: BaseException, set_name: str, junit: Path | None) -> None:
    from harness.commands.gate_report import append_step_summary, write_junit_error

    message = f"infrastructure failure (exit 3): {exc}"
    if junit is not None:
        write_junit_error(junit, set_name, message)
    append_step_summary(f"### harness gate: {set_name}\n\n**{message}**\n")


def register(app: typer.Typer) -> None:
    app.command()(gate)
