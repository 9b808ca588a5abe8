"""``harness ci init``: write the GitHub Actions workflow that measures a board on its self-hosted runner."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.commands.ci_workflow import DEFAULT_EXPERIMENT, DEFAULT_OUT, render
from harness.commands.common import console
from harness.config.experiment import load_experiment, matrix_cells
from harness.errors import UsageError
from harness.results.variants import variant_label

ci_app = typer.Typer(no_args_is_help=True, help="Continuous integration on a self-hosted runner.")


def baseline_variant(experiment: Path) -> str:
    """The label of the experiment's baseline cell (its first cell if it names none) without a cache condition,
    so the gate compares cold with cold and warm with warm; the BASELINE_VARIANT variable overrides it."""
    exp = load_experiment(experiment).experiment
    if not exp.matrix:
        raise UsageError(f"{experiment}: no matrix, so no baseline cell for the gate to compare with; give "
                         "--baseline-variant or an experiment with a matrix")
    return variant_label(exp.baseline or matrix_cells(exp.matrix)[0], list(exp.matrix))


@ci_app.command("init")
def init(board: str = typer.Option(None, "--board", metavar="NAME",
                                   help="the target to measure (targets/NAME.yaml); default: the BOARD variable"),
         experiment: Path = typer.Option(Path(DEFAULT_EXPERIMENT), "--experiment", metavar="FILE",
                                         help="the experiment the workflow runs (a path inside the repository)"),
         labels: str = typer.Option(None, "--labels", metavar="L1,L2,...",
                                    help="the runner's labels (default: self-hosted, plus the board's name)"),
         baseline: str = typer.Option(None, "--baseline-variant", metavar="VARIANT",
                                      help="the gate's baseline cell (default: the experiment's baseline, cold)"),
         out: Path = typer.Option(Path(DEFAULT_OUT), "--out", help="where to write the workflow"),
         force: bool = typer.Option(False, "--force", help="replace a different workflow already there"),
         ) -> None:
    """Write .github/workflows/regression.yml for a board (see docs/guide.md, "CI on a self-hosted runner")."""
    if experiment.is_absolute():
        raise UsageError(f"--experiment {experiment}: give a path inside the repository (the runner checks it out)")
    if not experiment.exists():
        raise UsageError(f"--experiment {experiment}: no such file")
    listed = [label.strip() for label in labels.split(",") if label.strip()] if labels else None
    if listed is None and board:
        listed = ["self-hosted", board]
    text = render(board=board, labels=listed, experiment=experiment.as_posix(),
                  baseline=baseline if baseline is not None else baseline_variant(experiment))
    if out.exists() and out.read_text() != text and not force:
        raise UsageError(f"{out} exists and differs; --force replaces it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    console.print(f"wrote {out}: board {board or '(the BOARD variable)'}, runner labels "
                  f"{listed or ['self-hosted']}, {experiment}")


def register(app: typer.Typer) -> None:
    app.add_typer(ci_app, name="ci")
