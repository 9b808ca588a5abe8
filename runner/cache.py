"""Cache state: prepared with the native ``cachectl`` and verified with mincore, never assumed."""

import json
import subprocess
import time

COLD_MAX_PCT = 1.0
WARM_MIN_PCT = 99.0


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


def prepare(native_bin, condition, files):
    """Bring ``files`` into ``condition`` (cold|warm|none) and return the measured residency.

    DONTNEED skips pages that are dirty or mapped by someone; retrying a few times covers writeback
    still in flight. A cold run that stays resident is refused rather than measured wrongly.
    """
    files = list(files)
    if condition == "cold":
        for _attempt in range(5):
            _cachectl(native_bin, "drop", files)
            rows = residency(native_bin, files)
            if all(r["resident_pct"] <= COLD_MAX_PCT for r in rows):
                return rows
            time.sleep(0.2)
        worst = max(rows, key=lambda r: r["resident_pct"])
        raise CacheStateError("cold cache not reached: %s is still %.1f %% resident after DONTNEED (limit %.0f %%;"
                              " is it mapped by a running process?)" % (worst["path"], worst["resident_pct"],
                                                                       COLD_MAX_PCT))
    if condition == "warm":
        _cachectl(native_bin, "prefetch", files)
        rows = residency(native_bin, files)
        cold = [r for r in rows if r["resident_pct"] < WARM_MIN_PCT]
        if cold:
            raise CacheStateError("warm cache not reached: %s is %.1f %% resident after reading it (need %.0f %%;"
                                  " not enough free memory?)" % (cold[0]["path"], cold[0]["resident_pct"],
                                                                 WARM_MIN_PCT))
        return rows
    return residency(native_bin, files)
