"""Target inventory: ``targets/NAME.yaml`` describes one board or machine.

A target can also come from a labgrid coordinator: ``labgrid: {coordinator: "host:20408", place: orin-01}`` in
the file, or ``labgrid:KEY=VALUE[,KEY=VALUE][@FARM]`` as a selector ("any place with those tags", labgrid's
reservation filter). Its SSH address comes from the place's NetworkService resource when it is locked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from harness.config.validate import StrictModel, validate
from harness.config.yamlsrc import YamlDoc, load_yaml
from harness.errors import UsageError

LABGRID_PREFIX = "labgrid:"
DEFAULT_COORDINATOR = "127.0.0.1:20408"


class LabgridRef(StrictModel):
    """Where a target's place lives: a coordinator and either one place or tags any free place must carry."""

    coordinator: str | None = Field(default=None, description="HOST:PORT; default: $LG_COORDINATOR, else "
                                    f"{DEFAULT_COORDINATOR}")
    place: str | None = Field(default=None, description="one place by name (else: any place with `tags`)")
    tags: dict[str, str] = Field(default_factory=dict, description="reservation filter, e.g. {board: orin}")

    @property
    def address(self) -> str:
        return self.coordinator or os.environ.get("LG_COORDINATOR") or DEFAULT_COORDINATOR

    @property
    def filters(self) -> dict[str, str]:
        """The coordinator's reservation filter: the place by name, else its tags."""
        return {"name": self.place} if self.place else dict(self.tags)


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
    labgrid: LabgridRef | None = Field(default=None, description="the place on a labgrid coordinator this board "
                                       "is (its SSH address and user come from the place's NetworkService)")
    selector: str = Field(default="", description="set by the harness: the labgrid:... selector this came from")

    @model_validator(mode="before")
    @classmethod
    def _labgrid_means_ssh(cls, data: Any) -> Any:
        """A labgrid place is reached over SSH: ``transport`` may be left out or give only key/known_hosts."""
        if isinstance(data, dict) and data.get("labgrid") is not None and "transport" not in data:
            data = {**data, "transport": {"ssh": {}}}
        return data

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
        if isinstance(self.transport, str):
            return {}
        options = next(iter(self.transport.values()))
        return dict(options) if options else {}


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
    """Resolve names, ``tag:X`` and ``labgrid:K=V`` selectors, in order, without duplicates."""
    chosen: list[Target] = []
    for selector in selectors:
        if selector.startswith(LABGRID_PREFIX):
            matched = [labgrid_target(selector, inventory, source=source)]
        elif selector.startswith("tag:"):
            matched = [t for t in inventory.values() if selector[4:] in t.tags]
        else:
            matched = [inventory[selector]] if selector in inventory else []
        if not matched:
            known = ", ".join(sorted(inventory)) or "none"
            where = f"{source}: " if source else ""
            raise UsageError(f"{where}no target matches {selector!r} (targets: {known})")
        chosen += [t for t in matched if t not in chosen]
    return chosen


def parse_labgrid_selector(selector: str, *, source: str = "") -> tuple[dict[str, str], str | None]:
    """``labgrid:board=orin,soc=t234@farm`` -> ({board: orin, soc: t234}, "farm"). Keys are labgrid tag keys."""
    body, _, farm = selector[len(LABGRID_PREFIX):].partition("@")
    where = f"{source}: " if source else ""
    tags: dict[str, str] = {}
    for pair in filter(None, body.split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{where}{selector!r}: expected labgrid:KEY=VALUE[,KEY=VALUE][@FARM] "
                             f"(e.g. labgrid:board=orin), got {pair!r}")
        tags[key.strip()] = value.strip()
    if not tags:
        raise UsageError(f"{where}{selector!r}: give at least one tag, e.g. labgrid:board=orin")
    return tags, farm or None


def labgrid_target(selector: str, inventory: dict[str, Target], *, source: str = "") -> Target:
    """"Any place with these tags": a target whose place the coordinator picks when the campaign reserves it.

    Everything but the place (coordinator, platform, workdir, SSH key and known_hosts) comes from the farm: the
    inventory's target with a ``labgrid:`` block and no place (named after ``@``, or the only one); without one,
    the coordinator is $LG_COORDINATOR and the rest is the defaults."""
    tags, farm_name = parse_labgrid_selector(selector, source=source)
    farms = {name: t for name, t in inventory.items() if t.labgrid is not None and t.labgrid.place is None}
    where = f"{source}: " if source else ""
    if farm_name is not None:
        if farm_name not in farms:
            raise UsageError(f"{where}{selector!r}: no farm target {farm_name!r} (a targets/NAME.yaml with a "
                             f"labgrid: block and no place; farms: {', '.join(sorted(farms)) or 'none'})")
        farm: Target | None = farms[farm_name]
    elif len(farms) > 1:
        raise UsageError(f"{where}{selector!r}: several farms ({', '.join(sorted(farms))}): say which, "
                         f"e.g. {selector}@{sorted(farms)[0]}")
    else:
        farm = next(iter(farms.values()), None)
    base = farm.model_dump() if farm is not None else {"name": selector, "transport": {"ssh": {}}}
    ref = {"coordinator": farm.labgrid.coordinator if farm and farm.labgrid else None, "tags": tags}
    return Target.model_validate({**base, "name": selector, "labgrid": ref, "selector": selector,
                                  "tags": sorted(set(base.get("tags", [])) | {f"{k}={v}" for k, v in tags.items()})})
