"""What the emulation modules share: the error, the settings a run spec may ask for, and paths."""

import os

from runner import sysroot

KEYS = ("memory_bytes", "read_bytes_per_s", "read_iops", "read_ahead_kb")


class EmulationError(Exception):
    """The machine does not allow the requested emulation; the run is refused."""


def block_path(device, rel):
    """A file of the block device's sysfs directory (``dev``, ``queue/read_ahead_kb``)."""
    return sysroot.path("/sys/block/%s/%s" % (device, rel))


def requested(spec):
    """The settings of ``spec`` (the run spec's ``emulate``) that are set."""
    return dict((k, spec.get(k)) for k in KEYS if spec.get(k) is not None)


def resources(wanted):
    """The cgroup resources ``wanted`` needs: memory and/or io."""
    out = []
    if "memory_bytes" in wanted:
        out.append("memory")
    if "read_bytes_per_s" in wanted or "read_iops" in wanted:
        out.append("io")
    return out


def nearest_existing(path):
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path
