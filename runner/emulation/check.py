"""What this machine cannot do of a run's emulation: the preflight (``python3 -m runner.emulation check``) and
every emulated run ask first, and refuse with the list rather than run unemulated."""

import os

from runner.emulation import base, cgroup
from runner.emulation.base import block_path, nearest_existing, requested
from runner.emulation.cgroup import read
from runner.emulation.state import state_dir


def check(spec, device):
    """What is missing for ``spec`` on this machine, as short phrases (empty: all is possible)."""
    wanted = requested(spec or {})
    resources = base.resources(wanted)
    missing = []
    found = cgroup.detect()
    for resource in resources:
        if resource not in found:
            what = ("memory controller (no v2 memory.max, no v1 memory.limit_in_bytes)" if resource == "memory"
                    else "blkio/io controller (no v2 io.max, no v1 blkio.throttle.read_bps_device)")
            missing.append("no cgroup %s under %s" % (what, cgroup.cgroup_root()))
            continue
        existing = nearest_existing(cgroup.parent_dir(found[resource][0], found[resource][1], resource))
        if not os.access(existing, os.W_OK):
            missing.append("cannot create cgroups in %s (needs root)" % existing)
    if ("io" in resources or "read_ahead_kb" in wanted) and not device:
        missing.append("no block device known for the run's files (set block_device in the target)")
    elif device:
        if "io" in resources and read(block_path(device, "dev")) is None:
            missing.append("no %s (block device %s unknown)" % (block_path(device, "dev"), device))
        if "read_ahead_kb" in wanted:
            path = block_path(device, "queue/read_ahead_kb")
            if read(path) is None:
                missing.append("no %s" % path)
            elif not os.access(path, os.W_OK):
                missing.append("cannot write %s (needs root)" % path)
    if wanted and not os.access(nearest_existing(state_dir()), os.W_OK):
        missing.append("cannot write the emulation state directory %s" % state_dir())
    return missing


def refusal(missing):
    return "emulation refused, this machine cannot do it: " + "; ".join(missing)
