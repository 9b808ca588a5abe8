"""``python3 -m runner.emulation check|repair``: the controller's emulation preflight and its clean-up after a
runner died."""

import argparse
import json
import sys

from runner.emulation import cgroup
from runner.emulation.base import KEYS, nearest_existing
from runner.emulation.check import check, refusal
from runner.emulation.repair import repair
from runner.probes.blockdev import resolve_block_device


def main(argv=None):
    """``python3 -m runner.emulation check --emulate JSON [--block-device D] [--file F]...``: the
    controller's preflight; prints one line and exits 1 when the machine cannot emulate.
    ``python3 -m runner.emulation repair``: the controller's clean-up after a runner died."""
    parser = argparse.ArgumentParser(prog="runner.emulation")
    sub = parser.add_subparsers(dest="command", required=True)
    check_p = sub.add_parser("check")
    check_p.add_argument("--emulate", required=True, help="JSON: which of %s are wanted" % ", ".join(KEYS))
    check_p.add_argument("--block-device", default="auto")
    check_p.add_argument("--file", action="append", default=[])
    sub.add_parser("repair", help="undo what a runner that died mid-run left changed; prints what (or null)")
    args = parser.parse_args(argv)
    if args.command == "repair":
        print(json.dumps(repair()))
        return 0
    wanted = json.loads(args.emulate)
    # files to be created later: their nearest existing directory tells the disk
    device = resolve_block_device(args.block_device, [nearest_existing(p) for p in args.file])
    missing = check(wanted, device)
    if missing:
        print(refusal(missing))
        return 1
    print(json.dumps({"ok": True, "device": device, "backends": dict((k, v[0]) for k, v in cgroup.detect().items())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
