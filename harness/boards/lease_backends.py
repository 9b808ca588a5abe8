"""Who may use a board: one ``LeaseBackend`` protocol, chosen per target.

- ``BoardLockFile`` (the default, for a desk of boards without a coordinator): the lock file on the board itself,
  taken over the board's transport; held, it is a ``harness.boards.lease.BoardFileLease``.
- ``LabgridPlace`` (``labgrid:`` in the target, for a shared lab): the place reserved and locked through a labgrid
  coordinator (``harness.boards.labgrid_lease``); held, it is a ``PlaceLease``; the board's lock file is still
  taken after it, as a second guard against controllers that bypass labgrid.

``take`` returns the board reached and held: the target as resolved (a labgrid place knows the address), its open
transport, and the lease (a ``HeldLease``) to ``check`` between runs, ``release`` in every exit path and ``record``
into the manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from harness.boards.inventory import wants_lease
from harness.boards.lease import BACKEND, acquire
from harness.boards.transports import Transport, connect
from harness.config.target import Target


class HeldLease(Protocol):
    def check(self) -> None:
        """Between runs: raise InfrastructureError when the lease can no longer be trusted."""

    def release(self) -> None:
        """Give the board back; never raises (an unreachable board or coordinator lets it lapse)."""

    def record(self) -> dict[str, Any]:
        """What the manifest says about this lease (backend, holder, tokens)."""


@dataclass
class Held:
    target: Target  # resolved: a labgrid place's address filled in, named after the place for tag selectors
    transport: Transport
    lease: HeldLease | None


class LeaseBackend(Protocol):
    name: str

    def take(self, target: Target, *, campaign: str, wait_s: float, on_wait: Callable[[str], None] | None,
             reclaim: bool = False) -> Held:
        """Connect to the target and take its lease, waiting up to ``wait_s``; ``reclaim`` (a --resume) takes
        back a lease this user and host left behind when its controller died."""


class BoardLockFile:
    name = BACKEND

    def take(self, target: Target, *, campaign: str, wait_s: float, on_wait: Callable[[str], None] | None,
             reclaim: bool = False) -> Held:
        transport = connect(target)
        if not wants_lease(target):
            return Held(target, transport, None)
        try:
            lease = acquire(transport, target_name=target.name, python=target.python, workdir=target.workdir,
                            campaign=campaign, wait_s=wait_s, on_wait=on_wait)
        except BaseException:
            transport.close()
            raise
        return Held(target, transport, lease)
