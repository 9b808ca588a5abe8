"""``harness deploy TARGET``: push the runner and build its native tools on targets (skipped when unchanged)."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.commands.common import TargetsDirOpt, console
from harness.config.target import load_targets, select_targets
from harness.lease import DEFAULT_WAIT_S
from harness.session import open_session


def deploy(target: list[str] = typer.Argument(..., help="target name or tag:X"),
           targets_dir: Path = TargetsDirOpt,
           lease_wait: float = typer.Option(DEFAULT_WAIT_S, "--lease-wait", metavar="SECONDS",
                                            help="how long to wait for a board another campaign holds")) -> None:
    """Push runner/ to each target's workdir and build it there; unchanged files are not sent again."""
    for chosen in select_targets(target, load_targets(targets_dir)):
        # under the board's lease: a campaign running there must not see its runner change
        session = open_session(chosen, lease_for="deploy", lease_wait_s=lease_wait, on_wait=console.print)
        try:
            info = session.deployed
        finally:
            session.close()
        if info is None:
            console.print(f"{chosen.name}: runs from this checkout (local transport); native tools built")
            continue
        sent = info["transferred_files"]
        what = f"{len(sent)} files sent ({info['transferred_bytes']} bytes)" if sent else "no files sent (unchanged)"
        built = "native tools built" if info["built"] else "no build needed"
        console.print(f"{chosen.name}: {what}, {info['removed_files'] and len(info['removed_files']) or 0} removed, "
                      f"{built}; tree {info['tree_hash'][:12]} in {info['remote_root']} "
                      f"({info['compiler']}) in {info['duration_s']:.2f} s", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(deploy)
