"""Errors raised while preparing or building an engine."""

from __future__ import annotations

from harness.errors import HarnessError


class BuildError(HarnessError):
    """An engine source could not be fetched, patched or built; the message is one line and names the log."""
