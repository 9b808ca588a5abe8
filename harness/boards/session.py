"""A connection to one target for one campaign: transport, platform, and where the runner lives."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.boards.labgrid_lease import LabgridPlace, resolve_unlocked
from harness.boards.lease_backends import BoardLockFile, Held, HeldLease, LeaseBackend
from harness.boards.platforms import PLATFORMS, Platform
from harness.boards.transports import Transport, connect
from harness.config.target import Target
from harness.errors import ToolMissingError

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNNER_DIR = REPO_ROOT / "runner"
NATIVE_DIR = RUNNER_DIR / "native"


@dataclass
class TargetSession:
    target: Target
    transport: Transport
    platform: Platform
    runner_root: str  # the directory that holds the runner package on the target
    native_bin: str
    deployed: dict[str, Any] | None = None  # what harness.boards.deploy pushed and built (for the manifest)
    lease: HeldLease | None = None  # held while this session lives
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)  # engine name -> build record (on the board)
    models: dict[str, str] = field(default_factory=dict)  # file name -> path of a pushed synthetic model

    @property
    def python(self) -> str:
        return self.target.python

    @property
    def workdir(self) -> str:
        return self.target.workdir

    def close(self) -> None:
        try:
            if self.lease is not None:
                self.lease.release()
                self.lease = None
        finally:
            self.transport.close()


def backend_for(target: Target) -> LeaseBackend:
    if target.labgrid is not None:
        return LabgridPlace()
    return BoardLockFile()


def reach(target: Target) -> Held:
    """Connect without taking any lease (probe, show): a labgrid place's address is looked up, not locked."""
    if target.labgrid is not None:
        target = resolve_unlocked(target)
    return Held(target, connect(target), None)


def build_native_here() -> Path:
    """Build runner/native with make on this machine; one clear error when tools are missing."""
    missing = [tool for tool in ("make", "cc") if shutil.which(tool) is None]
    if missing:
        raise ToolMissingError(f"cannot build runner/native: {', '.join(missing)} not installed "
                               "(apt-get install make gcc)")
    done = subprocess.run(["make", "-s", "-C", str(NATIVE_DIR)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise ToolMissingError(f"building runner/native failed: {tail[0]}")
    return NATIVE_DIR / "bin"


def open_session(target: Target, *, lease_for: str | None = None, lease_wait_s: float = 0.0,
                 on_wait: Callable[[str], None] | None = None, reclaim: bool = False) -> TargetSession:
    """Connect; with ``lease_for`` (a campaign name) take the board's lease first (its backend: the board's lock
    file, or a labgrid place), before anything on the board changes (deploy included); then deploy the runner on
    remote targets. ``reclaim`` (a --resume) takes back a lease this user's dead controller left behind."""
    if lease_for is not None:
        held = backend_for(target).take(target, campaign=lease_for, wait_s=lease_wait_s, on_wait=on_wait,
                                        reclaim=reclaim)
    else:
        held = reach(target)
    target, transport, lease = held.target, held.transport, held.lease
    platform = PLATFORMS[target.platform]
    try:
        if transport.shares_controller_files:
            # This machine runs the runner straight from this checkout: nothing to deploy.
            native_bin = build_native_here()
            return TargetSession(target, transport, platform, str(REPO_ROOT), str(native_bin), lease=lease)
        # Remote targets get the runner pushed to <workdir>/runner and built there (skipped when unchanged).
        from harness.boards.deploy import deploy_runner

        deployed = deploy_runner(transport, target.workdir, target_name=target.name)
    except BaseException:
        if lease is not None:
            lease.release()
        transport.close()
        raise
    return TargetSession(target, transport, platform, target.workdir, f"{target.workdir}/runner/native/bin",
                         deployed=deployed, lease=lease)
