"""The ``idle`` step: the board left alone for a while with the collectors on, the idle window energy subtracts
(``energy: {idle_s: N}`` in the experiment puts one first on every target; docs/methodology.md, Energy). The target
side sleeps in a process of its own, so the run has a step process like any other and draws next to nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from harness.config.validate import StrictModel
from harness.steps.base import Rows, StepKind, register_step
from runner.contract import RunRecord


class IdleConfig(StrictModel):
    seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0


@register_step
class IdleStep(StepKind):
    name = "idle"
    Config = IdleConfig

    def estimate_s(self, config: IdleConfig, file_sizes: dict[str, int]) -> float:
        return config.seconds

    def runner_spec(self, config: IdleConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        return {"seconds": config.seconds}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        return {}  # its measurement is the collectors' (telemetry): the energy table reads it
