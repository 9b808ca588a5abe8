"""``harness plan EXPERIMENT``: the expanded runs in execution order, with an estimated duration."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from harness.boards.inventory import load_targets, select_targets
from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.commands.common import TargetsDirOpt, console
from harness.config.rounds import RoundsSpec


def plan(experiment: Path = typer.Argument(..., help="experiment YAML"),
         target: list[str] = typer.Option(None, "--target", "-t", help="target name or tag:X (repeatable)"),
         targets_dir: Path = TargetsDirOpt) -> None:
    """Dry run: list every run in its interleaved order, with an estimated duration."""
    loaded = load_resolved(experiment)
    chosen = select_targets(target or loaded.experiment.targets, load_targets(targets_dir), source=str(experiment))
    the_plan = build_plan(loaded)
    table = Table(title=f"{loaded.experiment.name}: {len(the_plan.runs)} runs per target", title_justify="left")
    for col in ("#", "run id", "step", "cache", "round", "params", "est. s"):
        table.add_column(col, justify="right" if col in ("#", "round", "est. s") else "left")
    for run in the_plan.runs:
        params = ", ".join(f"{k}={v}" for k, v in run.params.items())
        table.add_row(str(run.index), run.run_id, run.step, run.cache, str(run.round), params, f"{run.estimate_s:.0f}")
    console.print(table)
    total = the_plan.estimate_s
    names = ", ".join(t.name for t in chosen)
    console.print(f"targets: {names} (one run at a time per target)")
    console.print(f"estimated duration: {total / 60:.1f} min per target ({total:.0f} s)")
    rounds = loaded.experiment.rounds
    if isinstance(rounds, RoundsSpec):  # the plan holds the minimum; the rest depends on what is measured
        most = total / rounds.min * rounds.max
        console.print(f"rounds until tight: {rounds.min} rounds planned, up to {rounds.max} while a cell's "
                      f"{rounds.until.metric} interval is wider than {rounds.until.ci_halfwidth_pct:g} %: "
                      f"at most {most / 60:.1f} min per target ({most:.0f} s)")


def register(app: typer.Typer) -> None:
    app.command()(plan)
