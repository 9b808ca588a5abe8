"""``harness targets``: the inventory."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from harness.commands.common import TargetsDirOpt, console
from harness.config.target import load_targets


def targets(targets_dir: Path = TargetsDirOpt) -> None:
    """List the targets in targets/*.yaml."""
    table = Table(title="targets", title_justify="left")
    for col in ("name", "platform", "transport", "block device", "workdir", "tags"):
        table.add_column(col)
    for target in load_targets(targets_dir).values():
        table.add_row(target.name, target.platform, target.transport_kind, target.block_device, target.workdir,
                      ", ".join(target.tags))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(targets)
