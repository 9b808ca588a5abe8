"""``harness bisect``'s campaigns: the revisions between good and bad, and one campaign per step.

The search is :func:`harness.analysis.bisect.bisect`; this module is its ``measure``. Each step is one campaign of
the user's experiment with its build NAME replaced by three builds, ``good``, ``bad`` and ``mid`` (the same
engine, patches and flags; the source's commit set to the good, bad and midpoint revisions through
:func:`harness.config.buildsource.with_build_sources`, so the manifest records what was built), selected by the
``build`` matrix axis: the rounds interleave good, bad and mid in one session, which is the only comparison the
methodology trusts. The build cache keeps good and bad from being built again in later steps.

Revisions are listed with git in a local repository (the build's git source when it is a directory on this
machine, else ``--repo``): ``git rev-list --first-parent --ancestry-path GOOD..BAD``, oldest first. Every set is
kept and listed. A campaign that does not finish with every run ok is an InfrastructureError (exit 3): a step not
measured is neither good nor bad.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.bisect import Session
from harness.boards.lease import DEFAULT_WAIT_S
from harness.campaign.context import Progress
from harness.campaign.orchestrator import Campaign
from harness.campaign.plan import build_plan
from harness.config.buildsource import with_build_sources
from harness.config.experiment import BUILD_AXIS, BuildSpec, LoadedExperiment
from harness.config.target import Target
from harness.errors import HarnessError, InfrastructureError, UsageError
from harness.results.cell import CellKey
from harness.results.loader import load_result_set
from harness.results.metrics import Metric
from harness.results.samples import samples

SIDES = ("good", "bad", "mid")  # the builds of every step's campaign, in this order on the build axis


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["git failed"])[0]
        raise UsageError(f"git {' '.join(args)} in {repo}: {first}")
    return done.stdout.strip()


def revisions(repo: Path, good: str, bad: str) -> list[str]:
    """Full commit ids from good to bad (both included), oldest first, along bad's first-parent history."""
    good_id = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{good}^{{commit}}")
    bad_id = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{bad}^{{commit}}")
    if good_id == bad_id:
        return [good_id, bad_id]  # the same revision: measured against itself, it cannot differ
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good_id, bad_id],
                      capture_output=True, check=False).returncode != 0:
        raise UsageError(f"--good {good} is not an ancestor of --bad {bad} in {repo}: nothing to bisect between them")
    between = _git(repo, "rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good_id}..{bad_id}")
    return [good_id, *between.split()]


def describe(repo: Path, revision: str) -> str:
    """``abc1234 (subject)``: how a revision is named in bisect's lines."""
    return _git(repo, "log", "-1", "--format=%h (%s)", revision)


def build_to_bisect(loaded: LoadedExperiment, name: str | None) -> tuple[str, BuildSpec]:
    """The build NAME of the experiment (default: its only build, or the build axis's first value)."""
    builds = loaded.experiment.builds
    if not builds:
        raise UsageError(f"{loaded.path}: no builds: to bisect (give the engine as builds: {{NAME: {{engine: ..., "
                         "source: {git: URL, commit: SHA}}}})")
    if name is None:
        axis = loaded.experiment.matrix.get(BUILD_AXIS)
        name = str(axis[0]) if axis else next(iter(builds))
    if name not in builds:
        raise UsageError(f"--build {name}: {loaded.path} has no such build (builds: {', '.join(builds)})")
    return name, builds[name]


def repository_of(spec: BuildSpec, name: str, repo: Path | None) -> tuple[Path, str]:
    """The local repository to list revisions in, and the git URL the builds fetch from."""
    source = spec.source or {}
    url = source.get("git")
    if url is None:
        if repo is None:
            raise UsageError(f"build {name} has no git source (source: {source or 'the default'}); bisect needs "
                             "source: {git: URL, commit: SHA}, or --repo DIR")
        url = str(repo.resolve())
    local = repo if repo is not None else Path(url).expanduser()
    if not (local / ".git").exists() and not (local / "HEAD").exists():
        raise UsageError(f"build {name}: its git source {url} is not a repository on this machine; give a local "
                         "clone with --repo DIR")
    return local.resolve(), url


def step_experiment(loaded: LoadedExperiment, spec: BuildSpec, url: str,
                    commits: dict[str, str]) -> LoadedExperiment:
    """The experiment of one step: builds good/bad(/mid) of ``spec`` at ``commits``, the build axis over them."""
    exp = loaded.experiment
    names = [side for side in SIDES if side in commits]
    matrix = {BUILD_AXIS: list(names), **{k: v for k, v in exp.matrix.items() if k != BUILD_AXIS}}
    experiment = exp.model_copy(update={"builds": {side: spec for side in names}, "matrix": matrix})
    derived = LoadedExperiment(experiment, loaded.doc, loaded.path, loaded.text)
    return with_build_sources(derived, [f"{side}=git:{url}@{commits[side]}" for side in names])


@dataclass
class Sessions:
    """The ``measure`` of the search: one campaign per call; the sets made, in order."""

    loaded: LoadedExperiment
    spec: BuildSpec
    url: str
    good: str
    bad: str
    metric: Metric
    results: Path
    targets: list[Target]
    progress: Progress | None = None
    lease_wait_s: float = DEFAULT_WAIT_S
    on_session: Callable[[Path], None] | None = None
    sets: list[Path] = field(default_factory=list)
    focus: tuple[str, str, str, str] | None = None  # (target, step, test, cell without build) bisected

    def __call__(self, revision: str | None) -> Session:
        commits = {"good": self.good, "bad": self.bad, **({"mid": revision} if revision is not None else {})}
        plan = build_plan(step_experiment(self.loaded, self.spec, self.url, commits))
        campaign = Campaign(plan, self.targets, self.results, progress=self.progress, lease_wait_s=self.lease_wait_s)
        try:
            result = campaign.run()
        except HarnessError as exc:
            raise InfrastructureError(f"bisect step {len(self.sets) + 1}: {exc}") from exc
        self.sets.append(result.path)
        if result.interrupted:
            raise KeyboardInterrupt
        bad = {status: n for status, n in result.statuses.items() if status != "ok"}
        if not result.complete or bad:
            said = ", ".join(f"{n} {status}" for status, n in sorted(bad.items())) or "incomplete"
            raise InfrastructureError(f"bisect step {len(self.sets)}: set {result.path}: runs not ok ({said}); a "
                                      "step not measured is neither good nor bad")
        if self.on_session is not None:
            self.on_session(result.path)
        return self.read(result.path)

    def read(self, path: Path) -> Session:
        """The session's observations by build, for the cell being bisected (the first session picks the one
        where bad is furthest from good in the metric's worse direction)."""
        rows = samples(load_result_set(path), self.metric)
        by_cell: dict[tuple[str, str, str, str], dict[str, list[float]]] = {}
        for row in rows.itertuples(index=False):
            cell: CellKey = row.cell
            rest = CellKey(cell.target, cell.engine, tuple(kv for kv in cell.matrix if kv[0] != BUILD_AXIS),
                           cell.cache)
            key = (str(row.target), str(row.step), str(row.test), rest.label())
            by_cell.setdefault(key, {}).setdefault(cell.build, []).append(float(row.value))
        complete = {key: sides for key, sides in by_cell.items() if {"good", "bad"} <= set(sides)}
        if not complete:
            raise InfrastructureError(f"set {path}: no {self.metric.name} observations of both the good and the bad "
                                      "build (does the experiment's step produce it?)")
        if self.focus is None or self.focus not in complete:
            self.focus = min(complete, key=lambda key: _worse_first(complete[key], self.metric.higher_is_better))
        sides = complete[self.focus]
        return Session(sides["good"], sides["bad"], sides.get("mid"), where=str(path))


def _worse_first(sides: dict[str, list[float]], higher_is_better: bool) -> float:
    import statistics

    good, bad = statistics.median(sides["good"]), statistics.median(sides["bad"])
    ratio = bad / good if good else 1.0
    return ratio if higher_is_better else -ratio


def focus_label(focus: Sequence[str] | None) -> str:
    if not focus:
        return ""
    target, step, test, rest = focus
    return " ".join(part for part in (target, step, test, rest) if part)
