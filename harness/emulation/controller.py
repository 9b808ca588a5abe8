"""Board emulation, controller side: the ``emulate:`` key, its preflight, and how runs show it.

``emulate: {memory: 512M, read_bytes_per_s: 600M, read_iops: 5000, read_ahead_kb: 128}`` (every key
optional; values may be matrix templates such as ``"{read_ahead_kb}"``) runs each step in a fresh
cgroup with that budget and sets the block device's read_ahead_kb for the run. The target side is
``runner/emulation/``; a machine that cannot do it refuses the experiment before a result set exists.
How runs show it (``emu_*`` columns, the figures' footer note) is ``harness.results.emulation``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import Field, field_validator

from harness.config.experiment import matrix_cells
from harness.config.template import render
from harness.config.validate import StrictModel, validate
from harness.config.yamlsrc import YamlDoc
from harness.errors import EmulationError, TargetError
from harness.units import format_size, parse_size
from runner.contract import EmulateSpec, RunSpec

# smaller than this and not even the runner's reader starts: a typo (64k for 64M), not a budget
MIN_MEMORY_BYTES = 4 << 20


class EmulateConfig(StrictModel):
    memory: str | int | None = Field(default=None, description="memory budget, e.g. 512M (page cache included)")
    read_bytes_per_s: str | int | None = Field(default=None, description="device read throttle, e.g. 600M")
    read_iops: int | None = Field(default=None, gt=0, description="device read IOPS throttle")
    read_ahead_kb: int | None = Field(default=None, ge=0, description="block device read_ahead_kb for the run")

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | int | None) -> str | int | None:
        if value is not None and parse_size(value) < MIN_MEMORY_BYTES:
            raise ValueError(f"expected a memory budget of at least {format_size(MIN_MEMORY_BYTES)}, like 512M")
        return value

    @field_validator("read_bytes_per_s")
    @classmethod
    def _rate(cls, value: str | int | None) -> str | int | None:
        if value is not None and parse_size(value) <= 0:
            raise ValueError("expected a positive rate in bytes per second, like 600M")
        return value

    def runner_spec(self) -> EmulateSpec | None:
        """What ``runner/emulation/`` reads: plain byte counts, plus what the user wrote."""
        spec: EmulateSpec = {
            "memory_bytes": None if self.memory is None else parse_size(self.memory),
            "read_bytes_per_s": None if self.read_bytes_per_s is None else parse_size(self.read_bytes_per_s),
            "read_iops": self.read_iops,
            "read_ahead_kb": self.read_ahead_kb,
        }
        if all(value is None for value in spec.values()):
            return None
        spec["requested"] = {k: v for k, v in self.model_dump().items() if v is not None}
        return spec


def emulation_for(raw: dict[str, Any] | None, params: dict[str, Any], doc: YamlDoc) -> EmulateConfig | None:
    """The ``emulate:`` block rendered for one matrix cell and validated (ConfigError with file:line)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise doc.error(("emulate",), "expected a mapping like {memory: 512M, read_ahead_kb: 128}")
    return validate(EmulateConfig, render(raw, params, doc, ("emulate",)), doc, ("emulate",))


def check_emulation(experiment: Any, doc: YamlDoc) -> None:
    """Every matrix cell's emulation is valid: a bad template or size fails before any run."""
    for params in _cells(experiment):
        emulation_for(experiment.emulate, params, doc)


def runner_spec(experiment: Any, params: dict[str, Any], doc: YamlDoc) -> EmulateSpec | None:
    config = emulation_for(experiment.emulate, params, doc)
    return config.runner_spec() if config else None


def preflight(session: Any, experiment: Any, doc: YamlDoc, paths: list[str]) -> None:
    """Ask the target whether it can emulate what the experiment wants; EmulationError (exit 2) if not."""
    wanted: dict[str, int] = {}
    for params in _cells(experiment):
        spec = runner_spec(experiment, params, doc) or {}
        wanted.update({k: 1 for k, v in spec.items() if v is not None and k != "requested"})
    if not wanted:
        return
    argv = [session.python, "-m", "runner.emulation", "check", "--emulate", json.dumps(wanted),
            "--block-device", session.target.block_device or "auto"]
    for path in paths:
        argv += ["--file", path]
    try:
        done = session.transport.run(argv, cwd=session.runner_root, timeout=60)
    except TargetError as exc:
        raise EmulationError(f"target {session.target.name}: emulation check failed: {exc}") from None
    if done.returncode != 0:
        text = (done.stdout or done.stderr).decode(errors="replace").strip()
        raise EmulationError(f"target {session.target.name}: {text.splitlines()[-1] if text else 'check failed'}")


def repair(session: Any, spec: RunSpec | None, say: Callable[[str], None]) -> None:
    """After a runner died (killed, crashed) in an emulated run, or one that collected counters: restore
    read_ahead_kb and kernel.task_delayacct and remove its cgroup now, rather than whenever the next runner starts
    on that machine. ``spec`` None: the run's spec is not known (an adopted run's was unreadable): nothing to undo."""
    if spec is None or (not spec.get("emulate")
                        and not any(c.get("kind") == "counters" for c in spec.get("collectors") or [])):
        return
    try:
        done = session.transport.run([session.python, "-m", "runner.emulation", "repair"], cwd=session.runner_root,
                                     env={"HARNESS_EMULATE_DURABLE": f"{session.workdir}/state"}, timeout=60)
    except TargetError as exc:
        say(f"{session.target.name}: emulation repair failed ({exc}); the next run on it repairs")
        return
    text = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or text not in ("", "null"):
        say(f"{session.target.name}: undid the emulation a dead runner left: {text or done.stderr.decode()[-200:]}")


def _cells(experiment: Any) -> list[dict[str, Any]]:
    return matrix_cells(experiment.matrix)
