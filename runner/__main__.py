"""``python3 -m runner run SPEC | probe [--file F]... [--block-device D] | mkfile PATH SIZE``."""

import argparse
import json
import sys

from runner import agent, probe, util


def main(argv=None):
    parser = argparse.ArgumentParser(prog="runner")
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="execute one run spec; writes run.json and DONE beside it")
    run_p.add_argument("spec")
    probe_p = sub.add_parser("probe", help="print this machine's facts as JSON")
    probe_p.add_argument("--file", action="append", default=[])
    probe_p.add_argument("--block-device", default="auto")
    probe_p.add_argument("--tool", action="append", default=[], help="report where this program is (or null)")
    mk_p = sub.add_parser("mkfile", help="create an incompressible data file of SIZE bytes, synced to disk")
    mk_p.add_argument("path")
    mk_p.add_argument("size", type=int)
    args = parser.parse_args(argv)

    if args.command == "run":
        return agent.run(args.spec)
    if args.command == "probe":
        print(json.dumps(probe.facts(args.file, args.block_device, args.tool), sort_keys=True))
        return 0
    if args.command == "mkfile":
        print(json.dumps(util.make_data_file(args.path, args.size)))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
