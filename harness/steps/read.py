"""The ``read`` step: the runner itself reads a file sequentially or in a random permutation.

A baseline with a known byte count: a cold read must move about the file's size from the device,
a warm one about nothing. That proves the block-stat accounting before anyone trusts it on a model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from harness.config.validate import StrictModel
from harness.steps.base import Rows, StepKind, register_step
from harness.units import parse_size
from runner.contract import RunRecord


class ReadConfig(StrictModel):
    file: str
    pattern: Literal["seq", "rand"] = "seq"
    bs: str | int = "1M"
    seed: int = 0
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("bs")
    @classmethod
    def _bs(cls, value: str | int) -> str | int:
        if parse_size(value) < 4096:
            raise ValueError("expected a block size of at least 4k")
        return value


# Rough planning speeds; only used for `harness plan` estimates.
_PLAN_BYTES_PER_S = {"seq": 400e6, "rand": 150e6}


@register_step
class ReadStep(StepKind):
    name = "read"
    Config = ReadConfig

    def estimate_s(self, config: ReadConfig, file_sizes: dict[str, int]) -> float:
        size = file_sizes.get(config.file, 0)
        return size / _PLAN_BYTES_PER_S[config.pattern] + 1.0

    def runner_spec(self, config: ReadConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        return {"file": files[config.file], "pattern": config.pattern, "bs_bytes": parse_size(config.bs),
                "seed": config.seed, "timeout_s": config.timeout_s or 3600.0}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "read.json"
        if not output.exists():
            return {}
        return {"reads": [json.loads(output.read_text())]}
