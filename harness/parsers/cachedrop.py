"""The runner's page-cache drop record (a cold run's purge on macOS) -> ``cache_cleared`` / ``cache_note``
columns, for the runs table and the llama-server requests table.

Per-file drops (fadvise DONTNEED on Linux/Android) are proven by the residency check and leave no record;
macOS can only purge the whole cache, and only as root or with ``sudo -n``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

NOT_CLEARED = "NOT cleared"


class CacheDropColumns(TypedDict, total=False):
    """Both or neither: a purge's outcome, and why it failed (None when it cleared the cache)."""

    cache_cleared: bool
    cache_note: str | None


def cache_drop_columns(drop: Mapping[str, object] | None) -> CacheDropColumns:
    """``cache_cleared`` and ``cache_note`` from a runner's purge record; nothing for a per-file drop."""
    if drop is None:
        return {}
    cleared = bool(drop.get("cleared"))
    return {"cache_cleared": cleared,
            "cache_note": None if cleared else f"page cache {NOT_CLEARED}: {drop.get('reason')}"}
