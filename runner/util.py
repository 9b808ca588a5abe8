"""Small helpers shared by the runner's modules."""

import hashlib
import json
import os
import time

CHUNK = 1 << 20


def now():
    """Wall and monotonic time together, so records can be placed on both axes."""
    return {"wall": time.time(), "mono_ns": time.monotonic_ns()}


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        json.dump(data, out, indent=1, sort_keys=True, default=str)
        out.write("\n")
    os.replace(tmp, path)


def read_text(path, default=None):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return default


def tail(path, lines=20):
    text = read_text(path, "") or ""
    return "\n".join(text.strip().splitlines()[-lines:])


def make_data_file(path, size):
    """Incompressible data (so no layer can cheat), fsynced so DONTNEED can evict every page."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".partial"
    written = 0
    with open(tmp, "wb") as out:
        while written < size:
            block = os.urandom(min(CHUNK, size - written))
            out.write(block)
            written += len(block)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return {"path": path, "size_bytes": written}


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(run_dir):
    """SHA256SUMS over every file of the run directory, so a pulled copy can be verified."""
    lines = []
    for root, _dirs, files in os.walk(run_dir):
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, run_dir)
            if rel in ("SHA256SUMS", "DONE"):
                continue
            lines.append("%s  %s" % (sha256_file(full), rel))
    with open(os.path.join(run_dir, "SHA256SUMS"), "w") as out:
        out.write("\n".join(sorted(lines, key=lambda line: line[66:])) + "\n")
