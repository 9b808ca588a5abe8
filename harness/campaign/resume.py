"""--resume: complete an incomplete set. Runs that finished stay; missing, failed and interrupted ones run again;
a run a dead controller left running is adopted (waited for and pulled when it finished) instead of being
measured twice."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.boards.session import TargetSession
from harness.campaign.context import CampaignContext
from harness.campaign.lifecycle import RunLifecycle
from harness.campaign.plan import PlannedRun
from harness.results.store import ResultSetWriter


def load(ctx: CampaignContext, path: Path) -> dict[str, Any]:
    """Read the set's manifest into the campaign: its set id, its scratch, the runs to keep and to adopt."""
    manifest: dict[str, Any] = json.loads((path / "manifest.json").read_text())
    ctx.set_id = manifest["set_id"]
    ctx.reclaim = True  # a place our crashed controller still holds is taken back (labgrid's release-from)
    ctx.scratch = ctx.scratch or manifest.get("scratch")  # the original --scratch unless another is given
    ctx.keep = {(r["target"], r["run_id"]) for r in manifest["runs"] if r["status"] == "ok"}
    ctx.resumed_running = {(r["target"], r["run_id"]) for r in manifest["runs"] if r["status"] == "running"}
    return manifest


def reopen(path: Path, manifest: dict[str, Any]) -> ResultSetWriter:
    """The set's writer again, its manifest saying when it was resumed."""
    writer = ResultSetWriter.reopen(path, manifest)
    writer.manifest.setdefault("resumed", []).append(time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    writer.save()
    return writer


def record_leases(writer: ResultSetWriter, sessions: list[TargetSession]) -> None:
    """Each target's lease in the manifest (labgrid: coordinator, place, tags, reservation token)."""
    for session in sessions:
        if session.lease is not None:
            writer.update_target(session.target.name, lease=session.lease.record())


def pull_finished(ctx: CampaignContext, session: TargetSession, writer: ResultSetWriter, run: PlannedRun) -> bool:
    """A run a dead controller left running may have finished on the board (or still be running):
    wait for it and pull it instead of measuring it again. False when it has to be measured again."""
    return RunLifecycle.adopt(ctx, session, writer, run).finish_adopted()
