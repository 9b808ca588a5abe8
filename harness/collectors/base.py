"""What every collector shares: the :class:`CollectorKind` base, the registry of collectors by name,
and the check of an experiment's ``collect:`` block against that registry.

A collector validates its options, tells the runner what to start, and turns the runner's raw output
into table rows. The target side lives in ``runner/collectors/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from harness.config.validate import StrictModel, validate
from harness.parsers import parse
from harness.registry import Registry, RegistryError, check_implemented, origin
from runner.contract import CollectorSpec, RunRecord

Rows = list[dict[str, Any]]


class CollectorKind:
    name: ClassVar[str]
    Config: ClassVar[type[StrictModel]]
    table: ClassVar[str]
    raw_file: ClassVar[str]
    parser: ClassVar[str]

    def runner_spec(self, config: Any) -> CollectorSpec:
        """What the runner starts (its ``collectors`` entry): the kind and its period. A kind whose Config has more
        options says them in its own runner_spec (tests/test_collector_spec.py: every option reaches the spec)."""
        return {"kind": self.name, "period_ms": config.period_ms}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        raw = run_dir / self.raw_file
        if not raw.exists():
            return {}
        return {self.table: parse(self.parser, raw.read_bytes())}


COLLECTORS: Registry[CollectorKind] = Registry("collector")
_DECLARED = ("name", "Config", "table", "raw_file", "parser")  # what every collector class says (its ClassVars)


def register_collector(cls: type[CollectorKind]) -> type[CollectorKind]:
    check_implemented(cls, "collector")
    missing = [attr for attr in _DECLARED if not hasattr(cls, attr)]
    if missing:
        raise RegistryError(f"collector {origin(cls)} does not declare {', '.join(missing)}")
    COLLECTORS.add(cls.name, cls(), cls)
    return cls


def collector_configs(experiment: Any, doc: Any) -> dict[str, StrictModel]:
    configs: dict[str, StrictModel] = {}
    for name, options in experiment.collectors().items():
        if name not in COLLECTORS:
            raise doc.error(("collect", name), COLLECTORS.unknown_message(name))
        configs[name] = validate(COLLECTORS[name].Config, options, doc, ("collect", name))
    return configs


def check_collectors(experiment: Any, doc: Any) -> None:
    collector_configs(experiment, doc)
