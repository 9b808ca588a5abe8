"""``harness run EXPERIMENT``: execute it and leave a result set."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from harness.boards.inventory import load_targets, select_targets, targets_of_set
from harness.boards.lease import DEFAULT_WAIT_S as DEFAULT_LEASE_WAIT_S
from harness.campaign.orchestrator import Campaign, CampaignResult, stopping
from harness.campaign.plan import PlannedRun, build_plan
from harness.campaign.resolve import load_resolved
from harness.commands.common import ResultsOpt, TargetsDirOpt, console, frame_table
from harness.config.buildsource import with_build_sources, with_recorded_sources
from harness.errors import UsageError
from harness.results.loader import find_result_set, load_result_set, read_manifest


class RichProgress:
    """Campaign progress as one Rich bar per target plus a line per failed run."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def target_started(self, target: str, total: int) -> None:
        if target in self.tasks:  # rounds until tight added a round: the same bar, longer
            self.progress.update(self.tasks[target], total=total)
            return
        self.tasks[target] = self.progress.add_task(target, total=total, run="")

    def run_started(self, target: str, run: PlannedRun) -> None:
        self.progress.update(self.tasks[target], run=run.run_id)

    def run_finished(self, target: str, run: PlannedRun, status: str, error: str | None) -> None:
        self.progress.advance(self.tasks[target])
        if status != "ok":
            self.progress.console.print(f"[yellow]{target} {run.run_id}: {status}[/] {error or ''}", highlight=False)

    def message(self, text: str) -> None:
        self.progress.console.print(text, highlight=False)


def print_summary(result: CampaignResult) -> None:
    from harness.figures.report import (
        bench_summary,
        fio_summary,
        invalid_lines,
        not_cleared_lines,
        perturbed_lines,
        read_summary,
        request_summary,
    )

    rs = load_result_set(result.path)
    state = "complete" if result.complete else "INCOMPLETE"
    console.print(f"\nresult set ({state}): [bold]{result.path}[/]")
    console.print("runs: " + ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items())))
    runs = rs.table("runs")
    for line in filter(None, not_cleared_lines(runs) if not runs.empty else []):
        console.print(f"[yellow]{line.removeprefix('- ').replace('**', '')}[/]", highlight=False)
    for line in filter(None, [*perturbed_lines(runs), *invalid_lines(runs)] if not runs.empty else []):
        console.print(line.removeprefix("- ").replace("**", ""), style="yellow", highlight=False, markup=False)
    fio = fio_summary(rs)
    if not fio.empty:
        console.print(frame_table(fio, "fio ladder (read MB/s, mean over runs)"))
    reads = read_summary(rs)
    if not reads.empty:
        console.print(frame_table(reads.drop(columns=["target"]), "read baseline: device bytes vs file bytes"))
    bench = bench_summary(rs)
    if not bench.empty:
        console.print(frame_table(bench, "llama-bench (tok/s, mean over runs)"))
    requests = request_summary(rs)
    if not requests.empty:
        columns = ["cell", "requests", "decode tok/s", "sd", "dev MB/s", "MB/token"]
        console.print(frame_table(requests[[c for c in columns if c in requests]],
                                  "llama-server requests: decode and the device"))
    for figure in result.figures:
        if figure.suffix == ".png":
            console.print(f"figure: {figure}")
    console.print(f"report: {result.path / 'report.md'}")


def run(experiment: Path = typer.Argument(None, help="experiment YAML (omit with --resume)"),
        target: list[str] = typer.Option(None, "--target", "-t", help="target name or tag:X (repeatable)"),
        results: Path = ResultsOpt,
        scratch: str = typer.Option(None, "--scratch", help="directory on the target for created data files"),
        targets_dir: Path = TargetsDirOpt,
        lease_wait: float = typer.Option(DEFAULT_LEASE_WAIT_S, "--lease-wait", metavar="SECONDS",
                                         help="how long to wait for a board another campaign holds (0: fail at once)"),
        resume: str = typer.Option(None, "--resume", metavar="SET",
                                   help="complete the missing, failed or interrupted runs of an incomplete set"),
        retry_perturbed: int = typer.Option(0, "--retry-perturbed", metavar="N", min=0,
                                            help="measure a perturbed run again at the end of its round, up to N "
                                                 "times (0: only mark it)"),
        build_source: list[str] = typer.Option(None, "--build-source", metavar="NAME=git:URL@SHA|path:DIR",
                                               help="replace build NAME's source for this campaign (repeatable)"),
        ) -> None:
    """Run an experiment on its targets and write a result set."""
    resume_path = None
    if resume is not None:
        if experiment is not None or target or build_source:
            raise UsageError("--resume SET takes the experiment, targets and build sources from the set; give none")
        resume_path, loaded, chosen = _resume_inputs(resume, results, targets_dir)
    else:
        if experiment is None:
            raise UsageError("missing EXPERIMENT (a YAML file), or --resume SET")
        loaded = with_build_sources(load_resolved(experiment), build_source or [])
        chosen = select_targets(target or loaded.experiment.targets, load_targets(targets_dir),
                                source=str(experiment))
    the_plan = build_plan(loaded)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[run]}"))
    with Progress(*columns, console=console, transient=False) as progress:
        campaign = Campaign(the_plan, chosen, results, scratch=scratch, progress=RichProgress(progress),
                            lease_wait_s=lease_wait, retry_perturbed=retry_perturbed)
        result = campaign.resume(resume_path) if resume_path is not None else campaign.run()
    print_summary(result)
    if result.interrupted:
        state = "complete" if result.complete else "marked incomplete"
        console.print(f"interrupted ({stopping.name()}): finished runs are kept; the set is {state}")
        raise typer.Exit(stopping.exit_code())
    if not result.complete or set(result.statuses) - {"ok"}:
        raise typer.Exit(1)  # the set is kept either way; CI should still see that runs failed


def _resume_inputs(name: str, results: Path, targets_dir: Path | None) -> tuple[Path, Any, list[Any]]:
    """The incomplete set, its experiment (the original file if unchanged, else the set's copy), its targets."""
    path = find_result_set(name, results)
    manifest = read_manifest(path)
    if manifest.get("status") == "complete":
        raise UsageError(f"{path}: the set is complete; nothing to resume")
    original = Path(manifest["experiment"]["path"])
    same = original.exists() and hashlib.sha256(original.read_bytes()).hexdigest() == manifest["experiment"]["sha256"]
    loaded = load_resolved(original if same else path / "experiment.yaml")
    loaded = with_recorded_sources(loaded, manifest.get("build_sources"))  # the set's --build-source values
    chosen = targets_of_set(manifest["targets"], load_targets(targets_dir), source=str(path))
    return path, loaded, chosen


def register(app: typer.Typer) -> None:
    app.command()(run)
