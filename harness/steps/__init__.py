"""Steps: what a run does. Each kind is a small class registered by name (:mod:`harness.steps.base`).

A new step is one module here (its Config, a ``@register_step`` StepKind subclass) plus its name in the
import below; its target side is a module in ``runner/steps``.
"""

from __future__ import annotations

from harness.steps import (  # noqa: F401  (each registers its steps)
    bmoe,
    declared,
    equivalence,
    fio,
    idle,
    llamacpp,
    read,
    replay,
)
from harness.steps.base import STEP_ITEM_KEYS, STEPS, Rows, StepKind, check_steps, register_step, step_kind

__all__ = ["STEPS", "STEP_ITEM_KEYS", "Rows", "StepKind", "check_steps", "register_step", "step_kind"]
