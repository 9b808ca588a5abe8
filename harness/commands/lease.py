"""``harness lease show|break TARGET``: who holds a board, and how to free it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import typer

from harness.boards.inventory import load_targets, select_targets
from harness.boards.lease import break_lease, describe, show
from harness.boards.transports import connect
from harness.commands.common import TargetsDirOpt, console
from harness.config.target import Target

lease_app = typer.Typer(no_args_is_help=True, help="Board leases: who holds a board; break a stuck lease.")


def _target(name: str, targets_dir: Path | None) -> Target:
    (target,) = select_targets([name], load_targets(targets_dir))
    return target


@lease_app.command("show")
def show_cmd(name: str = typer.Argument(..., metavar="TARGET"), targets_dir: Path = TargetsDirOpt) -> None:
    """Show the lease on a board: holder, campaign, expiry, whether its holder process runs."""
    target = _target(name, targets_dir)
    transport = connect(target)
    try:
        state = show(transport, target.python, target.workdir)
    finally:
        transport.close()
    lease = state.get("lease")
    if not lease:
        console.print(f"{name}: free")
        return
    alive = "holder running" if state.get("holder_alive") else "holder NOT running (stale record)"
    controller = _controller_state(lease)
    console.print(f"{name}: leased by {describe(lease, state['now'])}; {alive}{controller}", highlight=False)


def _controller_state(lease: dict) -> str:
    """Whether the controller that took the lease still runs, when it ran on this host (else we cannot tell)."""
    if lease.get("host") != socket.gethostname() or not isinstance(lease.get("pid"), int):
        return ""
    try:
        os.kill(lease["pid"], 0)
    except ProcessLookupError:
        return (f"; its controller (pid {lease['pid']} on this host) is NOT running: the lease lapses when it "
                f"expires, or free it now with: harness lease break")
    except PermissionError:
        pass
    return f"; its controller (pid {lease['pid']}) is running"


@lease_app.command("break")
def break_cmd(name: str = typer.Argument(..., metavar="TARGET"), targets_dir: Path = TargetsDirOpt) -> None:
    """Stop the lease holder on a board and remove its record (the campaign holding it loses the board)."""
    target = _target(name, targets_dir)
    transport = connect(target)
    try:
        done = break_lease(transport, target.python, target.workdir)
    finally:
        transport.close()
    if done.get("broken"):
        console.print(f"{name}: broke the lease of {describe(done['broken'])}", highlight=False)
    else:
        console.print(f"{name}: no lease to break")


def register(app: typer.Typer) -> None:
    app.add_typer(lease_app, name="lease")
