"""The block device holding a file: which one it is, its queue settings and its stat line."""

import os

from runner import sysroot
from runner.util import read_text


def block_device_of(path):
    """The whole-disk block device (e.g. 'nvme0n1', 'vda') holding ``path``, or None."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    link = sysroot.path("/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev)))
    if not os.path.exists(link):
        return None
    real = os.path.realpath(link)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real)


def resolve_block_device(configured, files):
    if configured and configured != "auto":
        return configured
    for path in files:
        dev = block_device_of(path)
        if dev:
            return dev
    return None


def block_facts(dev):
    base = sysroot.path("/sys/block/%s" % dev)
    facts = {"block_device": dev}
    for key, rel in (("read_ahead_kb", "queue/read_ahead_kb"), ("rotational", "queue/rotational"),
                     ("scheduler", "queue/scheduler"), ("logical_block_size", "queue/logical_block_size"),
                     ("device_model", "device/model"), ("size_sectors", "size")):
        value = read_text(os.path.join(base, rel))
        if value is not None:
            facts["block_" + key] = value.strip()
    return facts


def blockstat_line(device):
    """The raw /sys/block/DEV/stat line of ``device`` right now, or None."""
    if not device:
        return None
    line = read_text(sysroot.path("/sys/block/%s/stat" % device))
    return line.strip() if line else None
