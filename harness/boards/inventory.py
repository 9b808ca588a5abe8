"""The target inventory resolved against the registries: ``targets/NAME.yaml`` read as data by
``harness.config.target``, then its platform, transport and transport options checked here (one line
with file:line naming the known kinds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.boards.platforms import PLATFORMS
from harness.boards.transports import TRANSPORTS
from harness.config.target import Target, read_target, select_targets, target_files
from harness.config.validate import validate

__all__ = ["load_target", "load_targets", "select_targets", "targets_of_set", "wants_lease"]


def load_target(path: Path) -> Target:
    target, doc = read_target(path)
    if target.platform not in PLATFORMS:
        raise doc.error(("platform",), PLATFORMS.unknown_message(target.platform))
    kind = TRANSPORTS.get(target.transport_kind)
    if kind is None:
        raise doc.error(("transport",), TRANSPORTS.unknown_message(target.transport_kind))
    if target.labgrid is not None and kind.name != "ssh":
        raise doc.error(("labgrid",), f"a labgrid place is reached over ssh, not {kind.name!r} "
                        "(leave transport out, or give ssh: {key: ..., known_hosts: ...})")
    if kind.options is not None:
        options = target.transport_options
        if target.labgrid is not None:  # the address and user come from the place's NetworkService
            options = {"host": "labgrid-place", **options}
        validate(kind.options, options, doc, ("transport", kind.name))
    return target


def load_targets(directory: Path | None = None) -> dict[str, Target]:
    return {t.name: t for t in (load_target(p) for p in target_files(directory))}


def wants_lease(target: Target) -> bool:
    """``lease:`` when the target says, else what its transport declares (boards yes, this machine no)."""
    return target.lease if target.lease is not None else TRANSPORTS[target.transport_kind].lease_by_default


def targets_of_set(entries: Sequence[Mapping[str, Any]], inventory: dict[str, Target], *,
                   source: str = "") -> list[Target]:
    """A set's targets again (--resume): by name from the inventory, except places a ``labgrid:`` selector picked,
    which are pinned to the place the set ran on (its manifest's lease record) under the same farm settings."""
    chosen: list[Target] = []
    for entry in entries:
        lease = entry.get("lease") or {}
        selector = lease.get("selector")
        if lease.get("backend") == "labgrid" and selector and entry["name"] not in inventory:
            (picked,) = select_targets([selector], inventory, source=source)
            assert picked.labgrid is not None
            ref = picked.labgrid.model_copy(update={"place": lease["place"], "coordinator": lease["coordinator"]})
            chosen.append(picked.model_copy(update={"labgrid": ref}))
        else:
            chosen += select_targets([entry["name"]], inventory, source=source)
    return chosen
