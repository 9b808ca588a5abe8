"""``python3 -m runner run SPEC | probe [--file F]... [--block-device D] | mkfile PATH SIZE [--owner SET]
| rmfile PATH --owner SET --inside DIR | free PATH | safedir DIR [--shared] | dirid DIR | reap SET[/TARGET]
| sha256 PATH | engine build|check SPEC``."""

import argparse
import errno
import json
import sys

from runner import agent, util
from runner.probes import machine


def _parser():
    parser = argparse.ArgumentParser(prog="runner")
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="execute one run spec; writes run.json and DONE beside it")
    run_p.add_argument("spec")
    probe_p = sub.add_parser("probe", help="print this machine's facts as JSON")
    probe_p.add_argument("--file", action="append", default=[])
    probe_p.add_argument("--block-device", default="auto")
    probe_p.add_argument("--tool", action="append", default=[], help="report where this program is (or null)")
    mk_p = sub.add_parser("mkfile", help="create an incompressible data file of SIZE bytes, synced to disk "
                          "(exit 3: a file there is not ours; 4: no space)")
    mk_p.add_argument("path")
    mk_p.add_argument("size", type=int)
    mk_p.add_argument("--owner", help="the campaign's set id: mark the file as its own (never overwrite another)")
    rm_p = sub.add_parser("rmfile", help="delete a data file this campaign created, inside its scratch dir")
    rm_p.add_argument("path")
    rm_p.add_argument("--owner", required=True)
    rm_p.add_argument("--inside", required=True, help="the scratch directory the file must be in")
    safe_p = sub.add_parser("safedir", help="print why another user could plant links in DIR (or null) as JSON")
    safe_p.add_argument("path")
    safe_p.add_argument("--shared", action="store_true", help="DIR itself may be a shared sticky dir (scratch)")
    dirid_p = sub.add_parser("dirid", help="print which directory DIR is (machine, device, inode) as JSON: do two "
                             "targets share it?")
    dirid_p.add_argument("path")
    free_p = sub.add_parser("free", help="print the free space of the file system holding PATH as JSON")
    free_p.add_argument("path")
    reap_p = sub.add_parser("reap", help="stop every process an earlier run left running, by its mark: SCOPE is "
                            "a set id (all its runs here) or SET/TARGET (one target's runs)")
    reap_p.add_argument("scope")
    hash_p = sub.add_parser("sha256", help="print a file's sha256 (boards without sha256sum: macOS, old Android)")
    hash_p.add_argument("path")
    engine_p = sub.add_parser("engine", help="build an engine into the board's build cache (or check the cache)")
    engine_p.add_argument("mode", choices=["build", "check"])
    engine_p.add_argument("spec")
    return parser


def _data_file(args):
    """mkfile and rmfile: the result as JSON; a file not ours, a full disk or a refused write as one line."""
    try:
        if args.command == "mkfile":
            print(json.dumps(util.make_data_file(args.path, args.size, owner=args.owner)))
        else:
            print(json.dumps({"removed": util.remove_data_file(args.path, args.owner, args.inside)}))
    except util.NotOurs as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 3
    except OSError as exc:  # disk full, permission: one line, not a traceback
        print("error: %s: %s" % (exc.filename or args.path, exc.strerror or exc), file=sys.stderr)
        return 4 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 1
    return 0


def _reap(scope):
    from runner import reap

    print(json.dumps(reap.reap(scope)))
    return 0


def _engine(mode, spec):
    from runner import enginebuild

    try:
        record = enginebuild.run_spec(spec, check_only=mode == "check")
    except enginebuild.EngineBuildError as exc:
        print("error: %s" % exc, file=sys.stderr, flush=True)
        return 1
    # the controller reads the last line: the build record (or null on a cache miss)
    print(json.dumps(record, sort_keys=True), flush=True)
    return 0


def _print(value):
    print(value)
    return 0


def main(argv=None):
    args = _parser().parse_args(argv)
    commands = {
        "run": lambda: agent.run(args.spec),
        "probe": lambda: _print(json.dumps(machine.facts(args.file, args.block_device, args.tool), sort_keys=True)),
        "mkfile": lambda: _data_file(args),
        "rmfile": lambda: _data_file(args),
        "free": lambda: _print(json.dumps(util.free_bytes(args.path))),
        "dirid": lambda: _print(json.dumps(util.directory_identity(args.path), sort_keys=True)),
        "safedir": lambda: _print(json.dumps(util.unsafe_directory(args.path, args.shared))),
        "reap": lambda: _reap(args.scope),
        "sha256": lambda: _print(util.sha256_file(args.path)),
        "engine": lambda: _engine(args.mode, args.spec),
    }
    command = commands.get(args.command)
    return command() if command else 2


if __name__ == "__main__":
    sys.exit(main())
