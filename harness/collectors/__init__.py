"""Collectors: background samplers during a run (``blockstat``, ``threads``, ...), registered by name
(:mod:`harness.collectors.base`).

A new collector is a ``@register_collector`` CollectorKind subclass in a module here (plus that module's
name in the import below) and its parser in ``harness/parsers``; the target side is ``runner/collectors/``.
"""

from __future__ import annotations

# isort: off
# the registry's order is the order of 'known:' in error messages: the sampler's collectors first
from harness.collectors import sampler  # noqa: F401  (registers blockstat, threads)
from harness.collectors import platform  # noqa: F401  (registers the platform collectors)
from harness.collectors import counters  # noqa: F401  (registers counters)
from harness.collectors import offcpu  # noqa: F401  (registers offcpu)
# isort: on
from harness.collectors.base import (
    COLLECTORS,
    CollectorKind,
    Rows,
    check_collectors,
    collector_configs,
    register_collector,
)

__all__ = ["COLLECTORS", "CollectorKind", "Rows", "check_collectors", "collector_configs", "register_collector"]
