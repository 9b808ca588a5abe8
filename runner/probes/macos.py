"""macOS facts (raw sysctl, sw_vers and diskutil output) and the page cache drop there: ``purge``, which
needs root or passwordless sudo."""

import os
import shutil

from runner.util import run_tool

MACOS_SYSCTL = ("hw.model", "hw.memsize", "hw.ncpu", "hw.pagesize", "machdep.cpu.brand_string",
                "hw.perflevel0.physicalcpu", "hw.perflevel1.physicalcpu", "hw.perflevel0.name",
                "hw.perflevel1.name", "kern.osproductversion")


def macos_facts():
    facts = {}
    facts["sysctl_raw"], facts["sysctl_error"] = run_tool(["sysctl"] + list(MACOS_SYSCTL))
    facts["sw_vers_raw"], facts["sw_vers_error"] = run_tool(["sw_vers"])
    facts["diskutil_raw"], facts["diskutil_error"] = run_tool(["diskutil", "info", "/"])
    facts["cache_drop"], facts["cache_drop_error"] = cache_drop_method()
    return facts


def cache_drop_method():
    """("purge", None) when the page cache can be dropped here without a password, else (None, reason).

    Asks sudo whether purge would be allowed (``sudo -n -l``) instead of running it: a probe must
    not empty the cache."""
    purge = shutil.which("purge")
    if not purge:
        return None, "purge not found on PATH"
    if os.geteuid() == 0:
        return "purge", None
    out, err = run_tool(["sudo", "-n", "-l", purge], timeout=10)
    if err:
        return None, "sudo -n purge is not allowed (add a NOPASSWD sudoers rule for %s): %s" % (purge, err)
    return "purge", None


def drop_page_cache_macos():
    """Drop the whole page cache with purge; the record says plainly when the cache was NOT cleared."""
    method, reason = cache_drop_method()
    if method is None:
        return {"method": None, "cleared": False, "reason": reason}
    argv = [shutil.which("purge")] if os.geteuid() == 0 else ["sudo", "-n", shutil.which("purge")]
    _out, err = run_tool(argv, timeout=300)
    if err:
        return {"method": "purge", "cleared": False, "reason": err}
    return {"method": "purge", "cleared": True, "reason": None}
