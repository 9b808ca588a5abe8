"""Engines the harness builds and runs (llama.cpp first), registered by name (:mod:`harness.engines.base`).

A new engine is a ``@register_engine`` Engine subclass in its own subpackage here (its build code beside
it) plus that module in the import below; steps name it in ``StepKind.engine``, experiments configure it
under ``engine: {NAME: {source, cmake, patches}}``.
"""

from __future__ import annotations

from harness.engines.base import ENGINES, Engine, check_engines, register_engine
from harness.engines.bigmoeonedge import engine as _bigmoeonedge  # noqa: F401  (registers bigmoeonedge)
from harness.engines.llamacpp import engine as _llamacpp  # noqa: F401  (registers llama.cpp)

__all__ = ["ENGINES", "Engine", "check_engines", "register_engine"]
