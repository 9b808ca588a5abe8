"""The target inventory resolved against the registries: ``targets/NAME.yaml`` read as data by
``harness.config.target``, then its platform, transport and transport options checked here (one line
with file:line naming the known kinds)."""

from __future__ import annotations

from pathlib import Path

from harness.boards.platforms import PLATFORMS
from harness.boards.transports import TRANSPORTS
from harness.config.target import Target, read_target, select_targets, target_files
from harness.config.validate import validate

__all__ = ["load_target", "load_targets", "select_targets", "wants_lease"]


def load_target(path: Path) -> Target:
    target, doc = read_target(path)
    if target.platform not in PLATFORMS:
        raise doc.error(("platform",), f"unknown platform {target.platform!r} (known: {', '.join(PLATFORMS)})")
    kind = TRANSPORTS.get(target.transport_kind)
    if kind is None:
        raise doc.error(("transport",), f"unknown transport {target.transport_kind!r} "
                        f"(known: {', '.join(TRANSPORTS)})")
    if kind.options is not None:
        validate(kind.options, target.transport_options, doc, ("transport", kind.name))
    return target


def load_targets(directory: Path | None = None) -> dict[str, Target]:
    return {t.name: t for t in (load_target(p) for p in target_files(directory))}


def wants_lease(target: Target) -> bool:
    """``lease:`` when the target says, else what its transport declares (boards yes, this machine no)."""
    return target.lease if target.lease is not None else TRANSPORTS[target.transport_kind].lease_by_default
