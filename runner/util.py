"""Small helpers shared by the runner's modules."""

import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from typing import TypedDict, Union

PathArg = Union[str, "os.PathLike[str]"]  # a str on the board, a Path from the controller

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
# Names in scratch are opened relative to the directory's fd and never through a symlink: a board user who can
# write into scratch could otherwise plant data.bin.partial -> /somewhere/else and have the runner (often root)
# overwrite it. O_NONBLOCK: a FIFO put there in a race fails to open instead of hanging the runner.
_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotOurs(Exception):
    """A file the harness did not create: it is never overwritten or deleted."""


def _entry(dir_fd, name):
    """lstat of ``name`` in the directory (a symlink itself, not what it points to), or None."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _refuse_odd(dir_fd, directory, names):
    """Every one of ``names`` that exists must be a plain file: a symlink, FIFO or directory there was put by
    someone else, and writing through it would reach a file outside scratch."""
    for name in names:
        st = _entry(dir_fd, name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise NotOurs("%s is %s: the harness writes nothing through it (remove it or choose another --scratch)"
                          % (os.path.join(directory, name), what))


def _owner(dir_fd, name):
    """The set id in ``name``'s mark, read without following a symlink; None when there is none."""
    try:
        fd = os.open(name + OWNER_SUFFIX, os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode(errors="replace").strip() if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _create(dir_fd, name):
    """A new file, created here and now: O_EXCL and O_NOFOLLOW, so nothing that was there is written."""
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dir_fd)


def _open_dir(directory):
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))


def directory_identity(path):
    """Which directory ``path`` is, so that two targets can tell whether they share it: this machine's boot (two
    names of one host, or two targets of one machine, give the same), the nearest existing directory's device and
    inode (a bind mount of it is the same directory, another file system at the same path is not) and the rest of
    the path below it (a scratch directory made later). JSON-ready."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    st = os.stat(where)
    boot = read_text("/proc/sys/kernel/random/boot_id", "") or ""  # Linux and Android; macOS: the host name alone
    return {"machine": "%s %s" % (socket.gethostname(), boot.strip()), "dev": st.st_dev, "ino": st.st_ino,
            "below": os.path.relpath(os.path.abspath(path), where), "path": os.path.realpath(path)}


class FreeSpace(TypedDict):
    path: str  # the nearest existing directory the figure is for
    free_bytes: int


def free_bytes(path: PathArg) -> FreeSpace:
    """Free space for an unprivileged writer on the file system holding ``path`` (or its nearest existing
    parent): statvfs, the same on Linux, macOS and Android."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    stat_ = os.statvfs(where)
    return {"path": where, "free_bytes": stat_.f_bavail * stat_.f_frsize}


def make_data_file(path, size, owner=None):
    """Incompressible data (so no layer can cheat), fsynced so DONTNEED can evict every page.

    With ``owner`` (the campaign's set id) the file is marked as that campaign's (PATH.harness-owner): an
    existing file is overwritten only when the mark says it is the same campaign's (a resumed one), never a
    file the harness did not make. A failed write (disk full) leaves no partial file behind. Every name is
    opened relative to the directory's fd, never through a symlink (a symlink there: NotOurs)."""
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # refused before a byte is written: a disk that fills mid-file wastes minutes of urandom and the page cache
    # (the new file is written beside an old one before it replaces it: the whole size must be free)
    free = free_bytes(directory)["free_bytes"]
    if size > free:
        raise OSError(errno.ENOSPC, "scratch disk full: %.0f MB free on %s, %s needs %.0f MB"
                      % (free / 1e6, directory, name, size / 1e6))
    dir_fd = _open_dir(directory)
    try:
        return {"path": path, "size_bytes": _make_in(dir_fd, directory, name, size, owner)}
    finally:
        os.close(dir_fd)


def _make_in(dir_fd, directory, name, size, owner):
    partial, mark = name + ".partial", name + OWNER_SUFFIX
    _refuse_odd(dir_fd, directory, (name, partial, mark))
    ours = owner is None or _owner(dir_fd, name) == owner
    for existing in (name, partial):
        if owner is not None and _entry(dir_fd, existing) is not None and not ours:
            raise NotOurs("%s exists and the harness did not create it for this campaign: refusing to overwrite "
                          "it (choose another --scratch or remove it)" % os.path.join(directory, existing))
    if owner is not None:
        if _entry(dir_fd, mark) is not None:  # this campaign's, or one left without its file: replaced, not written
            os.unlink(mark, dir_fd=dir_fd)
        fd = _create(dir_fd, mark)
        with os.fdopen(fd, "w") as out:
            out.write(owner + "\n")
    if _entry(dir_fd, partial) is not None:  # our own, left by a killed mkfile
        os.unlink(partial, dir_fd=dir_fd)
    written, made = 0, False
    try:
        fd = _create(dir_fd, partial)
        made = True
        with os.fdopen(fd, "wb") as out:
            while written < size:
                block = os.urandom(min(CHUNK, size - written))
                out.write(block)
                written += len(block)
            out.flush()
            os.fsync(out.fileno())
        # rename replaces the directory entry: whatever was at ``name`` is not written through
        os.replace(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if made and _entry(dir_fd, partial) is not None:
            os.unlink(partial, dir_fd=dir_fd)
        if owner is not None and _entry(dir_fd, name) is None and _entry(dir_fd, mark) is not None:
            os.unlink(mark, dir_fd=dir_fd)
        raise
    return written


def _within(path, root):
    real = os.path.realpath(path)
    return os.path.commonpath([real, root]) == root


def remove_data_file(path, owner, inside):
    """Delete a data file this campaign created: only when its real path is inside ``inside`` (the scratch
    directory), it is no symlink and its mark names ``owner``; names are unlinked relative to the directory's
    fd, checked to be the directory whose real path was checked."""
    real, root = os.path.realpath(path), os.path.realpath(inside)
    if os.path.commonpath([real, root]) != root or real == root:
        raise NotOurs("%s is outside the scratch directory %s: not deleted" % (path, inside))
    directory, name = os.path.split(os.path.abspath(path))
    try:
        dir_fd = _open_dir(directory)
    except FileNotFoundError:
        return False
    try:
        here, checked = os.fstat(dir_fd), os.stat(os.path.realpath(directory))
        if (here.st_dev, here.st_ino) != (checked.st_dev, checked.st_ino) or not _within(directory, root):
            raise NotOurs("%s changed while it was checked: not deleted" % directory)
        st = _entry(dir_fd, name)
        if st is None:
            return False
        if not stat.S_ISREG(st.st_mode) or _owner(dir_fd, name) != owner:
            raise NotOurs("%s was not created by this campaign: not deleted" % path)
        os.unlink(name, dir_fd=dir_fd)
        os.unlink(name + OWNER_SUFFIX, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return True


def trusted_uids():
    """Who may own the directories the runner writes in: root, the runner's user and, under sudo, the login."""
    uids = {0, os.geteuid(), os.getuid()}
    sudo = os.environ.get("SUDO_UID", "")
    if sudo.isdigit():
        uids.add(int(sudo))
    return uids


def unsafe_directory(path, shared=False):
    """Why another user of this machine could plant a symlink in ``path`` (or swap it or a parent for one), or
    None. Every directory from ``/`` down (symlinks resolved) is owned by a trusted user and writable by others
    only with the sticky bit (/tmp, /var/tmp); ``path`` itself is writable by nobody else unless ``shared``
    (scratch: its names are opened O_NOFOLLOW|O_EXCL, so a shared /tmp will do). Group write is allowed: Android's
    /data/local/tmp is 0771 shell:shell. A missing ``path`` is judged by its nearest existing parent."""
    trusted, given = trusted_uids(), os.path.abspath(path)
    where = given
    while not os.path.lexists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    prefix = "/"
    for part in where.strip("/").split("/") if where != "/" else []:
        prefix = os.path.join(prefix, part)
        st = os.lstat(prefix)
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in trusted:
            return "%s is a symlink owned by uid %d, who can point it anywhere" % (prefix, st.st_uid)
    current = os.path.realpath(where)
    while True:
        st = os.stat(current)
        if st.st_uid not in trusted:
            return "%s is owned by uid %d, another user (not root, not the runner's)" % (current, st.st_uid)
        itself = current == os.path.realpath(given)
        if st.st_mode & stat.S_IWOTH and ((itself and not shared) or not st.st_mode & stat.S_ISVTX):
            return "%s is writable by every user" % current
        if os.path.dirname(current) == current:
            return None
        current = os.path.dirname(current)


def sha256_file(path: PathArg) -> str:
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


def start_time(pid):
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot), or None when pid is gone: with the pid,
    what tells a live process from a later one given the same number."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            text = handle.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[19] if ")" in text else None
