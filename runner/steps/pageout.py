"""The page cache around a request to a running llama-server: a cold request evicts the model's pages, including
those the server has mapped; before any request the server's own files (executable, libraries) are read in, so that
the request's faults are the model's."""

import ctypes
import os
import time

from runner import pagecache
from runner.util import read_text


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


# Same numbers on x86_64, aarch64 and arm (asm-generic table); Linux >= 5.10.
SYS_PIDFD_OPEN, SYS_PROCESS_MADVISE, MADV_PAGEOUT = 434, 440, 21


def _maps(pid):
    """(start, length, path) of each file-backed mapping of ``pid``; [] where there is no /proc (macOS)."""
    out = []
    for line in (read_text("/proc/%d/maps" % pid, "") or "").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append((start, end - start, parts[5]))
    return out


def _mapped_ranges(pid, path):
    real = os.path.realpath(path)
    return [(start, n) for start, n, mapped in _maps(pid) if mapped == real]


# A CPU build's executable and libraries are tens of MiB; a CUDA build maps libcublasLt & co (hundreds of MiB,
# mostly never touched): reading those whole would take memory from the model on an 8 GiB board, so they are left.
ENGINE_FILE_MAX_BYTES = 64 << 20


def warm_engine_files(native_bin, pid, model):
    """Read into the page cache the files ``pid`` maps other than the model -- its executable, shared libraries,
    locale data -- where they are not wholly cached already and at most ENGINE_FILE_MAX_BYTES each.

    A request's major faults and device reads are meant to be the model's. Code first run by a request (sampling,
    streaming, a libm routine) faults its page in from the device when that page is not cached, which a long
    session or a cold-cache purge makes likely; reading these files beforehand turns those faults minor. Returns
    how many files were mapped and read, the larger ones left uncached (``left``), and an error string where
    reading failed (the request is measured all the same).
    """
    real = os.path.realpath(model)
    # readable ones only: on Android the server maps /apex and /system files the shell user may not open
    files = sorted({path for _, _, path in _maps(pid)
                    if path != real and os.path.isfile(path) and os.access(path, os.R_OK)})
    out = {"files": len(files), "read": 0}
    try:
        partial = [r for r in pagecache.residency(native_bin, files) if r["pages_resident"] < r["pages_total"]]
        small = [r["path"] for r in partial if r["size_bytes"] <= ENGINE_FILE_MAX_BYTES]
        pagecache.prefetch(native_bin, small)
    except pagecache.CacheStateError as exc:
        return {**out, "error": str(exc)}
    out["read"] = len(small)
    left = [r["path"] for r in partial if r["size_bytes"] > ENGINE_FILE_MAX_BYTES]
    if left:
        out["left"] = left
    return out


def page_out(pid, path):
    """Evict the pages of ``path`` that the server has mapped (process_madvise MADV_PAGEOUT).

    fadvise(DONTNEED) leaves every page that a process has mapped, and a llama.cpp server maps the whole
    model: without this a "cold" request would find the model fully resident. Returns bytes advised, or an
    error string where the kernel cannot (then the measured residency shows what the request really saw).
    """
    ranges = _mapped_ranges(pid, path)
    if not ranges:
        return {"mapped_bytes": 0}
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    pidfd = libc.syscall(SYS_PIDFD_OPEN, ctypes.c_int(pid), ctypes.c_uint(0))
    if pidfd < 0:
        return {"mapped_bytes": sum(n for _, n in ranges), "error": "pidfd_open: %s" % os.strerror(ctypes.get_errno())}
    try:
        vec = (_IoVec * len(ranges))(*[_IoVec(start, n) for start, n in ranges])
        done = libc.syscall(SYS_PROCESS_MADVISE, ctypes.c_int(pidfd), vec, ctypes.c_size_t(len(ranges)),
                            ctypes.c_int(MADV_PAGEOUT), ctypes.c_uint(0))
        out = {"mapped_bytes": sum(n for _, n in ranges)}
        if done < 0:
            out["error"] = "process_madvise(MADV_PAGEOUT): %s" % os.strerror(ctypes.get_errno())
        else:
            out["paged_out_bytes"] = done
        return out
    finally:
        os.close(pidfd)


def make_cold(native_bin, pid, model):
    """Page out the server's mapping, DONTNEED the file (retrying briefly for late writeback), measure.

    On macOS the drop is a whole-cache purge; its record (cleared or NOT, and why) goes with the evicted bytes."""
    evicted = page_out(pid, model)
    for _attempt in range(5):
        dropped = pagecache.drop(native_bin, [model])
        rows = pagecache.residency(native_bin, [model])
        if dropped is not None:
            evicted["cache_drop"] = dropped
            if not dropped["cleared"]:
                break  # retrying cannot help: purge is not allowed (or failed), and the record says so
        if rows[0]["resident_pct"] <= pagecache.COLD_MAX_PCT:
            break
        time.sleep(0.1)
    return evicted, rows
