"""``harness targets``: the inventory."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from harness.boards.inventory import load_targets, select_targets
from harness.commands.common import TargetsDirOpt, console
from harness.config.target import Target
from harness.errors import HarnessError, UsageError

targets_app = typer.Typer(invoke_without_command=True, no_args_is_help=False,
                          help="The inventory: list targets, check reachability, trust host keys.")


@targets_app.callback()
def targets(ctx: typer.Context, targets_dir: Path = TargetsDirOpt,
            check: bool = typer.Option(False, "--check", help="connect to each target and say if it answers")) -> None:
    """List the targets in targets/*.yaml."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table(title="targets", title_justify="left")
    for col in ("name", "platform", "transport", "block device", "workdir", "tags"):
        table.add_column(col)
    if check:
        table.add_column("reachable")
        table.add_column("runner and builds")
    problems: list[str] = []
    for target in load_targets(targets_dir).values():
        row = [target.name, target.platform, target.transport_kind, target.block_device, target.workdir,
               ", ".join(target.tags)]
        problem, toolchain = _check(target) if check else (None, "")
        if problem:
            problems.append(f"{target.name}: {problem}")
        table.add_row(*row, *([("[red]no[/]" if problem else "[green]yes[/]"), toolchain] if check else []))
    console.print(table)
    for line in problems:  # whole lines, not squeezed into a column: they say what to do
        console.print(line, highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)


# what a board needs: the runner's Python, make + cc for the native tools, cmake + c++ for engine builds,
# git only for git engine sources
BUILD_TOOLS = ("make", "cc", "c++", "cmake", "git")
RUNNER_PYTHON_MIN = (3, 8)
_TOOLCHAIN = ('for t in ' + " ".join(BUILD_TOOLS) + '; do command -v "$t" >/dev/null 2>&1 || echo "missing $t"; '
              'done; "$1" -c "import sys; print(\'python %d.%d\' % sys.version_info[:2])" 2>/dev/null '
              '|| echo "python none"')


def _check(target: Target) -> tuple[str | None, str]:
    """(why the target cannot run campaigns, or None; what its toolchain lacks) in one round trip."""
    from harness.boards.transports import connect

    if target.labgrid is not None and target.labgrid.place is None:
        return None, "labgrid farm: each place is reached when a campaign reserves it"
    try:
        if target.labgrid is not None:  # the address comes from the place's NetworkService
            from harness.boards.labgrid_lease import resolve_unlocked

            target = resolve_unlocked(target)
        transport = connect(target)
        try:
            found = transport.run(["sh", "-c", _TOOLCHAIN, "sh", target.python], timeout=30).check()
        finally:
            transport.close()
    except HarnessError as exc:
        return str(exc), ""
    lines = found.stdout.decode(errors="replace").split("\n")
    missing = [line.split()[1] for line in lines if line.startswith("missing ")]
    python = next((line.split()[1] for line in lines if line.startswith("python ")), "none")
    shown = f"python {python}" + (f"; missing: {', '.join(missing)}" if missing else f", {' '.join(BUILD_TOOLS)}")
    if python == "none":
        return f"target {target.name}: {target.python} not found (the runner needs Python >= 3.8; set python:)", shown
    if tuple(int(p) for p in python.split(".")) < RUNNER_PYTHON_MIN:
        return (f"target {target.name}: {target.python} is Python {python}; the runner needs >= 3.8 "
                "(set python: in the target file)"), shown
    return None, shown


@targets_app.command()
def trust(name: str = typer.Argument(..., help="target name"), targets_dir: Path = TargetsDirOpt,
          yes: bool = typer.Option(False, "--yes", "-y", help="accept without asking")) -> None:
    """Fetch an SSH target's host key, show its fingerprint, and add it to its known_hosts file."""
    from harness.boards.transports import kind_of
    from harness.boards.transports.ssh_hostkeys import fingerprint
    from harness.boards.transports.ssh_trust import add_known_host, fetch_host_key

    (target,) = select_targets([name], load_targets(targets_dir))
    if target.labgrid is not None:  # the address to trust is the one the place's NetworkService gives
        from harness.boards.labgrid_lease import resolve_unlocked

        target = resolve_unlocked(target)
    if not kind_of(target).has_host_key:
        raise UsageError(f"target {name}: transport {target.transport_kind} has no host key to trust")
    entry, key, known_hosts, known = fetch_host_key(target)
    if known:
        console.print(f"{name}: host key {key.get_name()} {fingerprint(key)} for {entry} is already in {known_hosts}",
                      highlight=False)
        return
    console.print(f"{name}: {entry} offers {key.get_name()} {fingerprint(key)}", highlight=False)
    if not yes and not typer.confirm(f"add it to {known_hosts}?"):
        raise typer.Exit(1)
    add_known_host(known_hosts, entry, key)
    console.print(f"{name}: added to {known_hosts}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(targets_app, name="targets")
