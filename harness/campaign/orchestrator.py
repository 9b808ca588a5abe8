"""Execute a plan on targets and leave a result set.

For every run: write the spec, start the runner detached on the target, poll for DONE, pull the
run directory, verify it against the runner's checksums. A failing run is recorded and the
campaign goes on; an interrupt stops the current runner cleanly, keeps every finished run and
leaves the set marked incomplete.

This module is the campaign across targets: preflight, the set created (or reopened for --resume), a worker thread
per target (a single one too), a stop told to every target, and the finish (tables, the set's final name, figures).
What happens before a set exists is in ``preflight``, one target's runs in ``target``, one run in ``lifecycle``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from harness.boards.lease import DEFAULT_WAIT_S as DEFAULT_LEASE_WAIT_S
from harness.boards.session import TargetSession
from harness.campaign import declared, stopping
from harness.campaign import resume as resuming
from harness.campaign.context import CampaignContext, Progress, QuietProgress
from harness.campaign.plan import Plan, planned
from harness.campaign.preflight import preflight
from harness.campaign.space import check_results_space
from harness.campaign.target import run_target
from harness.config.target import Target
from harness.results.manifest import Prepared
from harness.results.store import ResultSetWriter
from harness.results.tables import ENERGY

__all__ = ["Campaign", "CampaignResult", "Progress", "QuietProgress", "stopping"]


@dataclass
class CampaignResult:
    path: Path
    complete: bool
    interrupted: bool = False
    statuses: dict[str, int] = field(default_factory=dict)
    table_rows: dict[str, int] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)


class Campaign:
    def __init__(self, plan: Plan, targets: list[Target], results_dir: Path, *, scratch: str | None = None,
                 progress: Progress | None = None, lease_wait_s: float = DEFAULT_LEASE_WAIT_S,
                 retry_perturbed: int = 0) -> None:
        self.ctx = CampaignContext(plan, targets, progress or QuietProgress(), scratch=scratch,
                                   retry_perturbed=retry_perturbed)
        self.results_dir, self.lease_wait_s = results_dir, lease_wait_s

    def run(self) -> CampaignResult:
        check_results_space(self.results_dir, self.ctx.plan.most_runs * len(self.ctx.targets))
        sessions = self._preflight()
        try:
            stopping.checkpoint("preflight")
            with stopping.deferred():  # a set directory always has its manifest
                writer = new_writer(self.ctx, self.results_dir)
                resuming.record_leases(writer, sessions)
        except BaseException:
            for session in sessions:
                session.close()
            raise
        return self._execute(sessions, writer)

    def resume(self, path: Path) -> CampaignResult:
        """Complete an incomplete set: runs that finished stay; missing, failed and interrupted ones run."""
        manifest = resuming.load(self.ctx, path)
        sessions = self._preflight()
        writer = resuming.reopen(path, manifest)
        resuming.record_leases(writer, sessions)
        return self._execute(sessions, writer)

    def _preflight(self) -> list[TargetSession]:
        return preflight(self.ctx, self.lease_wait_s)

    def _execute(self, sessions: list[TargetSession], writer: ResultSetWriter) -> CampaignResult:
        complete = interrupted = failed = False
        try:
            self._run_targets(writer, sessions)
            complete = True
        except KeyboardInterrupt:
            # the current runners were stopped and pulled (lifecycle); keep everything done so far
            interrupted = True
        except BaseException:
            failed = True
            raise
        finally:
            for session in sessions:
                session.close()
            try:
                result = finish(self.ctx, writer, complete)
            except Exception:
                if not failed:
                    raise
                # the first error says what went wrong; finishing failed for the same reason (a full disk):
                # the set stays incomplete with its last manifest, and --resume finishes it
        result.interrupted = interrupted or result.interrupted
        return result

    def _run_targets(self, writer: ResultSetWriter, sessions: list[TargetSession]) -> None:
        """A worker thread per target, also for a single one, so a stop behaves the same whatever their number:
        the main thread only waits, inside a ``stopping.deferred`` section, where a signal becomes the stop
        request every worker acts on (stopping.py). KeyboardInterrupt here once they all stopped."""
        errors: list[BaseException] = []

        def work(session: TargetSession) -> None:
            try:
                run_target(self.ctx, writer, session)
            except KeyboardInterrupt:
                pass  # this target's runner was stopped and pulled
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
                errors.append(exc)
                if len(sessions) > 1:  # the others go on; a single target's error is the campaign's own
                    self.ctx.progress.message(f"{session.target.name}: stopped: {exc}")

        threads = [threading.Thread(target=work, args=(s,), name=f"target-{s.target.name}", daemon=True)
                   for s in sessions]
        with stopping.deferred(raise_after=False):
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        if stopping.take_pending():
            raise KeyboardInterrupt  # every runner was stopped and pulled by its worker
        if errors:
            raise errors[0]


def new_writer(ctx: CampaignContext, results_dir: Path) -> ResultSetWriter:
    """The new set, its manifest saying everything the campaign prepared."""
    writer = ResultSetWriter(results_dir, ctx.set_id)
    loaded, experiment = ctx.plan.experiment, ctx.experiment
    writer.start(experiment_name=experiment.name, experiment_path=loaded.path, experiment_text=loaded.text,
                 targets=[{"name": t.name, "platform": t.platform, "transport": t.transport_kind,
                           "block_device": t.block_device} for t in ctx.targets],
                 plan=[planned(t, r) for t in ctx.targets for r in ctx.plan.runs])
    prepared: Prepared = {
        "engines": {name: build.to_dict() for name, build in ctx.builds.items()},
        "declared_engines": declared.manifest_entries(ctx),  # whole, with sha256
        "models": {name: info for name, (_path, info) in ctx.synth.items()},
        "matrix": {key: list(values) for key, values in experiment.matrix.items()},
        "baseline": experiment.baseline,
        "scratch": ctx.scratch,  # --resume uses it again (None: the target's workdir)
        "fio_policy": experiment.fio.model_dump(),  # allow_exec: said here when it was on
        # ingest marks runs below its minimums invalid (harness/results/minimums.py); the report states them
        "validity": experiment.validity.model_dump() if experiment.validity is not None else None,
    }
    if loaded.build_sources:  # --build-source: said (and used again by --resume) only when given
        prepared["build_sources"] = loaded.build_sources
    writer.record_prepared(prepared)
    return writer


def _energy(ctx: CampaignContext, writer: ResultSetWriter) -> int:
    """The energy table (before the set's SHA256SUMS); a failure here never loses the set, it says so."""
    from harness.campaign.energy import write_energy  # pandas, like write_tables

    try:
        return write_energy(writer, ctx.progress.message, ctx.collectors)
    except Exception as exc:  # noqa: BLE001 - the other tables are written; energy is derived from them
        ctx.progress.message(f"energy table not written ({exc})")
        return 0


def finish(ctx: CampaignContext, writer: ResultSetWriter, complete: bool) -> CampaignResult:
    # Tables come from whatever runs finished, even after an interrupt; the set is renamed to
    # its final name only when complete. Figures and report are derived, so they come last.
    # a stop signal here waits until the tables and the manifest are written (and the set renamed)
    from harness.results.ingest import write_tables  # pandas: loaded when tables are written, not at start

    with stopping.deferred(raise_after=False):
        stopping.checkpoint("tables")
        counts = write_tables(writer.path, writer.manifest)
        counts[ENERGY.name] = _energy(ctx, writer)
        path = writer.finish(complete=complete)
    interrupted = stopping.take_pending()
    figures: list[Path] = []
    if not interrupted:
        try:
            from harness.figures.report import render_report

            figures = render_report(path)
        except KeyboardInterrupt:
            interrupted = True
        except Exception as exc:  # noqa: BLE001 - the data is safe; say how to retry instead of failing
            ctx.progress.message(f"figures/report failed ({exc}); retry with: harness report {path}")
    if interrupted:
        ctx.progress.message(f"stopped ({stopping.name()}) before the figures; the tables are written; "
                             f"draw them with: harness report {path}")
    statuses: dict[str, int] = {}
    for run in writer.manifest["runs"]:
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    return CampaignResult(path, complete, interrupted=interrupted, statuses=statuses, table_rows=counts,
                          figures=figures)
