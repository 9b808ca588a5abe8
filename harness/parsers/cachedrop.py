"""The runner's page-cache drop record (a cold run's purge on macOS) -> ``cache_cleared`` / ``cache_note``
columns, for the runs table and the llama-server requests table.

Per-file drops (fadvise DONTNEED on Linux/Android) are proven by the residency check and leave no record;
macOS can only purge the whole cache, and only as root or with ``sudo -n``.
"""

from __future__ import annotations

from typing import Any

NOT_CLEARED = "NOT cleared"


def cache_drop_columns(drop: dict[str, Any] | None) -> dict[str, Any]:
    """``cache_cleared`` and ``cache_note`` from a runner's purge record; nothing for a per-file drop."""
    if drop is None:
        return {}
    cleared = bool(drop.get("cleared"))
    return {"cache_cleared": cleared,
            "cache_note": None if cleared else f"page cache {NOT_CLEARED}: {drop.get('reason')}"}
