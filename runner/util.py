"""Small helpers shared by the runner's modules."""

import errno
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

CHUNK = 1 << 20
RUNNER_DIR = os.path.dirname(os.path.abspath(__file__))  # this package: runner/ on the target
TOOL_TIMEOUT_S = 15


def native_bin(spec):
    """Where the native tools (cachectl, sampler) are: the run spec's ``native_bin``, else runner/native/bin."""
    return spec.get("native_bin") or os.path.join(RUNNER_DIR, "native", "bin")


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


def run_tool(argv, timeout=TOOL_TIMEOUT_S):
    """(stdout, error): error is a one-line reason when the tool is missing, fails or hangs."""
    if not shutil.which(argv[0]):
        return None, "%s not found on PATH" % argv[0]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "%s: %s" % (" ".join(argv), exc)
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        err = (done.stderr.decode(errors="replace").strip() or out.strip()).splitlines()[-1:] or [""]
        return out or None, "%s exited %d: %s" % (" ".join(argv), done.returncode, err[0][:200])
    return out, None


OWNER_SUFFIX = ".harness-owner"


class NotOurs(Exception):
    """A file the harness did not create: it is never overwritten or deleted."""


def _owner(path):
    try:
        with open(path + OWNER_SUFFIX) as handle:
            return handle.read().strip()
    except OSError:
        return None


def free_bytes(path):
    """Free space for an unprivileged writer on the file system holding ``path`` (or its nearest existing
    parent): statvfs, the same on Linux, macOS and Android."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    stat = os.statvfs(where)
    return {"path": where, "free_bytes": stat.f_bavail * stat.f_frsize}


def make_data_file(path, size, owner=None):
    """Incompressible data (so no layer can cheat), fsynced so DONTNEED can evict every page.

    With ``owner`` (the campaign's set id) the file is marked as that campaign's (PATH.harness-owner): an
    existing file is overwritten only when the mark says it is the same campaign's (a resumed one), never a
    file the harness did not make. A failed write (disk full) leaves no partial file behind."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # refused before a byte is written: a disk that fills mid-file wastes minutes of urandom and the page cache
    # (the new file is written beside an old one before it replaces it: the whole size must be free)
    free = free_bytes(directory)["free_bytes"]
    if size > free:
        raise OSError(errno.ENOSPC, "scratch disk full: %.0f MB free on %s, %s needs %.0f MB"
                      % (free / 1e6, directory, os.path.basename(path), size / 1e6))
    if owner is not None:
        if os.path.lexists(path) and _owner(path) != owner:
            raise NotOurs("%s exists and the harness did not create it for this campaign: refusing to overwrite "
                          "it (choose another --scratch or remove it)" % path)
        with open(path + OWNER_SUFFIX, "w") as mark:
            mark.write(owner + "\n")
    tmp = path + ".partial"
    written = 0
    try:
        with open(tmp, "wb") as out:
            while written < size:
                block = os.urandom(min(CHUNK, size - written))
                out.write(block)
                written += len(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if owner is not None and not os.path.exists(path) and os.path.exists(path + OWNER_SUFFIX):
            os.unlink(path + OWNER_SUFFIX)
        raise
    return {"path": path, "size_bytes": written}


def remove_data_file(path, owner, inside):
    """Delete a data file this campaign created: only when its real path is inside ``inside`` (the scratch
    directory) and its mark names ``owner``; then the directory too if the harness made it and it is empty."""
    real, root = os.path.realpath(path), os.path.realpath(inside)
    if os.path.commonpath([real, root]) != root or real == root:
        raise NotOurs("%s is outside the scratch directory %s: not deleted" % (path, inside))
    if not os.path.lexists(path):
        return False
    if _owner(path) != owner:
        raise NotOurs("%s was not created by this campaign: not deleted" % path)
    os.unlink(path)
    os.unlink(path + OWNER_SUFFIX)
    return True


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


def read_value(path):
    """A sysfs, procfs or cgroup file's value, stripped; None when it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def write_value(path, value):
    # one write() per value: cgroup, sysfs and sysctl files take a whole value per write call
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def state_dir():
    """Where machine-wide settings a run changed (read_ahead_kb, cgroups, task_delayacct) are recorded until undone:
    /run (cleared at reboot, exactly when the kernel resets them), any runner on the machine can repair from it."""
    configured = os.environ.get("HARNESS_EMULATE_STATE")
    if configured:
        return configured
    return "/run/harness" if os.path.isdir("/run") else os.path.join(tempfile.gettempdir(), "harness-state")
