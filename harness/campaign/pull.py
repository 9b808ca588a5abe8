"""Bringing one run directory home: copy it from the target, verify it against the runner's SHA256SUMS (a partial
or corrupted copy is pulled again), read its run.json, and refuse a run.json written to another major version of
the runner contract (runner/contract.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from harness.boards.session import TargetSession
from harness.campaign.context import Progress
from harness.errors import TargetError
from runner.contract import RunRecord, incompatible

PULL_ATTEMPTS = 3
REFUSED_SUFFIX = ".refused"


@dataclass
class Pulled:
    here: bool  # the run directory was copied and verified (so it can go from the target)
    record: RunRecord | None = None  # its run.json; None when there is none, or it was refused
    error: str | None = None  # why a pull failed
    refused: str | None = None  # why its run.json was refused (another contract): the run failed

    @property
    def runner_status(self) -> str | None:
        """What the runner said of the run (its run.json's status), kept beside the controller's verdict."""
        status = self.record.get("status") if self.record is not None else None
        return status if isinstance(status, str) else None


def pull_run(session: TargetSession, remote_dir: str, local: Path, what: str, progress: Progress) -> Pulled:
    """Copy ``remote_dir`` to ``local`` and verify it, up to PULL_ATTEMPTS times; ``what`` names the run in
    messages. The run directory stays on the target whatever happens here."""
    error = None
    record: RunRecord | None = None
    for attempt in range(1, PULL_ATTEMPTS + 1):
        try:
            session.transport.get(remote_dir, local)
            verify_checksums(local)
            record = json.loads((local / "run.json").read_text()) if (local / "run.json").exists() else None
            break
        except (TargetError, OSError, ValueError) as exc:
            error = f"pull failed: {exc}"
            if attempt < PULL_ATTEMPTS:
                progress.message(f"{what}: {error}; pulling again ({attempt}/{PULL_ATTEMPTS})")
    else:
        return Pulled(here=False, error=error)
    refused = None if record is None else incompatible(record.get("contract"), "controller")
    if refused is not None:
        # kept beside the run for a look, but never read as a run.json of this contract (tables, report); its line
        # in SHA256SUMS follows it, so the directory still verifies
        (local / "run.json").replace(local / ("run.json" + REFUSED_SUFFIX))
        sums = local / "SHA256SUMS"
        if sums.exists():
            lines = sums.read_text().splitlines(keepends=True)
            sums.write_text("".join(line[:-1] + REFUSED_SUFFIX + "\n" if line.endswith("  run.json\n") else line
                                    for line in lines))
        return Pulled(here=True, refused=refused)
    return Pulled(here=True, record=record)


def verify_checksums(run_dir: Path) -> None:
    """Compare every file against the runner's SHA256SUMS; a mismatch is a failed pull."""
    sums = run_dir / "SHA256SUMS"
    if not sums.exists():
        return  # a runner that died early wrote none; the record says so
    for line in sums.read_text().splitlines():
        if not line.strip():
            continue
        digest, rel = line.split("  ", 1)
        path = run_dir / rel
        actual = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"
        if actual != digest:
            raise TargetError(f"{path}: checksum mismatch after pull")
