"""Errors about model files."""

from __future__ import annotations

from harness.errors import UsageError


class ModelError(UsageError):
    """A model file is missing, is not a GGUF, or a synthetic model cannot be made as asked."""
