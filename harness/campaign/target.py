"""One target's share of a campaign, in its own thread: its data files, its facts and expectations, then its
runs one at a time (each between the board-state checks of ``runstate``), and at the end the files it created
removed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harness.boards.session import TargetSession
from harness.campaign import files, runstate, stopping
from harness.campaign.context import CampaignContext
from harness.campaign.lifecycle import RunLifecycle
from harness.campaign.plan import PlannedRun
from harness.campaign.resume import pull_finished
from harness.errors import ExpectationError
from harness.results.store import ResultSetWriter


def run_target(ctx: CampaignContext, writer: ResultSetWriter, session: TargetSession) -> None:
    target = session.target
    created: list[str] = []
    todo = [run for run in ctx.plan.runs if (target.name, run.run_id) not in ctx.keep]
    if not todo:
        return  # a resumed set with nothing left here: no data files made, nothing probed again
    try:
        paths, records = files.prepare_files(ctx, session, created)
        writer.record_files(target.name, records)
        facts = session.platform.probe(session, list(paths.values()))
        writer.update_target(target.name, facts=facts, deployed=session.deployed,
                             **({"engines": session.engines} if session.engines else {}))
        check_expectations(ctx, session, writer, facts, "before")
        ctx.progress.target_started(target.name, len(todo))
        for run in todo:
            if ctx.interrupt.is_set():
                raise KeyboardInterrupt
            if (target.name, run.run_id) in ctx.resumed_running and pull_finished(ctx, session, writer, run):
                continue
            # temperature gate and expectations around every run: clocks can change under load
            expect = ctx.experiment.expect
            record(writer, target.name, run, runstate.before_run(session, run, expect, ctx.progress.message))
            RunLifecycle(ctx, session, writer, run).execute(paths)
            record(writer, target.name, run, runstate.after_run(session, run, expect))
            stopping.checkpoint("between-runs")
        check_expectations(ctx, session, writer, facts, "after")
    finally:
        files.remove_created(ctx, session, created)
        # pulled runs were removed one by one; the set's runs/ directory goes when empty (rmdir only)
        session.transport.run(["rmdir", f"{session.workdir}/runs/{ctx.set_id}"])


def record(writer: ResultSetWriter, target: str, run: PlannedRun, found: Iterator[dict[str, Any]]) -> None:
    """Record what runstate found around a run in its manifest entry, each finding as soon as it is known."""
    for fields in found:
        writer.update_run(run.run_id, target=target, **fields)


def check_expectations(ctx: CampaignContext, session: TargetSession, writer: ResultSetWriter,
                       facts: dict[str, Any], when: str) -> None:
    if not ctx.experiment.expect:
        return
    if when == "after":
        facts = session.platform.probe(session, [])
    results = session.platform.check(ctx.experiment.expect, facts, session)
    writer.update_target(session.target.name, **{f"expectations_{when}": [r.__dict__ for r in results]})
    failed = [r for r in results if not r.ok]
    if failed:
        raise ExpectationError(f"target {session.target.name}: expectation {failed[0].name} failed {when} "
                               f"the runs: {failed[0].message}")
