"""The root the runner reads the machine under: /proc, /sys, /etc and /system paths go through ``ROOT``.

``ROOT`` is ``HARNESS_SYSROOT`` (empty: this machine), like psutil's PROCFS_PATH, so tests replay real
captures from a fake tree. It is looked up at every call: a test may set ``sysroot.ROOT``.
"""

import os

from runner.util import read_text

ROOT = os.environ.get("HARNESS_SYSROOT", "")


def path(where):
    """Where ``where`` (an absolute path on the machine) is read."""
    return ROOT + where


def machine_path(found):
    """The machine's path of ``found``, a path under ROOT (from a glob of ``path(...)``)."""
    return found[len(ROOT):]


def text(where):
    value = read_text(path(where))
    return value.strip() if value is not None else None


def integer(where):
    value = text(where)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def integers(where):
    """A sorted list of the file's whitespace-separated integers (a frequency table), or None."""
    value = text(where)
    if not value:
        return None
    try:
        return sorted(int(v) for v in value.split())
    except ValueError:
        return None
