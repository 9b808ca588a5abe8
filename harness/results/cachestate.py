"""Whether a cold run's page cache was really cleared, as table columns and labels.

Per-file drops (fadvise DONTNEED on Linux/Android) are proven by the residency check, which refuses a
cold run that stays resident. macOS can only purge the whole cache, and only as root or with
``sudo -n``; where that is not allowed the run is measured anyway (the InferSSD Mac numbers were)
and every table and report line that shows its cache state says it was NOT cleared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.parsers.cachedrop import NOT_CLEARED, cache_drop_columns

if TYPE_CHECKING:  # pandas is imported where a frame is made
    import pandas as pd

__all__ = ["NOT_CLEARED", "cache_drop_columns", "cache_label", "not_cleared"]


def not_cleared(frame: pd.DataFrame) -> pd.Series:
    """Rows (runs or requests) whose cold condition was not reached because the cache could not be cleared."""
    import pandas as pd

    if "cache_cleared" not in frame:
        return pd.Series(False, index=frame.index)
    # runs without a purge have no value (None/NaN/NA), which is not "not cleared"
    return frame["cache_cleared"].astype("boolean").eq(False).fillna(False).astype(bool)


def cache_label(frame: pd.DataFrame) -> pd.Series:
    """The ``cache`` column as shown in reports: ``cold (NOT cleared)`` where the purge was not allowed."""
    return frame["cache"].where(~not_cleared(frame), frame["cache"] + f" ({NOT_CLEARED})")
