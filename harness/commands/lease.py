"""``harness lease show|break TARGET``: who holds a board, and how to free it.

A board with a lock file: its holder, campaign and expiry. A labgrid target (``labgrid:`` in its file, or a
``labgrid:KEY=VALUE`` selector): every place on its coordinator with holder and tags, and the reservation queue;
``break`` is labgrid's kick."""

from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path

import typer
from rich.table import Table

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
    """Show the lease on a board (holder, campaign, expiry), or a labgrid farm's places, holders and queue."""
    target = _target(name, targets_dir)
    if target.labgrid is not None:
        _show_farm(target)
        return
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


def _show_farm(target: Target) -> None:
    from harness.boards.labgrid_lease import farm_state

    address, places, reservations = farm_state(target)
    table = Table(title=f"labgrid coordinator {address}: places")
    for column in ("place", "tags", "holder", "reserved for"):
        table.add_column(column)
    owners = {r["token"]: r["owner"] for r in reservations}
    for place in places:
        tags = " ".join(f"{k}={v}" for k, v in sorted(place["tags"].items()))
        reserved = owners.get(place["reservation"], place["reservation"])
        table.add_row(place["place"], tags, place["holder"] or "free", reserved)
    console.print(table)
    if not reservations:
        console.print("reservations: none")
        return
    queue = Table(title="reservations (the queue: oldest first)")
    for column in ("token", "owner", "state", "filter", "place", "since"):
        queue.add_column(column)
    for r in reservations:
        since = datetime.datetime.fromtimestamp(r["created"]).strftime("%H:%M:%S")
        queue.add_row(r["token"], r["owner"], r["state"], " ".join(f"{k}={v}" for k, v in r["filter"].items()),
                      r["place"], since)
    console.print(queue)


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
    """Stop the lease holder on a board and remove its record (the campaign holding it loses the board); for a
    labgrid place, labgrid's kick."""
    target = _target(name, targets_dir)
    if target.labgrid is not None:
        from harness.boards.labgrid_lease import kick

        place, holder = kick(target)
        if holder:
            console.print(f"{name}: kicked {holder} from labgrid place {place} (labgrid's kick: "
                          f"labgrid-client -p {place} release --kick)", highlight=False)
        else:
            console.print(f"{name}: labgrid place {place} is not locked; nothing to kick", highlight=False)
        return
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
