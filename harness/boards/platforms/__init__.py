"""Platforms: what kind of machine a target is (linux, jetson, android, macos). The base class and the
registry are in ``base``; each module here registers one platform. To add one: a module with a
``base.Platform`` subclass decorated with ``@register_platform``, imported below."""

from harness.boards.platforms import android as _android  # noqa: F401  (registers)
from harness.boards.platforms import jetson as _jetson  # noqa: F401  (registers)
from harness.boards.platforms import linux as _linux  # noqa: F401  (registers)
from harness.boards.platforms import macos as _macos  # noqa: F401  (registers)
from harness.boards.platforms.base import PLATFORMS, Check, ExpectationResult, Platform, register_platform

__all__ = ["PLATFORMS", "Check", "ExpectationResult", "Platform", "register_platform"]
