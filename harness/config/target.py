"""Target inventory: ``targets/NAME.yaml`` describes one board or machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from harness.config.validate import StrictModel, validate
from harness.config.yamlsrc import YamlDoc, load_yaml
from harness.errors import UsageError


class Target(StrictModel):
    name: str
    platform: str = "linux"
    transport: dict[str, dict[str, Any] | None] | str = "local"
    workdir: str = "/var/tmp/harness"
    block_device: str = Field(default="auto", description="e.g. nvme0n1; 'auto' = the disk holding the files")
    tags: list[str] = Field(default_factory=list)
    sudo: bool = False
    python: str = "python3"
    description: str = ""
    lease: bool | None = Field(default=None, description="take the board's lease before a campaign "
                               "(default: yes over ssh/adb, no for the local machine)")

    @field_validator("transport")
    @classmethod
    def _one_transport(cls, value: dict[str, Any] | str) -> dict[str, Any] | str:
        if isinstance(value, dict) and len(value) != 1:
            raise ValueError("expected one transport, e.g. 'local' or {ssh: {host: ...}}")
        return value

    @property
    def transport_kind(self) -> str:
        return self.transport if isinstance(self.transport, str) else next(iter(self.transport))

    @property
    def transport_options(self) -> dict[str, Any]:
        return {} if isinstance(self.transport, str) else dict(next(iter(self.transport.values())) or {})


def read_target(path: Path) -> tuple[Target, YamlDoc]:
    """``targets/NAME.yaml`` as data (with its source, for error lines). Whether its platform and transport
    exist is decided later, against their registries (harness.boards.inventory)."""
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "a target must be a mapping with platform, transport, workdir, ...")
    data = {"name": path.stem, **doc.data}
    return validate(Target, data, doc), doc


def default_targets_dir() -> Path:
    """``./targets`` when run from a checkout, else the one shipped beside the package."""
    here = Path.cwd() / "targets"
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "targets"


def target_files(directory: Path | None = None) -> list[Path]:
    directory = directory or default_targets_dir()
    if not directory.is_dir():
        raise UsageError(f"{directory}: no targets directory (expected targets/NAME.yaml files)")
    return sorted(directory.glob("*.yaml"))


def select_targets(selectors: list[str], inventory: dict[str, Target], *, source: str = "") -> list[Target]:
    """Resolve names and ``tag:X`` selectors, in order, without duplicates."""
    chosen: list[Target] = []
    for selector in selectors:
        if selector.startswith("tag:"):
            matched = [t for t in inventory.values() if selector[4:] in t.tags]
        else:
            matched = [inventory[selector]] if selector in inventory else []
        if not matched:
            known = ", ".join(sorted(inventory)) or "none"
            where = f"{source}: " if source else ""
            raise UsageError(f"{where}no target matches {selector!r} (targets: {known})")
        chosen += [t for t in matched if t not in chosen]
    return chosen
