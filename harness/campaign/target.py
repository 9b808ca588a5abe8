"""One target's share of a campaign, in its own thread: the runs a dead controller left running adopted (waited for
and pulled, on --resume), then its data files, its facts and expectations, then its runs one at a time (each
between the board-state checks of ``runstate``; with ``--retry-perturbed N`` a round's perturbed runs are measured
again at the round's end), and at the end the files it created removed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from harness.boards.session import TargetSession
from harness.campaign import builds, declared, files, runstate, stopping
from harness.campaign.context import CampaignContext
from harness.campaign.lifecycle import RunLifecycle
from harness.campaign.plan import PlannedRun
from harness.campaign.resume import pull_finished
from harness.campaign.rounds import Steering
from harness.errors import ExpectationError
from harness.results.manifest import TargetFields, retry_entry
from harness.results.store import ResultSetWriter


def run_target(ctx: CampaignContext, writer: ResultSetWriter, session: TargetSession) -> None:
    target = session.target
    created: list[str] = []
    todo = [run for run in ctx.plan.runs if (target.name, run.run_id) not in ctx.keep]
    steering = Steering.of(ctx, writer, target.name)
    if steering is not None:  # a resumed set: the extra rounds it had begun, or the round it had not yet judged
        todo = todo + steering.left_over() or steering.resumed()
    if not todo:
        return  # a resumed set with nothing left here: no data files made, nothing probed again
    # what a killed controller of this set made here and could not remove goes at the end, like this one's own
    created.extend(files.made_earlier(ctx, session, writer.manifest.get("files", {}).get(target.name, {})))
    try:
        ctx.progress.target_started(target.name, len(todo))
        todo = adopt(ctx, writer, session, todo)
        if not todo:
            return  # every run left was adopted: no data file made
        paths, records = files.prepare_files(ctx, session, created)
        writer.record_files(target.name, records)
        facts = session.platform.probe(session, list(paths.values()))
        facts.update(declared.prepare_on_target(ctx, session, paths))  # declared engines built, probed
        learnt = TargetFields(facts=facts, deployed=session.deployed)
        if session.engines:
            learnt["engines"] = session.engines
        if ctx.target_builds.get(target.name):  # the named builds (builds:) as this target built them
            learnt["builds"] = builds.identities(ctx, target.name)
        writer.update_target(target.name, **learnt)
        check_expectations(ctx, session, writer, facts, "before")
        run_rounds(ctx, writer, session, paths, todo, steering)
        check_expectations(ctx, session, writer, facts, "after")
    finally:
        files.remove_created(ctx, session, created)
        # pulled runs were removed one by one; the set's runs/ directory goes when empty (rmdir only)
        session.transport.run(["rmdir", f"{session.workdir}/runs/{ctx.set_id}"])


def run_rounds(ctx: CampaignContext, writer: ResultSetWriter, session: TargetSession, paths: dict[str, str],
               todo: list[PlannedRun], steering: Steering | None) -> None:
    """The runs in order; at each round's end its perturbed runs measured again (--retry-perturbed) and, with
    rounds until tight, the next round's runs (harness.campaign.rounds) once the planned ones are done."""
    queue, perturbed = list(todo), []
    while queue:
        run = queue.pop(0)
        if measure(ctx, writer, session, paths, run):
            perturbed.append(run)
        if queue and queue[0].round == run.round:
            continue
        if perturbed:
            retry_perturbed(ctx, writer, session, paths, perturbed)
            perturbed = []
        if steering is not None and not queue:
            queue = steering.after_round(run.round)


def adopt(ctx: CampaignContext, writer: ResultSetWriter, session: TargetSession,
          todo: list[PlannedRun]) -> list[PlannedRun]:
    """First the runs a dead controller left running here: each waited for and pulled, before any data file is
    made. Their fio may still be reading: re-creating the file it reads (the runner's mkfile, tens of MB) used to
    land inside the adopted run's measurement. Returns the runs left to measure (with those gone without DONE)."""
    left = []
    for run in todo:
        if (session.target.name, run.run_id) in ctx.resumed_running:
            stopping.check()
            if session.lease is not None:
                session.lease.check()
            if pull_finished(ctx, session, writer, run):
                continue
        left.append(run)
    return left


def measure(ctx: CampaignContext, writer: ResultSetWriter, session: TargetSession, paths: dict[str, str],
            run: PlannedRun) -> bool:
    """One run between the board-state checks; True when it was recorded ok but perturbed."""
    stopping.check()
    if session.lease is not None:
        session.lease.check()  # the coordinator gone or the place taken: stop before this run, keep the rest
    target = session.target.name
    # temperature gate and expectations around every run: clocks can change under load
    expect = ctx.experiment.expect
    record(writer, target, run, runstate.before_run(session, run, expect, ctx.progress.message))
    lifecycle = RunLifecycle(ctx, session, writer, run)
    lifecycle.execute(paths)
    record(writer, target, run, runstate.after_run(session, run, expect))
    stopping.checkpoint("between-runs")
    return lifecycle.perturbed


def retry_perturbed(ctx: CampaignContext, writer: ResultSetWriter, session: TargetSession, paths: dict[str, str],
                    perturbed: list[PlannedRun]) -> None:
    """At the end of a round, measure its perturbed runs again (same cell, same cache condition), each up to
    ``--retry-perturbed`` times until one is not perturbed. A retry is a new run, ``<run id>-retry<k>``, whose
    manifest entry names its original (``retry_of``); the original stays in the tables, marked perturbed."""
    pending = list(perturbed)
    for attempt in range(1, ctx.retry_perturbed + 1):
        if not pending:
            return
        ctx.progress.message(f"{session.target.name}: round {pending[0].round}: measuring {len(pending)} perturbed "
                             f"run(s) again (retry {attempt} of {ctx.retry_perturbed})")
        again = []
        for original in pending:
            retry = _planned_retry(writer, session.target.name, original, attempt)
            if measure(ctx, writer, session, paths, retry):
                again.append(original)
        pending = again


def _planned_retry(writer: ResultSetWriter, target: str, original: PlannedRun, attempt: int) -> PlannedRun:
    """The retry's plan (the original's cell, round and cache) and its manifest entry, numbered after every run."""
    with writer.lock:
        mine = [entry for entry in writer.manifest["runs"] if entry.get("target") == target]
        index = max(entry.get("index", 0) for entry in mine) + 1
        retry = dataclasses.replace(original, index=index, run_id=f"{original.run_id}-retry{attempt}")
        entry = next(e for e in mine if e.get("run_id") == original.run_id)
        writer.add_run(retry_entry(entry, retry.run_id, index))
    return retry


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
    checked = [r.__dict__ for r in results]
    if when == "before":
        writer.update_target(session.target.name, expectations_before=checked)
    else:
        writer.update_target(session.target.name, expectations_after=checked)
    failed = [r for r in results if not r.ok]
    if failed:
        raise ExpectationError(f"target {session.target.name}: expectation {failed[0].name} failed {when} "
                               f"the runs: {failed[0].message}")
