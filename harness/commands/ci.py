"""``harness ci init``: write the GitHub Actions workflow that measures a board on its self-hosted runner: the
variant gate (one cell of the experiment against its baseline cell) or, ``--gate change``, the change gate (the
pushed revision's engine build against the baseline build, both measured in one session:
:mod:`harness.commands.ci_change`)."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.commands import ci_change
from harness.commands.ci_workflow import DEFAULT_EXPERIMENT, DEFAULT_OUT, render
from harness.commands.common import console
from harness.config.experiment import load_experiment, matrix_cells
from harness.errors import UsageError
from harness.results.variants import variant_label

ci_app = typer.Typer(no_args_is_help=True, help="Continuous integration on a self-hosted runner.")
GATES = ("variants", "change")


def baseline_variant(experiment: Path) -> str:
    """The label of the experiment's baseline cell (its first cell if it names none) without a cache condition,
    so the gate compares cold with cold and warm with warm; the BASELINE_VARIANT variable overrides it."""
    exp = load_experiment(experiment).experiment
    if not exp.matrix:
        raise UsageError(f"{experiment}: no matrix, so no baseline cell for the gate to compare with; give "
                         "--baseline-variant or an experiment with a matrix")
    return variant_label(exp.baseline or matrix_cells(exp.matrix)[0], list(exp.matrix))


def change_builds(experiment: Path, candidate: str) -> tuple[str, str]:
    """The experiment's baseline build (the first value of its ``build`` axis) and the candidate build, which
    must be another value of it: the change gate measures both in one session."""
    exp = load_experiment(experiment).experiment
    values = [str(v) for v in (exp.matrix or {}).get("build", [])]
    if len(values) < 2:
        raise UsageError(f"{experiment}: the change gate needs a matrix axis `build` with the baseline build first "
                         f"and the candidate build (has: {', '.join(values) or 'none'})")
    if candidate not in values[1:]:
        raise UsageError(f"--candidate-build {candidate}: not a build of {experiment} after its baseline "
                         f"{values[0]} (builds: {', '.join(values)})")
    return values[0], candidate


def _inside(path: str, option: str, kind: str) -> str:
    """A directory inside the repository, as the workflow names it (relative, POSIX)."""
    where = Path(path)
    if where.is_absolute() or ".." in where.parts:
        raise UsageError(f"{option} {path}: give a path inside the repository (the runner checks it out)")
    if not where.is_dir():
        raise UsageError(f"{option} {path}: no such directory ({kind})")
    return where.as_posix()


@ci_app.command("init")
def init(board: str = typer.Option(None, "--board", metavar="NAME",
                                   help="the target to measure (targets/NAME.yaml); default: the BOARD variable"),
         experiment: Path = typer.Option(Path(DEFAULT_EXPERIMENT), "--experiment", metavar="FILE",
                                         help="the experiment the workflow runs (a path inside the repository)"),
         labels: str = typer.Option(None, "--labels", metavar="L1,L2,...",
                                    help="the runner's labels (default: self-hosted, plus the board's name)"),
         baseline: str = typer.Option(None, "--baseline-variant", metavar="VARIANT",
                                      help="the gate's baseline cell (default: the experiment's baseline, cold)"),
         gate: str = typer.Option("variants", "--gate", metavar="KIND",
                                  help="variants: each cell against the baseline cell; change: the pushed "
                                       "revision's engine build against the baseline build (docs/ci.md)"),
         engine_dir: str = typer.Option(None, "--engine-dir", metavar="DIR",
                                        help="--gate change: the engine's source tree in the repository (a "
                                             "submodule: a pinned upstream or the lab's fork; docs/ci.md)"),
         patches: str = typer.Option("", "--patches", metavar="DIR",
                                     help="--gate change: a patch series (*.patch, name order) applied to it"),
         candidate: str = typer.Option("candidate", "--candidate-build", metavar="NAME",
                                       help="--gate change: the build the pushed revision's engine replaces"),
         out: Path = typer.Option(None, "--out",
                                  help=f"where to write the workflow (default {DEFAULT_OUT}; --gate change: "
                                       f"{ci_change.DEFAULT_OUT})"),
         force: bool = typer.Option(False, "--force", help="replace a different workflow already there"),
         ) -> None:
    """Write .github/workflows/regression.yml for a board (see docs/guide.md, "CI on a self-hosted runner"), or
    with --gate change .github/workflows/engine-change.yml (docs/ci.md)."""
    if gate not in GATES:
        raise UsageError(f"--gate: expected one of {', '.join(GATES)}, got {gate!r}")
    if experiment.is_absolute():
        raise UsageError(f"--experiment {experiment}: give a path inside the repository (the runner checks it out)")
    if not experiment.exists():
        raise UsageError(f"--experiment {experiment}: no such file")
    listed = [label.strip() for label in labels.split(",") if label.strip()] if labels else None
    if listed is None and board:
        listed = ["self-hosted", board]
    said = ""
    if gate == "change":
        if baseline is not None:
            raise UsageError("--baseline-variant: the change gate compares builds (--candidate-build), not cells")
        if engine_dir is None:
            raise UsageError("--gate change needs --engine-dir DIR: the engine's source tree in the repository")
        base_build, cand_build = change_builds(experiment, candidate)
        text = ci_change.render(board=board, labels=listed, experiment=experiment.as_posix(),
                                engine_dir=_inside(engine_dir, "--engine-dir", "the engine's source"),
                                patches=_inside(patches, "--patches", "the patch series") if patches else "",
                                baseline_build=base_build, candidate_build=cand_build)
        out, said = out or Path(ci_change.DEFAULT_OUT), f", build {cand_build} gated against build {base_build}"
    else:
        text = render(board=board, labels=listed, experiment=experiment.as_posix(),
                      baseline=baseline if baseline is not None else baseline_variant(experiment))
        out = out or Path(DEFAULT_OUT)
    if out.exists() and out.read_text() != text and not force:
        raise UsageError(f"{out} exists and differs; --force replaces it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    console.print(f"wrote {out}: board {board or '(the BOARD variable)'}, runner labels "
                  f"{listed or ['self-hosted']}, {experiment}{said}")


def register(app: typer.Typer) -> None:
    app.add_typer(ci_app, name="ci")
