"""Page cache state of the run's files: prepared with the native ``cachectl`` and verified with mincore, never assumed.

macOS has no per-file drop: a cold run there empties the whole page cache with ``purge`` (root or
``sudo -n``). Where that is not allowed the run goes on, because that is how the InferSSD Mac
numbers were measured, but the record says plainly that the cache was NOT cleared and why.
"""

import json
import subprocess
import time

from runner.contract import COLD_MAX_PCT, WARM_MIN_PCT  # noqa: F401  (steps and tests read them from here too)
from runner.probes import macos, platforms


class CacheStateError(Exception):
    pass


def _cachectl(native_bin, verb, files):
    argv = [native_bin + "/cachectl", verb] + list(files)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=3600, check=False)
    except OSError as exc:
        raise CacheStateError("cannot run %s: %s (build it with make -C runner/native)" % (argv[0], exc)) from None
    if done.returncode != 0:
        raise CacheStateError("cachectl %s failed: %s" % (verb, done.stderr.decode(errors="replace").strip()))
    return done.stdout.decode()


def residency(native_bin, files):
    if not files:
        return []
    return [json.loads(line) for line in _cachectl(native_bin, "residency", files).splitlines() if line.strip()]


def prefetch(native_bin, files):
    """Read ``files`` fully through the page cache (no residency check: see prepare for that)."""
    if files:
        _cachectl(native_bin, "prefetch", files)


def drop(native_bin, files):
    """Evict ``files`` from the page cache. Returns None where that is per file (fadvise DONTNEED: Linux,
    Android); on macOS the purge record ``{"method", "cleared", "reason"}``."""
    if platforms.detect() == "macos":
        return macos.drop_page_cache_macos()
    _cachectl(native_bin, "drop", files)
    return None


def prepare(native_bin, condition, files):
    """Bring ``files`` into ``condition`` (cold|warm|none); return the run record's ``cache`` entry:
    ``condition``, ``before`` (the measured residency) and, for a cold run on macOS, ``drop`` (the purge
    record; ``cleared: false`` with the reason when purge was not allowed or failed).

    DONTNEED skips pages that are dirty or mapped by someone; retrying a few times covers writeback
    still in flight. A warm read is repeated up to three times for pages reclaimed meanwhile. A cold run
    that stays resident is refused rather than measured wrongly, unless the cache could not be cleared at
    all: then it is measured and marked.
    """
    files = list(files)
    out = {"condition": condition}
    if condition == "cold":
        for _attempt in range(5):
            dropped = drop(native_bin, files)
            rows = residency(native_bin, files)
            if dropped is not None:
                out["drop"] = dropped
                if not dropped["cleared"]:
                    out["before"] = rows
                    return out
            if all(r["resident_pct"] <= COLD_MAX_PCT for r in rows):
                out["before"] = rows
                return out
            time.sleep(0.2)
        worst = max(rows, key=lambda r: r["resident_pct"])
        how = "purge" if "drop" in out else "DONTNEED"
        raise CacheStateError("cold cache not reached: %s is still %.1f %% resident after %s (limit %.0f %%;"
                              " is it mapped by a running process?)" % (worst["path"], worst["resident_pct"], how,
                                                                       COLD_MAX_PCT))
    if condition == "warm":
        # Pages read early can be reclaimed before the last ones arrive (other tenants, a tight cgroup);
        # reading again brings back only what went missing, so a few passes settle it or prove it cannot.
        for _attempt in range(3):
            prefetch(native_bin, files)
            rows = residency(native_bin, files)
            cold = [r for r in rows if r["resident_pct"] < WARM_MIN_PCT]
            if not cold:
                break
        if cold:
            raise CacheStateError("warm cache not reached: %s is %.1f %% resident after reading it (need %.0f %%;"
                                  " not enough free memory?)" % (cold[0]["path"], cold[0]["resident_pct"],
                                                                 WARM_MIN_PCT))
        out["before"] = rows
        return out
    out["before"] = residency(native_bin, files)
    return out
