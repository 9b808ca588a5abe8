"""Disk space: the results disk before a set exists, a target's workdir in preflight and whenever a run could not
write there (a full workdir leaves the runner no place to say so)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.boards.session import TargetSession
from harness.errors import DiskFullError, ResultSetError
from runner.util import free_bytes

# What a result set needs on the results disk, estimated before it starts: raw run directories (collector
# samples at 5-10 ms, engine logs) measured here at 0.2-2 MB per run, tables and figures once.
RESULTS_PER_RUN_BYTES = 4 << 20
RESULTS_FIXED_BYTES = 16 << 20
# a target's workdir holds one run's raw files until they are pulled (plus a margin for the runner's log)
WORKDIR_MIN_FREE_BYTES = 2 * RESULTS_PER_RUN_BYTES


def check_results_space(results_dir: Path, runs: int) -> None:
    """Refuse a campaign the results disk cannot hold (an estimate: raw files, tables, figures)."""
    needed = RESULTS_FIXED_BYTES + runs * RESULTS_PER_RUN_BYTES
    answer = free_bytes(results_dir)  # the nearest existing directory: the set does not exist yet
    where, free = answer["path"], answer["free_bytes"]
    if free < needed:
        raise ResultSetError(f"results disk full: {free / 1e6:.0f} MB free on {where}; this campaign writes "
                             f"about {needed / 1e6:.0f} MB ({runs} runs)")


def workdir_free(session: TargetSession) -> tuple[str, int] | None:
    """(mount point or nearest existing dir, free bytes) of the target's workdir; None when unknown."""
    done = session.transport.run([session.python, "-m", "runner", "free", session.workdir], cwd=session.runner_root)
    try:
        answer = json.loads(done.stdout.decode().strip().splitlines()[-1])
        return str(answer["path"]), int(answer["free_bytes"])
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def workdir_full(session: TargetSession) -> str | None:
    """What is wrong when the target's workdir cannot take another run ("workdir disk full: ..."), else None."""
    free = workdir_free(session)
    if free is None or free[1] >= WORKDIR_MIN_FREE_BYTES:
        return None
    return (f"workdir disk full: {free[1] / 1e6:.0f} MB free on {free[0]}; a run writes up to about "
            f"{RESULTS_PER_RUN_BYTES / 1e6:.0f} MB there")


def check_workdir_space(session: TargetSession) -> None:
    full = workdir_full(session)
    if full is not None:
        raise DiskFullError(f"target {session.target.name}: {full}")


def resumable(session: TargetSession, full: str, set_id: str) -> DiskFullError:
    """A full workdir mid-campaign: the set stays incomplete and resumes once there is space."""
    return DiskFullError(f"target {session.target.name}: {full}; free some space, then: harness run --resume "
                         f"{set_id}")
